// brisk doctor's rules over the embeddings probe, on evidence with the numbers of real probes of
// all-MiniLM-L6-v2 (F16, 2 threads) on the 2-vCPU test VM, 2026-12-06: brisk serve with its
// defaults, with --batch-window-ms 20, with --max-batch-tokens 96, and llama-server
// --embeddings -np 1 / -np 8.
#include <gtest/gtest.h>

#include "doctor/rules.h"
#include "doctor/verdict.h"

namespace brisk::doctor {
namespace {

bench::LatencySummary latency(double p50, double p99, size_t count) {
  bench::LatencySummary summary;
  summary.count = count;
  summary.mean = summary.p50 = p50;
  summary.p90 = summary.p95 = (p50 + p99) / 2;
  summary.p99 = summary.max = p99;
  return summary;
}

// A load point of `requests` requests; with `batches` > 0, what brisk's batcher counted.
EmbeddingPoint point(int concurrency, double p50_ms, double inputs_per_s, double batches = 0,
                     double inputs_per_batch = 0, double wait_ms = 0, double compute_ms = 0,
                     double tokenize_ms = 0.1) {
  EmbeddingPoint p;
  p.stage = "ramp";
  p.concurrency = concurrency;
  p.ok = 8 * concurrency;
  p.latency_ms = latency(p50_ms, 1.5 * p50_ms, p.ok);
  p.inputs_per_s = inputs_per_s;
  p.duration_s = p.ok / inputs_per_s;
  if (batches > 0) {
    EmbeddingBatcherDelta b;
    b.batches = batches;
    b.batch_inputs = batches * inputs_per_batch;
    b.waited_inputs = b.batch_inputs;
    b.window_wait_ms = wait_ms * b.waited_inputs;
    b.compute_ms = compute_ms * batches;
    b.tokenized_requests = p.ok;
    b.tokenize_ms = tokenize_ms * p.ok;
    p.batcher = b;
  }
  return p;
}

Evidence embeddings(std::vector<EmbeddingPoint> ramp, const std::string& stop = "plateau",
                    const std::string& dialect = "brisk") {
  Evidence e;
  e.url = "http://127.0.0.1:8080";
  e.model = "all-minilm-l6-v2";
  e.embeddings.input_tokens = 64;
  e.embeddings.cold = ramp.front();
  e.embeddings.cold.stage = "cold";
  e.embeddings.ramp = std::move(ramp);
  e.embeddings.ramp_stop_reason = stop;
  e.metrics.dialect = dialect;
  e.host.cores = 2;
  return e;
}

// brisk serve's defaults: batches grow with the clients, the model busy nearly all the time.
Evidence brisk_defaults() {
  // Every batch's 8 inputs: at 8 clients 32 batches of 5.33 inputs in 64 requests' 0.97 s.
  return embeddings({point(1, 23.0, 40.0, 16, 1.0, 0.05, 23.9),
                     point(2, 39.4, 53.8, 10, 1.6, 1.5, 28.8),
                     point(4, 56.3, 63.6, 12, 2.67, 7.4, 40.8),
                     point(8, 98.5, 65.7, 12, 5.33, 13.9, 79.5)});
}

const Finding* find(const Diagnosis& diagnosis, const std::string& id) {
  for (const Finding& finding : diagnosis.findings) {
    if (finding.id == id) return &finding;
  }
  return nullptr;
}

TEST(DoctorEmbeddings, BatchingDefaultsAreHealthyAndTheModelIsTheLimit) {
  const Diagnosis diagnosis = diagnose(brisk_defaults());
  EXPECT_EQ(diagnosis.verdict.primary_cause, "healthy");
  EXPECT_TRUE(diagnosis.verdict.accelerator_bound);
  const Finding* saturated = find(diagnosis, "compute_saturated");
  ASSERT_NE(saturated, nullptr);
  EXPECT_EQ(saturated->severity, Severity::info);
  EXPECT_EQ(find(diagnosis, "no_batching"), nullptr);
  EXPECT_EQ(find(diagnosis, "batch_window_too_long"), nullptr);
  EXPECT_EQ(find(diagnosis, "cpu_bound_frontend"), nullptr);
}

TEST(DoctorEmbeddings, AWindowThatDominatesTheLatencyAloneIsTooLong) {
  // --batch-window-ms 20: alone, each input waits the whole window for company.
  Evidence e = embeddings({point(1, 37.1, 24.8, 16, 1.0, 20.2, 19.0),
                           point(2, 61.1, 34.0, 8, 2.0, 20.0, 37.7),
                           point(4, 78.3, 48.1, 8, 4.0, 19.6, 61.7)},
                          "max_concurrency");
  Diagnosis diagnosis = diagnose(e);
  EXPECT_EQ(diagnosis.verdict.primary_cause, "batch_window_too_long");
  const Finding* window = find(diagnosis, "batch_window_too_long");
  ASSERT_NE(window, nullptr);
  EXPECT_EQ(window->severity, Severity::critical);  // 54% of the median
  EXPECT_EQ(window->serve_flags, (std::vector<std::string>{"--batch-window-ms", "0"}));
  EXPECT_NEAR(window->impact, 20.2 / 37.1, 1e-9);
  // A 7 ms wait in a 25 ms request is a warning; the default's 0.05 ms, nothing.
  e.embeddings.ramp[0] = point(1, 25.0, 40.0, 16, 1.0, 7.0, 19.0);
  ASSERT_TRUE(check_batch_window_too_long(e));
  EXPECT_EQ(check_batch_window_too_long(e)->severity, Severity::warning);
  e.embeddings.ramp[0] = point(1, 23.0, 40.0, 16, 1.0, 0.05, 23.9);
  EXPECT_FALSE(check_batch_window_too_long(e));
  // A server that says nothing of its batches: no alarm.
  e.embeddings.ramp[0].batcher.reset();
  EXPECT_FALSE(check_batch_window_too_long(e));
}

TEST(DoctorEmbeddings, BatchesOfOneWhileInputsQueueAreNoBatching) {
  // --max-batch-tokens 96: two 64-token inputs never fit one batch.
  const Evidence e = embeddings({point(1, 20.0, 40.9, 16, 1.0, 0.05, 23.2),
                                 point(2, 37.8, 48.4, 16, 1.0, 19.1, 19.9),
                                 point(4, 78.1, 49.0, 32, 1.0, 57.2, 19.6)});
  const Diagnosis diagnosis = diagnose(e);
  EXPECT_EQ(diagnosis.verdict.primary_cause, "no_batching");
  EXPECT_FALSE(diagnosis.verdict.accelerator_bound);
  const Finding* none = find(diagnosis, "no_batching");
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->severity, Severity::critical);
  EXPECT_EQ(none->evidence.front().name, "inputs per batch");
  EXPECT_EQ(none->serve_flags, (std::vector<std::string>{"--max-batch-tokens", "0"}));
}

TEST(DoctorEmbeddings, BatchesOfOneOnADeviceFasterThanArrivalsAreFine) {
  // Nothing waited for the model: each input found it free, so a batch of one cost nothing.
  const Evidence e = embeddings({point(1, 3.0, 300, 16, 1.0, 0.05, 1.0),
                                 point(4, 3.2, 1200, 32, 1.0, 0.1, 1.0)},
                                "max_concurrency");
  EXPECT_FALSE(check_no_batching(e));
}

TEST(DoctorEmbeddings, AServerRunningOneRequestWithOthersWaitingIsNoBatching) {
  // llama-server --embeddings -np 1 --metrics: no batcher counters, its gauges say it.
  Evidence e = embeddings({point(1, 15.3, 53.4), point(2, 29.3, 63.7), point(4, 61.9, 63.3)},
                          "plateau", "llama.cpp");
  e.metrics.running_max = 1;
  e.metrics.waiting_max = 3;
  const auto one = check_no_batching(e);
  ASSERT_TRUE(one);
  EXPECT_NE(one->prescription.find("-np"), std::string::npos);
  EXPECT_TRUE(one->serve_flags.empty());  // not brisk serve's flags
  // -np 8: the same flat throughput on two cores, but up to 4 requests ran at once.
  e.metrics.running_max = 4;
  EXPECT_FALSE(check_no_batching(e));
  // Without any gauge, flat throughput on a device the model fills proves nothing: -np 8
  // (which batches) gained 1.12× with the latency growing 3.8× from 1 to 4 clients...
  e = embeddings({point(1, 13.5, 64.2), point(2, 25.1, 73.6), point(4, 51.6, 72.0)}, "plateau",
                 "");
  EXPECT_FALSE(check_no_batching(e));
  // ...while on an accelerator seen mostly idle meanwhile it does.
  e.embeddings.ramp.back().resources.gpu_utilization_mean = 0.2;
  EXPECT_TRUE(check_no_batching(e));
}

TEST(DoctorEmbeddings, TokenizingThatCostsHalfTheModelsTimeIsCpuBoundFrontend) {
  Evidence e = brisk_defaults();
  EXPECT_FALSE(check_cpu_bound_frontend(e));  // 0.05 ms a request against 80 ms a batch
  // Long inputs on a fast accelerator: 12 batches × 4 ms of model time, 64 requests × 0.5 ms.
  e.embeddings.ramp.back() = point(8, 20, 400, 12, 5.33, 1.0, 4.0, 0.5);
  const auto frontend = check_cpu_bound_frontend(e);
  ASSERT_TRUE(frontend);
  EXPECT_EQ(frontend->severity, Severity::warning);  // 32 ms against 48 ms
  EXPECT_NE(frontend->prescription.find("token ids"), std::string::npos);
  e.embeddings.ramp.back() = point(8, 20, 400, 12, 5.33, 1.0, 4.0, 1.0);
  EXPECT_EQ(check_cpu_bound_frontend(e)->severity, Severity::critical);
}

TEST(DoctorEmbeddings, ChatRulesStayQuietOnEmbeddingsEvidence) {
  // The chat probe's points are empty: only the embeddings rules and the host's may speak.
  const Diagnosis diagnosis = diagnose(brisk_defaults());
  for (const Finding& finding : diagnosis.findings) {
    EXPECT_TRUE(finding.id == "compute_saturated") << finding.id << ": " << finding.summary;
  }
}

}  // namespace
}  // namespace brisk::doctor
