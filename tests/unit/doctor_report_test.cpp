// brisk doctor's report (report.json and report.md, which the terminal prints) on evidence
// recorded from a real probe of brisk serve (gemma3-270m Q4_K_M on the 2-vCPU test VM) and on
// /proc/stat text recorded there: per-core CPU, where the time went, the latency table.
#include <gtest/gtest.h>

#include <filesystem>

#include "doctor/attribution.h"
#include "doctor/doctor_report.h"
#include "doctor/telemetry_recorder.h"
#include "doctor/verdict.h"
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

}  // namespace
}  // namespace brisk::doctor
