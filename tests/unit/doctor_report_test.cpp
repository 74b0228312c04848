// brisk doctor's report (report.json and report.md, which the terminal prints) on evidence
// recorded from a real probe of brisk serve (gemma3-270m Q4_K_M on the 2-vCPU test VM) and on
// /proc/stat text recorded there: per-core CPU, where the time went, the latency table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "doctor/attribution.h"
#include "doctor/doctor_report.h"
#include "doctor/telemetry_recorder.h"
#include "doctor/verdict.h"
#include "doctor/what_if.h"
#include "scratch_dir.h"
#include "telemetry/process_finder.h"

namespace brisk::doctor {
namespace {

bench::LatencySummary latency(double mean, double p50, double p95, double p99, size_t count) {
  bench::LatencySummary summary;
  summary.count = count;
  summary.mean = mean;
  summary.p50 = p50;
  summary.p90 = p95;
  summary.p95 = p95;
  summary.p99 = p99;
  summary.max = p99;
  return summary;
}

ProbePoint point(const std::string& stage, int concurrency, double ttft_ms, double itl_ms,
                 double e2e_ms, double tokens_per_s) {
  ProbePoint p;
  p.stage = stage;
  p.concurrency = concurrency;
  p.ok = 4 * concurrency;
  p.prompt_tokens_mean = 32;
  p.ttft_ms = latency(ttft_ms, ttft_ms, ttft_ms * 1.1, ttft_ms * 1.2, p.ok);
  p.itl_ms = latency(itl_ms, itl_ms, itl_ms * 1.5, itl_ms * 1.8, 60);
  p.e2e_ms = latency(e2e_ms * 1.02, e2e_ms, e2e_ms * 1.07, e2e_ms * 1.1, p.ok);
  p.max_itl_ms = itl_ms * 2;
  p.output_tokens_per_s = tokens_per_s;
  p.duration_s = 2;
  return p;
}

// brisk serve with its defaults, alone on the machine; server timings from `brisk_timings`.
Evidence recorded_probe() {
  Evidence e;
  e.url = "http://127.0.0.1:8080";
  e.model = "gemma3-270m";
  e.short_baseline = point("short", 1, 55, 21, 370, 43);
  e.short_baseline.server_ttft_ms_p50 = 53.8;
  e.short_baseline.server_queue_ms_p50 = 0.4;
  e.short_baseline.outside_server_ms_p50 = 1.2;
  e.ramp = {e.short_baseline, point("ramp", 2, 70, 31, 540, 59),
            point("ramp", 4, 110, 52, 890, 72)};
  e.ramp[0].stage = "ramp";
  e.ramp[2].server_ttft_ms_p50 = 108;
  e.ramp[2].server_queue_ms_p50 = 31;
  e.ramp[2].outside_server_ms_p50 = 1.9;
  e.ramp_stop_reason = "max concurrency";
  e.floor.decode_ms_per_token = 12.3;
  e.floor.device = "cpu-2vcpu";
  e.floor.source = "brisk plan floor";
  e.gpu.absent_reason = "NVML not loaded";
  e.metrics.absent_reason = "not scraped";
  return e;
}

std::string recorded(const std::string& name) {
  return telemetry::read_small_file(std::filesystem::path(BRISK_TEST_DATA_DIR) / "doctor" / name)
      .value_or("");
}

TEST(DoctorReport, PerCoreSharesOfRecordedProcStatReachJsonAndMarkdown) {
  // Two readings 2 s apart while one shell loop spun (tests/unit/data/doctor/proc_stat_*.txt).
  const auto before = telemetry::parse_proc_stat(recorded("proc_stat_before.txt"));
  const auto after = telemetry::parse_proc_stat(recorded("proc_stat_after.txt"));
  ASSERT_TRUE(before && after);
  Evidence evidence = recorded_probe();
  summarize_host_cpu(*before, *after, evidence.host);

  const nlohmann::json host =
      report_json(evidence, diagnose(evidence))["measurements"]["resources"]["host"];
  ASSERT_EQ(host["per_core"].size(), 2u);
  // cpu0: 114 user, 2 system, 83 idle, 0 iowait, 8 steal ticks of 207; cpu1: 84, 4, 106, 3, 10.
  const nlohmann::json& cpu0 = host["per_core"][0];
  const nlohmann::json& cpu1 = host["per_core"][1];
  EXPECT_EQ(cpu0["core"], 0);
  EXPECT_EQ(cpu1["core"], 1);
  EXPECT_NEAR(cpu0["user"].get<double>(), 114.0 / 207, 1e-9);
  EXPECT_NEAR(cpu0["system"].get<double>(), 2.0 / 207, 1e-9);
  EXPECT_NEAR(cpu0["iowait"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(cpu0["steal"].get<double>(), 8.0 / 207, 1e-9);
  EXPECT_NEAR(cpu0["busy"].get<double>(), 116.0 / 207, 1e-9);
  EXPECT_NEAR(cpu1["iowait"].get<double>(), 3.0 / 207, 1e-9);
  EXPECT_NEAR(cpu1["steal"].get<double>(), 10.0 / 207, 1e-9);
  EXPECT_NEAR(host["busiest_core_fraction"].get<double>(), 116.0 / 207, 1e-9);

  const std::string markdown = markdown_report(evidence, diagnose(evidence));
  EXPECT_NE(markdown.find("| per core busy (user/system/iowait/steal %) | cpu0 56% (55/1/0/4) · "
                          "cpu1 43% (41/2/1/5) | /proc/stat |"),
            std::string::npos)
      << markdown;
}

TEST(DoctorReport, ManyCoresListTheBusiestAndSumUpTheRest) {
  Evidence evidence = recorded_probe();
  for (int core = 0; core < 20; ++core) {
    telemetry::CpuShare share;
    share.user = core == 13 ? 0.9 : 0.1;
    evidence.host.per_core.push_back({core, share});
  }
  const std::string markdown = markdown_report(evidence, diagnose(evidence));
  EXPECT_NE(markdown.find("| cpu13 90% (90/0/0/0) · cpu0 10%"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("· 4 more, 10% busy on average |"), std::string::npos) << markdown;
}

TEST(DoctorReport, LatencyTableShowsE2eMeanP95AndP99LikeTtft) {
  Evidence evidence = recorded_probe();
  const std::string markdown = markdown_report(evidence, diagnose(evidence));
  EXPECT_NE(markdown.find("| TTFT mean | TTFT p95 | TTFT p99 | ITL p50 | E2E mean | E2E p50 | "
                          "E2E p95 | E2E p99 | output tokens/s |"),
            std::string::npos)
      << markdown;
  // short at concurrency 1: E2E mean 377.4, p50 370, p95 395.9, p99 407.
  EXPECT_NE(markdown.find("| 21.0 ms | 377.4 ms | 370.0 ms | 395.9 ms | 407.0 ms | 43.0 |"),
            std::string::npos)
      << markdown;
}

TEST(DoctorReport, EachPrescriptionsPredictedEffectReachesJsonAndMarkdown) {
  Evidence evidence = recorded_probe();
  evidence.ramp.back().server_queue_ms_p50 = 900;
  evidence.ramp.back().ttft_ms = latency(1100, 1100, 1400, 1500, 16);
  evidence.metrics = {};
  evidence.metrics.dialect = "brisk";
  evidence.metrics.running_max = 2;
  evidence.metrics.waiting_max = 2;
  Diagnosis diagnosis = diagnose(evidence);
  std::string why_not;
  const auto model = what_if_model("gemma3-270m", "cpu-2vcpu", why_not);
  ASSERT_TRUE(model) << why_not;
  predict_effects(evidence, model, why_not, diagnosis.findings);
  const nlohmann::json report = report_json(evidence, diagnosis);
  bool seen = false;
  for (const auto& finding : report["findings"]) {
    if (finding["id"] != "queueing") continue;
    seen = true;
    const auto& effect = finding["predicted_effect"];
    ASSERT_TRUE(effect.is_object()) << finding.dump(2);
    EXPECT_EQ(effect["metric"], "p99 TTFT");
    EXPECT_LT(effect["change"].get<double>(), 0);
    EXPECT_EQ(effect["measured_before"], 1500);
    EXPECT_NE(effect["origin"].get<std::string>().find("cpu-2vcpu"), std::string::npos);
  }
  EXPECT_TRUE(seen) << report["findings"].dump(2);
  const std::string markdown = markdown_report(evidence, diagnosis);
  EXPECT_NE(markdown.find("   - Predicted: p99 TTFT −"), std::string::npos) << markdown;
  // Without a device: said so, never a number.
  predict_effects(evidence, std::nullopt, "no GPU found; pass --device", diagnosis.findings);
  EXPECT_NE(markdown_report(evidence, diagnosis)
                .find("   - Predicted: not available (no GPU found; pass --device)."),
            std::string::npos);
}

TEST(DoctorAttribution, SplitsServerTtftIntoQueueAndPrefillAndDecodeAgainstTheFloor) {
  const Evidence evidence = recorded_probe();
  const PhaseAttribution alone = attribute_phases(evidence.short_baseline, evidence.floor);
  EXPECT_EQ(alone.stage, "short");
  EXPECT_EQ(alone.concurrency, 1);
  EXPECT_DOUBLE_EQ(*alone.outside_server_ms, 1.2);
  EXPECT_DOUBLE_EQ(*alone.server_ttft_ms, 53.8);
  EXPECT_DOUBLE_EQ(*alone.queue_ms, 0.4);
  EXPECT_NEAR(*alone.prefill_ms, 53.4, 1e-9);
  EXPECT_DOUBLE_EQ(*alone.decode_ms_per_token, 21);
  EXPECT_DOUBLE_EQ(*alone.floor_ms_per_token, 12.3);
  EXPECT_NEAR(*alone.decode_over_floor, 21 / 12.3, 1e-9);
  const PhaseAttribution top = attribute_phases(evidence.ramp.back(), evidence.floor);
  EXPECT_NEAR(*top.prefill_ms, 108 - 31, 1e-9);
  EXPECT_NEAR(*top.decode_over_floor, 52 / 12.3, 1e-9);
}

TEST(DoctorAttribution, WhatTheServerDidNotReportStaysUnmeasured) {
  // llama-server reports its prompt time but no queue time; no brisk plan floor for the model.
  ProbePoint point = recorded_probe().short_baseline;
  point.server_queue_ms_p50 = -1;
  const PhaseAttribution phases = attribute_phases(point, HardwareFloor{});
  EXPECT_TRUE(phases.server_ttft_ms);
  EXPECT_FALSE(phases.queue_ms);
  EXPECT_FALSE(phases.prefill_ms);
  EXPECT_FALSE(phases.floor_ms_per_token);
  EXPECT_FALSE(phases.decode_over_floor);
  point.server_ttft_ms_p50 = -1;
  point.outside_server_ms_p50 = -1;
  const PhaseAttribution none = attribute_phases(point, HardwareFloor{});
  EXPECT_FALSE(none.outside_server_ms);
  EXPECT_TRUE(none.decode_ms_per_token);
}

TEST(DoctorReport, WhereTheTimeWentForTheBaselineAndTheRampTop) {
  Evidence evidence = recorded_probe();
  evidence.ramp.back().server_queue_ms_p50 = -1;  // a server without queue timings at the top
  const Diagnosis diagnosis = diagnose(evidence);
  const nlohmann::json attribution =
      report_json(evidence, diagnosis)["measurements"]["attribution"];
  EXPECT_EQ(attribution["baseline"]["concurrency"], 1);
  EXPECT_NEAR(attribution["baseline"]["prefill_ms"].get<double>(), 53.4, 1e-9);
  EXPECT_DOUBLE_EQ(attribution["baseline"]["queue_ms"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(attribution["baseline"]["outside_server_ms"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(attribution["baseline"]["floor_ms_per_token"].get<double>(), 12.3);
  EXPECT_EQ(attribution["ramp_top"]["concurrency"], 4);
  EXPECT_TRUE(attribution["ramp_top"]["queue_ms"].is_null());
  EXPECT_TRUE(attribution["ramp_top"]["prefill_ms"].is_null());
  EXPECT_NEAR(attribution["ramp_top"]["decode_over_floor"].get<double>(), 52 / 12.3, 1e-9);

  const std::string markdown = markdown_report(evidence, diagnosis);
  EXPECT_NE(markdown.find("## Where the time went\n\n| phase (p50) | short at 1 concurrent | ramp "
                          "at 4 concurrent |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| outside the server (network + frontend) | 1.2 ms | 1.9 ms |"),
            std::string::npos);
  EXPECT_NE(markdown.find("| + prefill | 53.4 ms | n/a |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| decode / floor | 1.7x | 4.2x |"), std::string::npos) << markdown;

  // Without a baseline or a ramp there is nothing to attribute: nulls, and no table.
  Evidence empty;
  EXPECT_TRUE(
      report_json(empty, diagnose(empty))["measurements"]["attribution"]["baseline"].is_null());
  EXPECT_EQ(markdown_report(empty, diagnose(empty)).find("Where the time went"), std::string::npos);
}

TEST(DoctorReport, NvLinkThroughputWhenNvmlMeasuredIt) {
  Evidence evidence = recorded_probe();
  telemetry::GpuSample gpu;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.utilization_fraction = 0.95;
  gpu.nvlinks_active = 18;
  gpu.nvlink_tx_bytes_per_s = 41.5e9;
  gpu.nvlink_rx_bytes_per_s = 40.25e9;
  evidence.gpu.peak = {gpu, telemetry::GpuSample{}};
  evidence.gpu.utilization_mean = {0.93, 0};
  evidence.gpu.absent_reason.clear();
  const nlohmann::json gpus =
      report_json(evidence, diagnose(evidence))["measurements"]["resources"]["gpu"]["gpus"];
  EXPECT_DOUBLE_EQ(gpus[0]["nvlink_tx_bytes_per_s_peak"].get<double>(), 41.5e9);
  EXPECT_DOUBLE_EQ(gpus[0]["nvlink_rx_bytes_per_s_peak"].get<double>(), 40.25e9);
  EXPECT_TRUE(gpus[1]["nvlink_tx_bytes_per_s_peak"].is_null());  // not measured: not zero
  const std::string markdown = markdown_report(evidence, diagnose(evidence));
  EXPECT_NE(markdown.find("| GPU 0 NVLink TX / RX (peak) | 41.50 / 40.25 GB/s | NVML |"),
            std::string::npos)
      << markdown;
  EXPECT_EQ(markdown.find("GPU 1 NVLink"), std::string::npos);
}

TelemetryReading reading(double t_s, double host_cores, double server_cores,
                         std::vector<double> gpu_utilization = {},
                         std::vector<double> gpu_memory_used_bytes = {}) {
  TelemetryReading r;
  r.t_s = t_s;
  r.host_busy_cores = host_cores;
  r.server_cores = server_cores;
  r.gpu_utilization = std::move(gpu_utilization);
  r.gpu_memory_used_bytes = std::move(gpu_memory_used_bytes);
  return r;
}

TEST(DoctorPointResources, TheReadingsWhoseIntervalOverlapsThePoint) {
  // Readings every 0.25 s, each covering the 0.25 s before it; two GPUs.
  const std::vector<TelemetryReading> timeline = {reading(0.25, 1.0, 0.5, {0.2, 0.4}, {1e9, 2e9}),
                                                  reading(0.50, 1.5, 1.0, {0.6, 0.8}, {2e9, 2e9}),
                                                  reading(0.75, 2.0, 1.5, {1.0, 1.0}, {3e9, 3e9}),
                                                  reading(1.00, 0.5, 0.1, {0.0, 0.0}, {1e9, 1e9})};
  // 0.3..0.6 s overlaps (0.25, 0.5] and (0.5, 0.75].
  const PointResources point = resources_during(timeline, 0.3, 0.6);
  EXPECT_EQ(point.readings, 2);
  EXPECT_DOUBLE_EQ(*point.host_busy_cores_mean, 1.75);
  EXPECT_DOUBLE_EQ(*point.server_cores_mean, 1.25);
  EXPECT_DOUBLE_EQ(*point.gpu_utilization_mean, (0.6 + 0.8 + 1.0 + 1.0) / 4);
  EXPECT_DOUBLE_EQ(*point.gpu_memory_used_bytes_max, 6e9);
  // A point shorter than a reading gets the one around it.
  const PointResources short_point = resources_during(timeline, 0.8, 0.85);
  EXPECT_EQ(short_point.readings, 1);
  EXPECT_DOUBLE_EQ(*short_point.host_busy_cores_mean, 0.5);
}

TEST(DoctorPointResources, WhatNoReadingHadStaysUnmeasured) {
  // No GPU, the server not on this machine (-1), and a point that did not run.
  const std::vector<TelemetryReading> timeline = {reading(0.25, 1.0, -1), reading(0.5, 1.0, -1)};
  const PointResources point = resources_during(timeline, 0.0, 0.5);
  EXPECT_EQ(point.readings, 2);
  EXPECT_FALSE(point.server_cores_mean);
  EXPECT_FALSE(point.gpu_utilization_mean);
  EXPECT_FALSE(point.gpu_memory_used_bytes_max);
  EXPECT_EQ(resources_during(timeline, -1, -1).readings, 0);
  EXPECT_FALSE(resources_during(timeline, -1, -1).host_busy_cores_mean);
}

// The rows of report.html's #numbers table, each its cells' text.
std::vector<std::vector<std::string>> numbers_rows(const std::string& html) {
  std::vector<std::vector<std::string>> rows;
  const size_t table = html.find("<table id=\"numbers\">");
  if (table == std::string::npos) return rows;
  size_t at = html.find("<tbody>", table);
  const size_t end = html.find("</tbody>", at);
  while ((at = html.find("<tr>", at)) != std::string::npos && at < end) {
    const size_t row_end = html.find("</tr>", at);
    std::vector<std::string> cells;
    for (size_t cell = html.find("<td>", at); cell < row_end; cell = html.find("<td>", cell + 1)) {
      cells.push_back(html.substr(cell + 4, html.find("</td>", cell) - cell - 4));
    }
    rows.push_back(cells);
    at = row_end;
  }
  return rows;
}

TEST(DoctorReport, HtmlTableHasARowPerProbePointWithResourcesAndCost) {
  testing::ScratchDir dir;
  const auto chartjs = dir.path() / "chart.js";
  std::ofstream(chartjs) << "/* Chart.js stand-in: the page's markup is what is checked */";
  ASSERT_EQ(setenv("BRISK_CHARTJS", chartjs.c_str(), 1), 0);
  Evidence evidence = recorded_probe();
  evidence.usd_per_hour = 2.5;
  evidence.ramp[2].resources.readings = 4;
  evidence.ramp[2].resources.host_busy_cores_mean = 1.93;
  evidence.ramp[2].resources.server_cores_mean = 1.71;
  evidence.ramp[2].resources.gpu_utilization_mean = 0.875;
  evidence.ramp[2].resources.gpu_memory_used_bytes_max = 3.5 * (1 << 30);
  std::string error;
  const auto page = dir.path() / "report.html";
  ASSERT_TRUE(write_doctor_html(evidence, diagnose(evidence), {}, page, error)) << error;
  unsetenv("BRISK_CHARTJS");
  const auto rows = numbers_rows(testing::read_file(page));
  // The short baseline and the ramp's two doublings; the cold and long points did not run.
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0][0], "short");
  ASSERT_EQ(rows[2].size(), 20u);
  // ramp c=4: TTFT mean 110, p50 110, p95 121, p99 132; ITL p50 52, p99 93.6; 72 tokens/s.
  EXPECT_EQ(std::vector<std::string>(rows[2].begin(), rows[2].begin() + 8),
            (std::vector<std::string>{"ramp", "4", "16", "0", "110.0", "110.0", "121.0", "132.0"}));
  EXPECT_EQ(std::vector<std::string>(rows[2].begin() + 12, rows[2].end()),
            (std::vector<std::string>{"52.0", "93.6", "72.0", "87.5", "3.50", "1.71", "1.93",
                                      "9.645"}));  // $2.5/h at 72 tokens/s: $9.645 per 1M
  // Not measured on the baseline: an em dash, never 0.
  EXPECT_EQ(rows[0][15], "—");
  EXPECT_EQ(rows[0][16], "—");
}

TEST(DoctorReport, TheWorkloadAndEachPointsWindowAndResourcesReachJsonAndMarkdown) {
  Evidence evidence = recorded_probe();
  evidence.workload.trace_path = "traffic.jsonl";
  evidence.workload.trace_format = "brisk";
  evidence.workload.trace_requests = 120;
  evidence.workload.short_input_tokens = 180;
  evidence.workload.trace_prefix_sharing = 0.4;
  evidence.workload.shared_prefix_fraction = 0.4;
  evidence.workload.flags_over_trace = {"--long-input-tokens"};
  evidence.short_baseline.start_s = 1.5;
  evidence.short_baseline.end_s = 3.25;
  evidence.short_baseline.resources.readings = 7;
  evidence.short_baseline.resources.host_busy_cores_mean = 1.2;
  const nlohmann::json measurements = report_json(evidence, diagnose(evidence))["measurements"];
  const nlohmann::json& workload = measurements["workload"];
  EXPECT_EQ(workload["source"], "trace");
  EXPECT_EQ(workload["trace"], "traffic.jsonl");
  EXPECT_EQ(workload["trace_format"], "brisk");
  EXPECT_EQ(workload["trace_requests"], 120);
  EXPECT_EQ(workload["short_input_tokens"], 180);
  EXPECT_DOUBLE_EQ(workload["shared_prefix_fraction"].get<double>(), 0.4);
  EXPECT_EQ(workload["flags_over_trace"], nlohmann::json::array({"--long-input-tokens"}));
  const nlohmann::json& short_point = measurements["probe"]["short"];
  EXPECT_DOUBLE_EQ(short_point["start_s"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(short_point["end_s"].get<double>(), 3.25);
  EXPECT_EQ(short_point["resources"]["readings"], 7);
  EXPECT_DOUBLE_EQ(short_point["resources"]["host_busy_cores_mean"].get<double>(), 1.2);
  EXPECT_TRUE(short_point["resources"]["gpu_utilization_mean"].is_null());
  EXPECT_TRUE(measurements["probe"]["cold"]["start_s"].is_null());  // it did not run
  const std::string markdown = markdown_report(evidence, diagnose(evidence));
  EXPECT_NE(markdown.find("Workload: short prompts 180 tokens in"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("from the brisk trace traffic.jsonl (120 requests"), std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("--long-input-tokens given explicitly"), std::string::npos) << markdown;
  EXPECT_EQ(report_json(Evidence{}, Diagnosis{})["measurements"]["workload"]["source"],
            "synthetic");
}

}  // namespace
}  // namespace brisk::doctor
