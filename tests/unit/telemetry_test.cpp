// The samplers on /proc and /metrics text recorded on the test VM (tests/unit/data/doctor).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "scratch_dir.h"
#include "telemetry/cpu_times.h"
#include "telemetry/gpu_interconnect.h"
#include "telemetry/memory_info.h"
#include "telemetry/nvml_sampler.h"
#include "telemetry/process_finder.h"
#include "telemetry/prometheus_text.h"
#include "telemetry/server_metrics.h"

namespace brisk::telemetry {
namespace {

std::string recorded(const std::string& name) {
  const auto text = read_small_file(std::filesystem::path(BRISK_TEST_DATA_DIR) / "doctor" / name);
  EXPECT_TRUE(text) << name;
  return text.value_or("");
}

TEST(TelemetryProcStat, ReadsEveryCoreAndTheTotal) {
  const auto snapshot = parse_proc_stat(recorded("proc_stat_before.txt"));
  ASSERT_TRUE(snapshot);
  ASSERT_EQ(snapshot->cores.size(), 2u);
  // cpu0 3497821 288047 285850 1318967 5608 0 3066 48069: nice joins user, softirq joins system.
  EXPECT_EQ(snapshot->cores[0].user, 3497821u + 288047u);
  EXPECT_EQ(snapshot->cores[0].system, 285850u + 3066u);
  EXPECT_EQ(snapshot->cores[0].idle, 1318967u);
  EXPECT_EQ(snapshot->cores[0].iowait, 5608u);
  EXPECT_EQ(snapshot->cores[0].steal, 48069u);
}

TEST(TelemetryProcStat, SharesBetweenTwoReadingsWhileOneCoreSpun) {
  // Recorded 2 s apart while `while :; do :; done` ran (the scheduler moved it between cores).
  const auto before = parse_proc_stat(recorded("proc_stat_before.txt"));
  const auto after = parse_proc_stat(recorded("proc_stat_after.txt"));
  ASSERT_TRUE(before && after);
  const CpuShare all = cpu_share_between(before->all, after->all);
  // 198 user + 5 system + 1 softirq of 415 ticks in all: about one core of two busy.
  EXPECT_NEAR(all.busy(), (198.0 + 5 + 1) / (198 + 5 + 1 + 188 + 3 + 18), 1e-9);
  EXPECT_NEAR(all.steal, 18.0 / 413, 1e-3);
  const auto cores = core_shares_between(*before, *after);
  ASSERT_EQ(cores.size(), 2u);
  EXPECT_GT(cores[0].busy() + cores[1].busy(), 0.9);
  for (const CpuShare& core : cores) EXPECT_LE(core.busy() + core.steal + core.iowait, 1.0);
}

TEST(TelemetryProcStat, NumbersCoresByTheirLinesWhenACpuIsOffline) {
  // cpu1 offline: /proc/stat has no line for it, so cpu2 is the second core listed.
  const char* before =
      "cpu  300 0 30 600 0 0 0 0\ncpu0 100 0 10 300 0 0 0 0\ncpu2 200 0 20 300 0 0 0 0\n";
  const char* after =
      "cpu  500 0 30 800 0 0 0 0\ncpu0 100 0 10 500 0 0 0 0\ncpu2 400 0 20 300 0 0 0 0\n";
  const auto first = parse_proc_stat(before);
  const auto last = parse_proc_stat(after);
  ASSERT_TRUE(first && last);
  EXPECT_EQ(last->core_ids, (std::vector<int>{0, 2}));
  const auto cores = numbered_core_shares_between(*first, *last);
  ASSERT_EQ(cores.size(), 2u);
  EXPECT_EQ(cores[0].core, 0);
  EXPECT_DOUBLE_EQ(cores[0].share.busy(), 0);
  EXPECT_EQ(cores[1].core, 2);
  EXPECT_DOUBLE_EQ(cores[1].share.user, 1);
  // A different set of cores between the readings: no per-core comparison.
  const auto other =
      parse_proc_stat("cpu  1 0 1 1 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n");
  ASSERT_TRUE(other);
  EXPECT_TRUE(numbered_core_shares_between(*first, *other).empty());
}

TEST(TelemetryProcStat, RejectsTextWithoutACpuLine) {
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3\nctxt 5\n"));
  EXPECT_FALSE(parse_proc_stat(""));
}

TEST(TelemetryMeminfo, ReadsTotalAndAvailable) {
  const auto memory = parse_meminfo(recorded("proc_meminfo.txt"));
  ASSERT_TRUE(memory);
  EXPECT_GT(memory->total_bytes, 20ull << 30);  // the VM has 24 GiB
  EXPECT_LE(memory->available_bytes, memory->total_bytes);
  EXPECT_FALSE(parse_meminfo("MemTotal: 100 kB\n"));  // no MemAvailable: no guess
}

TEST(TelemetryProcessFinder, FindsListeningSocketsInTcpAndTcp6) {
  // A Python listener on 127.0.0.1:38080 (0x94C0) and [::1]:38081 (0x94C1), and sshd-like 2024.
  EXPECT_EQ(listening_inodes(recorded("proc_net_tcp.txt"), 38080), std::set<uint64_t>{6848602});
  EXPECT_EQ(listening_inodes(recorded("proc_net_tcp6.txt"), 38081), std::set<uint64_t>{6848603});
  EXPECT_TRUE(listening_inodes(recorded("proc_net_tcp.txt"), 9).empty());
}

TEST(TelemetryProcessFinder, FindsTheProcessHoldingTheSocket) {
  brisk::testing::ScratchDir proc;
  namespace fs = std::filesystem;
  fs::create_directories(proc.path() / "net");
  fs::copy_file(std::filesystem::path(BRISK_TEST_DATA_DIR) / "doctor" / "proc_net_tcp.txt",
                proc.path() / "net" / "tcp");
  fs::create_directories(proc.path() / "77" / "fd");
  fs::create_directories(proc.path() / "4242" / "fd");
  fs::create_directories(proc.path() / "self");  // not a pid: skipped
  fs::create_symlink("socket:[1050]", proc.path() / "77" / "fd" / "3");
  fs::create_symlink("/dev/null", proc.path() / "4242" / "fd" / "0");
  fs::create_symlink("socket:[6848602]", proc.path() / "4242" / "fd" / "5");
  EXPECT_EQ(find_listening_process(proc.path(), 38080), 4242);
  EXPECT_EQ(find_listening_process(proc.path(), 2024), 77);
  EXPECT_EQ(find_listening_process(proc.path(), 38081), std::nullopt);  // no tcp6 table here
}

TEST(TelemetryProcessFinder, ReadsProcessCpuEvenWithParenthesesInTheName) {
  const auto cpu = parse_process_stat(
      "4242 (brisk (serve)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 56 0 0 20 0 7 0 100 "
      "300000000 20000 18446744073709551615");
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->command, "brisk (serve)");
  EXPECT_EQ(cpu->user_ticks, 1234u);
  EXPECT_EQ(cpu->system_ticks, 56u);
  EXPECT_EQ(cpu->threads, 7);
  EXPECT_FALSE(parse_process_stat("4242 (short) S 1 2"));
}

TEST(TelemetryProcessFinder, FindsThisTestsOwnListenerOnTheRealProc) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  EXPECT_EQ(find_listening_process("/proc", port), getpid());
  close(listener);
  EXPECT_EQ(find_listening_process("/proc", port), std::nullopt);
  const auto own = read_small_file("/proc/self/stat");
  ASSERT_TRUE(own);
  EXPECT_TRUE(parse_process_stat(*own));
}

TEST(TelemetryPrometheus, ParsesBrisksOwnMetrics) {
  std::string error;
  const auto parsed = parse_prometheus_text(recorded("metrics_brisk.txt"), error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->types.at("brisk_kv_cache_usage_ratio"), "gauge");
  const ServerMetrics metrics = read_server_metrics(parsed->samples);
  EXPECT_EQ(metrics.dialect, "brisk");
  EXPECT_EQ(metrics.requests_running, 0);
  EXPECT_EQ(metrics.requests_waiting, 0);
  ASSERT_TRUE(metrics.kv_usage_fraction);
  EXPECT_EQ(metrics.preemptions_total, 0);
}

TEST(TelemetryPrometheus, ARunsDeltaCountsWhatChangedOnTheServer) {
  const auto read = [](const std::string& text) {
    std::string error;
    const auto parsed = parse_prometheus_text(text, error);
    EXPECT_TRUE(parsed) << error;
    return read_server_metrics(parsed ? parsed->samples : std::vector<MetricSample>{});
  };
  const ServerMetrics before = read(
      "brisk_requests_waiting 0\nbrisk_requests_running 0\nbrisk_preemptions_total 2\n"
      "brisk_prefix_cache_query_tokens_total 1000\nbrisk_prefix_cache_hit_tokens_total 100\n"
      "brisk_requests_rejected_total{reason=\"queue_full\"} 3\n");
  const ServerMetrics after = read(
      "brisk_requests_waiting 1\nbrisk_requests_running 4\nbrisk_preemptions_total 5\n"
      "brisk_prefix_cache_query_tokens_total 3000\nbrisk_prefix_cache_hit_tokens_total 600\n"
      "brisk_requests_rejected_total{reason=\"queue_full\"} 7\n"
      "brisk_requests_rejected_total{reason=\"invalid_request\"} 1\n");
  const nlohmann::json delta = server_metrics_delta(before, after);
  EXPECT_EQ(delta["dialect"], "brisk");
  EXPECT_EQ(delta["prefix_cache_query_tokens"], 2000);
  EXPECT_EQ(delta["prefix_cache_hit_tokens"], 500);
  EXPECT_DOUBLE_EQ(delta["prefix_cache_hit_rate"].get<double>(), 0.25);
  EXPECT_EQ(delta["preemptions"], 3);
  EXPECT_EQ(delta["rejections"], (nlohmann::json{{"queue_full", 4}, {"invalid_request", 1}}));
  // A server without prefix counters or rejection reasons: nulls, not zeros.
  const ServerMetrics tgi = read("tgi_queue_size 0\ntgi_batch_current_size 1\n");
  const nlohmann::json none = server_metrics_delta(tgi, tgi);
  EXPECT_TRUE(none["prefix_cache_hit_rate"].is_null());
  EXPECT_TRUE(none["preemptions"].is_null());
  EXPECT_TRUE(none["rejections"].is_null());
}

TEST(TelemetryPrometheus, ReadsOneModelOfAServerOfSeveral) {
  std::string error;
  const auto parsed = parse_prometheus_text(
      "brisk_requests_waiting{model=\"a\"} 1\nbrisk_requests_waiting{model=\"b\"} 5\n"
      "brisk_requests_running{model=\"a\"} 2\nbrisk_requests_running{model=\"b\"} 16\n"
      "brisk_requests_rejected_total{reason=\"unauthorized\"} 1\n"
      "brisk_requests_rejected_total{model=\"a\",reason=\"queue_full\"} 2\n"
      "brisk_requests_rejected_total{model=\"b\",reason=\"queue_full\"} 9\n"
      "brisk_device_busy_seconds_total{model=\"a\"} 3\n"
      "brisk_device_busy_seconds_total{model=\"b\"} 12\n"
      "brisk_arbiter_wait_seconds_sum{model=\"a\"} 1.5\n"
      "brisk_arbiter_wait_seconds_count{model=\"a\"} 30\n"
      "brisk_arbiter_wait_seconds_sum{model=\"b\"} 0.1\n"
      "brisk_arbiter_wait_seconds_count{model=\"b\"} 60\n",
      error);
  ASSERT_TRUE(parsed) << error;
  const ServerMetrics a = read_server_metrics(parsed->samples, "a");
  EXPECT_EQ(a.requests_waiting, 1);
  EXPECT_EQ(a.requests_running, 2);
  // Its own refusals and the server-wide ones, not the other model's.
  EXPECT_EQ(a.rejections_total,
            (std::map<std::string, double>{{"queue_full", 2}, {"unauthorized", 1}}));
  EXPECT_EQ(a.device_busy_seconds_by_model, (std::map<std::string, double>{{"a", 3}, {"b", 12}}));
  EXPECT_EQ(a.arbiter_wait_seconds_total, 1.5);
  EXPECT_EQ(a.arbiter_waits_total, 30);
  // Without a model, or one the server does not label: every model summed, as before.
  EXPECT_EQ(read_server_metrics(parsed->samples).requests_running, 18);
  EXPECT_EQ(read_server_metrics(parsed->samples, "c").requests_running, 18);
}

TEST(TelemetryPrometheus, ReadsBrisksEmbeddingBatcher) {
  // brisk serve with an embedding model alone exports no chat queue: its batcher's queue is
  // what marks the dialect.
  std::string error;
  const auto parsed = parse_prometheus_text(
      "brisk_embedding_batch_inputs_sum 40\nbrisk_embedding_batch_inputs_count 8\n"
      "brisk_embedding_batch_tokens_sum 2600\nbrisk_embedding_batch_tokens_count 8\n"
      "brisk_embedding_batch_compute_seconds_sum 0.6\n"
      "brisk_embedding_batch_compute_seconds_count 8\n"
      "brisk_embedding_window_wait_seconds_sum 0.4\n"
      "brisk_embedding_window_wait_seconds_count 40\n"
      "brisk_embedding_tokenize_seconds_sum 0.002\nbrisk_embedding_tokenize_seconds_count 40\n"
      "brisk_embedding_queued_requests 3\n",
      error);
  ASSERT_TRUE(parsed) << error;
  const ServerMetrics metrics = read_server_metrics(parsed->samples);
  EXPECT_EQ(metrics.dialect, "brisk");
  EXPECT_EQ(metrics.requests_waiting, 3);
  ASSERT_TRUE(metrics.embedding);
  EXPECT_EQ(metrics.embedding->batches, 8);
  EXPECT_EQ(metrics.embedding->batch_inputs, 40);
  EXPECT_EQ(metrics.embedding->batch_tokens, 2600);
  EXPECT_DOUBLE_EQ(metrics.embedding->compute_seconds, 0.6);
  EXPECT_DOUBLE_EQ(metrics.embedding->window_wait_seconds, 0.4);
  EXPECT_EQ(metrics.embedding->waited_inputs, 40);
  EXPECT_DOUBLE_EQ(metrics.embedding->tokenize_seconds, 0.002);
  EXPECT_EQ(metrics.embedding->tokenized_requests, 40);
  // A chat model's brisk serve: no batcher.
  const auto chat = parse_prometheus_text("brisk_requests_waiting 0\nbrisk_requests_running 1\n",
                                          error);
  ASSERT_TRUE(chat) << error;
  EXPECT_FALSE(read_server_metrics(chat->samples).embedding);
}

TEST(TelemetryPrometheus, ParsesLlamaServersMetrics) {
  std::string error;
  const auto parsed = parse_prometheus_text(recorded("metrics_llama_server.txt"), error);
  ASSERT_TRUE(parsed) << error;
  const ServerMetrics metrics = read_server_metrics(parsed->samples);
  EXPECT_EQ(metrics.dialect, "llama.cpp");
  ASSERT_TRUE(metrics.prefix_query_tokens_total && metrics.prefix_hit_tokens_total);
  // Queries are processed + cached tokens: llama.cpp counts the processed ones without hits.
  EXPECT_GE(*metrics.prefix_query_tokens_total, *metrics.prefix_hit_tokens_total);
  EXPECT_FALSE(metrics.kv_usage_fraction);  // this version exports none
}

TEST(TelemetryPrometheus, ReadsVllmSglangAndTgiNames) {
  std::string error;
  for (const auto& [file, dialect] :
       std::vector<std::pair<std::string, std::string>>{{"metrics_vllm.txt", "vllm"},
                                                        {"metrics_sglang.txt", "sglang"},
                                                        {"metrics_tgi.txt", "tgi"}}) {
    SCOPED_TRACE(file);
    const auto parsed = parse_prometheus_text(recorded(file), error);
    ASSERT_TRUE(parsed) << error;
    const ServerMetrics metrics = read_server_metrics(parsed->samples);
    EXPECT_EQ(metrics.dialect, dialect);
    EXPECT_TRUE(metrics.requests_waiting);
    EXPECT_TRUE(metrics.requests_running);
    if (dialect == "vllm") {
      EXPECT_DOUBLE_EQ(*metrics.kv_usage_fraction, 0.997);  // vLLM 6737's "99.7% full"
      EXPECT_EQ(metrics.preemptions_total, 12);
      EXPECT_EQ(metrics.prefix_query_tokens_total, 20480);
      EXPECT_EQ(metrics.prefix_hit_tokens_total, 16384);
      EXPECT_EQ(metrics.requests_running, 3);  // two engines' series add up
    }
    if (dialect == "sglang") {
      EXPECT_DOUBLE_EQ(*metrics.kv_usage_fraction, 0.28);
      EXPECT_DOUBLE_EQ(*metrics.prefix_hit_rate, 0.0075);
    }
    if (dialect == "tgi") EXPECT_FALSE(metrics.kv_usage_fraction);
  }
}

TEST(TelemetryPrometheus, LabelEscapesTimestampsAndSpecialValues) {
  std::string error;
  const auto parsed = parse_prometheus_text(
      "# HELP x a help line with {braces}\n"
      "x{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\"} 1.5e3 1712345678000\n"
      "y +Inf\nz NaN\nw{} -2\n",
      error);
  ASSERT_TRUE(parsed) << error;
  ASSERT_EQ(parsed->samples.size(), 4u);
  EXPECT_EQ(parsed->samples[0].labels.at("path"), "C:\\dir");
  EXPECT_EQ(parsed->samples[0].labels.at("quote"), "say \"hi\"");
  EXPECT_EQ(parsed->samples[0].labels.at("nl"), "a\nb");
  EXPECT_EQ(parsed->samples[0].value, 1500);
  EXPECT_TRUE(std::isinf(parsed->samples[1].value));
  EXPECT_FALSE(sum_samples(parsed->samples, "z"));  // NaN is no value
  EXPECT_EQ(sum_samples(parsed->samples, "w"), -2);
}

TEST(TelemetryPrometheus, RejectsMalformedLinesNamingThem) {
  for (const char* text :
       {"x{a=\"1\" 2\n", "x{a=1} 2\n", "x 1\n9x 2\n", "x one\n", "{a=\"b\"} 1\n"}) {
    SCOPED_TRACE(text);
    std::string error;
    EXPECT_FALSE(parse_prometheus_text(text, error));
    EXPECT_NE(error.find("line"), std::string::npos) << error;
  }
}

TEST(TelemetryNvml, AbsenceIsReportedNotFatal) {
  // A library that does not exist stands for a machine without an NVIDIA driver.
  setenv("BRISK_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  std::string why;
  EXPECT_EQ(NvmlSampler::open(why), nullptr);
  EXPECT_NE(why.find("NVML not loaded"), std::string::npos) << why;
  // A library that exists but is not NVML: loaded, no entry points, still a clean absence.
  setenv("BRISK_NVML_LIBRARY", "libm.so.6", 1);
  why.clear();
  EXPECT_EQ(NvmlSampler::open(why), nullptr);
  EXPECT_NE(why.find("did not initialize"), std::string::npos) << why;
  unsetenv("BRISK_NVML_LIBRARY");
}

TEST(TelemetryNvml, NvLinkKibCountersBecomeBytesPerSecond) {
  // 2,000 KiB more over half a second.
  EXPECT_DOUBLE_EQ(*kib_counter_bytes_per_s(1000, 3000, 1'000'000, 1'500'000), 2000 * 1024 / 0.5);
  EXPECT_DOUBLE_EQ(*kib_counter_bytes_per_s(7, 7, 0, 250'000), 0);  // idle links: zero, measured
  EXPECT_FALSE(kib_counter_bytes_per_s(3000, 1000, 0, 500'000));    // reset by a driver reload
  EXPECT_FALSE(kib_counter_bytes_per_s(1000, 3000, 500'000, 500'000));  // no time passed
}

TEST(TelemetryNvml, TopologyNamesNvLinkFromTheLinksFarEnds) {
  const PciAddress gpu0{0, 0x1b, 0}, gpu1{0, 0x43, 0}, gpu2{0, 0x52, 0}, nvswitch{0, 0x9a, 0};
  // GPU 0 and 1 bridged to each other; GPU 2 has no NVLink.
  std::vector<GpuNvLinks> bridged = {{gpu0, 2, std::vector<PciAddress>{gpu1, gpu1}},
                                     {gpu1, 2, std::vector<PciAddress>{gpu0, gpu0}},
                                     {gpu2, 0, std::vector<PciAddress>{}}};
  EXPECT_EQ(gpu_link_kind(bridged, 0, 1, 30), "NVLink");
  EXPECT_EQ(gpu_link_kind(bridged, 0, 2, 30), "PHB");
  EXPECT_EQ(gpu_link_kind(bridged, 1, 2, 50), "SYS");
  // Two bridged pairs: GPU 0 and GPU 3 both have active links, but not to each other.
  const PciAddress gpu3{0, 0x61, 0};
  std::vector<GpuNvLinks> pairs = {{gpu0, 1, std::vector<PciAddress>{gpu1}},
                                   {gpu1, 1, std::vector<PciAddress>{gpu0}},
                                   {gpu2, 1, std::vector<PciAddress>{gpu3}},
                                   {gpu3, 1, std::vector<PciAddress>{gpu2}}};
  EXPECT_EQ(gpu_link_kind(pairs, 0, 3, 40), "NODE");
  EXPECT_EQ(gpu_link_kind(pairs, 2, 3, 40), "NVLink");
  // HGX: every GPU's links end at NVSwitches, which connect all of them.
  std::vector<GpuNvLinks> switched = {{gpu0, 18, std::vector<PciAddress>(18, nvswitch)},
                                      {gpu1, 18, std::vector<PciAddress>(18, nvswitch)}};
  EXPECT_EQ(gpu_link_kind(switched, 0, 1, 50), "NVLink");
  // A driver that cannot name the far ends: both with active links is taken as NVLink.
  std::vector<GpuNvLinks> unnamed = {
      {gpu0, 4, std::nullopt}, {gpu1, 4, std::nullopt}, {gpu2, 0, std::nullopt}};
  EXPECT_EQ(gpu_link_kind(unnamed, 0, 1, 10), "NVLink");
  EXPECT_EQ(gpu_link_kind(unnamed, 0, 2, 10), "PIX");
  EXPECT_EQ(gpu_link_kind(unnamed, 0, 2, -1), "unknown");
}

}  // namespace
}  // namespace brisk::telemetry
