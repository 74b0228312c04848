// brisk plan --emit: the deployment runs what the plan predicted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plan/capacity_planner.h"
#include "plan/deployment_emitter.h"
#include "plan/precision.h"
#include "plan/yaml_writer.h"

namespace brisk::plan {
namespace {

TEST(PlanEmitYaml, QuotesEveryStringYamlWouldReadAsSomethingElse) {
  const nlohmann::ordered_json value = {
      {"name", "brisk"}, {"port", "8080"},           {"flag", "--model"}, {"yes", "yes"},
      {"empty", ""},     {"path", "/models/a.gguf"}, {"number", 8080},    {"ratio", 0.5},
      {"truth", true},   {"colon", "a: b"},          {"none", nullptr}};
  EXPECT_EQ(to_yaml(value),
            "name: brisk\nport: \"8080\"\nflag: \"--model\"\n\"yes\": \"yes\"\nempty: \"\"\n"
            "path: /models/a.gguf\nnumber: 8080\nratio: 0.5\ntruth: true\ncolon: \"a: b\"\n"
            "none: null\n");
}

TEST(PlanEmitYaml, ListsOfMapsLineUpUnderTheirDash) {
  const nlohmann::ordered_json value = {
      {"spec",
       {{"containers",
         nlohmann::ordered_json::array({{{"name", "brisk"},
                                         {"args", {"serve", "--port", "8080"}},
                                         {"resources", {{"limits", {{"nvidia.com/gpu", 2}}}}},
                                         {"empty", nlohmann::ordered_json::object()}}})}}}};
  EXPECT_EQ(to_yaml(value),
            "spec:\n"
            "  containers:\n"
            "  - name: brisk\n"
            "    args:\n"
            "    - serve\n"
            "    - \"--port\"\n"
            "    - \"8080\"\n"
            "    resources:\n"
            "      limits:\n"
            "        nvidia.com/gpu: 2\n"
            "    empty: {}\n");
}

class PlanEmit : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    auto loaded = HardwareCatalog::load("", &error);
    ASSERT_TRUE(loaded) << error;
    catalog_ = std::move(*loaded);
  }

  PlanRequest request_for(const std::string& model_id, const std::string& precision) {
    std::string error;
    PlanRequest request;
    for (ModelProfile& model : model_presets(&error)) {
      if (model.id == model_id) request.model = model;
    }
    EXPECT_EQ(request.model.id, model_id) << error;
    request.precision = *parse_precision(precision);
    request.slo = {{"ttft", "p95", 1000}, {"tpot", "p95", 50}};
    return request;
  }

  Candidate recommended(const PlanRequest& request) {
    std::string error;
    const auto plan = make_plan(request, catalog_, &error);
    EXPECT_TRUE(plan) << error;
    EXPECT_TRUE(plan && plan->recommended);
    return plan->candidates[*plan->recommended];
  }

  HardwareCatalog catalog_;
};

TEST_F(PlanEmit, ServeFlagsAreThePlansAssumptions) {
  PlanRequest request = request_for("llama-3.1-8b", "bf16");
  request.workload = {.input_tokens = 1024, .output_tokens = 256, .concurrency = 64};
  request.devices = {"h100-sxm"};
  request.step_token_budget = 1024;
  const Candidate candidate = recommended(request);
  const ServeSettings settings = serve_settings_for(request, candidate);
  EXPECT_EQ(settings.max_seqs, candidate.max_concurrency);
  EXPECT_EQ(settings.ctx_size_tokens, candidate.max_concurrency * (1024 + 256));
  EXPECT_EQ(settings.max_batched_tokens, 1024);
  EXPECT_EQ(settings.replicas, candidate.replicas);
  EXPECT_EQ(settings.gpus_per_replica, 1);
  EXPECT_EQ(settings.max_replicas, 8);  // --max-devices 8 over 1 GPU per replica
  EXPECT_EQ(settings.model_path, "/models/llama-3.1-8b.gguf");
  // A preset has no file: the note says what to put there.
  ASSERT_EQ(settings.notes.size(), 1u);
  EXPECT_NE(settings.notes[0].find("put a GGUF"), std::string::npos);
}

TEST_F(PlanEmit, AQuantizedKvCacheIsDeployedAsPlannedOrNamedWhereBriskHasNone) {
  PlanRequest request = request_for("llama-3.1-8b", "bf16");
  request.workload = {.input_tokens = 1024, .output_tokens = 256, .concurrency = 64};
  request.devices = {"h100-sxm"};
  request.kv_bytes_per_element = *kv_cache_bytes_per_element("q8_0");
  request.kv_cache_type = "q8_0";
  const std::vector<std::string> arguments =
      serve_arguments(serve_settings_for(request, recommended(request)));
  const auto k = std::find(arguments.begin(), arguments.end(), "--cache-type-k");
  ASSERT_NE(k, arguments.end());
  EXPECT_EQ(*(k + 1), "q8_0");
  const auto v = std::find(arguments.begin(), arguments.end(), "--cache-type-v");
  ASSERT_NE(v, arguments.end());
  EXPECT_EQ(*(v + 1), "q8_0");
  // fp8 is no llama.cpp cache type: f16 is deployed, and a note says the memory differs.
  request.kv_bytes_per_element = *kv_cache_bytes_per_element("fp8");
  request.kv_cache_type = "fp8";
  const ServeSettings fp8 = serve_settings_for(request, recommended(request));
  const std::vector<std::string> fp8_arguments = serve_arguments(fp8);
  EXPECT_EQ(std::count(fp8_arguments.begin(), fp8_arguments.end(), "--cache-type-k"), 0);
  bool noted = false;
  for (const std::string& note : fp8.notes) noted |= note.find("fp8") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST_F(PlanEmit, TensorParallelPlansRequestTheirGpusAndSayLlamaCppSplitsLayers) {
  PlanRequest request = request_for("llama-3.1-70b", "bf16");
  request.workload = {.input_tokens = 512, .output_tokens = 256, .concurrency = 8};
  request.devices = {"h100-sxm"};
  const Candidate candidate = recommended(request);
  ASSERT_GE(candidate.deployment.devices, 2);
  const ServeSettings settings = serve_settings_for(request, candidate);
  EXPECT_EQ(settings.gpus_per_replica, candidate.deployment.devices);
  EXPECT_EQ(settings.max_replicas, 8 / candidate.deployment.devices);
  const std::string manifests = kubernetes_manifests(request, candidate);
  EXPECT_NE(manifests.find("nvidia.com/gpu: " + std::to_string(candidate.deployment.devices)),
            std::string::npos)
      << manifests;
  EXPECT_NE(manifests.find("tensor parallelism"), std::string::npos);
}

TEST_F(PlanEmit, OpenLoopHoldsEveryRequestInFlightAtP99) {
  PlanRequest request = request_for("llama-3.1-8b", "bf16");
  request.workload = {.input_tokens = 512, .output_tokens = 256, .rate_per_s = 20};
  request.devices = {"h100-sxm"};
  const Candidate candidate = recommended(request);
  const ServeSettings settings = serve_settings_for(request, candidate);
  EXPECT_GE(settings.max_seqs, std::ceil(candidate.at_target.in_flight_p99));
  EXPECT_GE(settings.max_seqs, candidate.max_concurrency);
  EXPECT_EQ(settings.replicas, candidate.replicas);
}

TEST_F(PlanEmit, ManifestsCarryReplicasArgsAndTheAutoscalerBounds) {
  PlanRequest request = request_for("llama-3.1-8b", "bf16");
  request.workload = {.input_tokens = 512, .output_tokens = 256, .concurrency = 16};
  request.devices = {"l40s"};  // 16 GB of weights: one GPU per replica
  request.max_devices = 6;
  const Candidate candidate = recommended(request);
  const ServeSettings settings = serve_settings_for(request, candidate);
  const std::string manifests = kubernetes_manifests(request, candidate);
  EXPECT_NE(manifests.find("kind: Deployment\n"), std::string::npos);
  EXPECT_NE(manifests.find("kind: HorizontalPodAutoscaler\n"), std::string::npos);
  EXPECT_NE(manifests.find("  replicas: " + std::to_string(settings.replicas) + "\n"),
            std::string::npos);
  EXPECT_NE(manifests.find("  minReplicas: " + std::to_string(settings.replicas) + "\n"),
            std::string::npos);
  EXPECT_NE(manifests.find("  maxReplicas: 6\n"), std::string::npos);
  EXPECT_NE(
      manifests.find("- \"--max-seqs\"\n        - \"" + std::to_string(settings.max_seqs) + "\"\n"),
      std::string::npos)
      << manifests;
  const std::string haproxy = haproxy_backend(request, candidate);
  EXPECT_NE(haproxy.find("maxconn " + std::to_string(settings.max_seqs) + "\n"), std::string::npos);
  EXPECT_NE(haproxy.find("server brisk-" + std::to_string(settings.replicas) + " "),
            std::string::npos);
  EXPECT_EQ(haproxy.find("server brisk-" + std::to_string(settings.replicas + 1) + " "),
            std::string::npos);
  EXPECT_EQ(haproxy.find("--metrics-compat"), std::string::npos);
}

}  // namespace
}  // namespace brisk::plan

namespace brisk::plan {
namespace {

TEST(PlanEmitMeasured, DeploysTheMeasuredFlagsInThePodsPathsAndPort) {
  MeasuredServe measured;
  measured.model_file = "SmolLM2-135M-Instruct.Q4_1.gguf";
  measured.served_model_name = "smollm2-135m";
  measured.serve_flags = {"--max-seqs", "8", "--no-kv-unified"};
  measured.max_seqs = 8;
  measured.peak_memory_bytes = 3.5e9;
  measured.comments = {"goodput 0.4 req/s"};
  const std::string manifests = kubernetes_manifests(measured);
  EXPECT_NE(manifests.find("# brisk tune --emit k8s"), std::string::npos);
  EXPECT_NE(manifests.find("# goodput 0.4 req/s"), std::string::npos);
  EXPECT_NE(manifests.find("/models/SmolLM2-135M-Instruct.Q4_1.gguf"), std::string::npos);
  EXPECT_NE(manifests.find("--no-kv-unified"), std::string::npos);
  EXPECT_NE(manifests.find("memory: \"5Gi\""), std::string::npos) << manifests;  // 3.5 GB x 1.25
  EXPECT_NE(manifests.find("kind: HorizontalPodAutoscaler"), std::string::npos);
  const std::string backend = haproxy_backend(measured);
  EXPECT_NE(backend.find("maxconn 8"), std::string::npos) << backend;
  EXPECT_NE(backend.find("--max-seqs 8 --no-kv-unified"), std::string::npos) << backend;
  EXPECT_NE(backend.find("--port 8080"), std::string::npos);
}

}  // namespace
}  // namespace brisk::plan
