#include "plan/deployment_emitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "plan/memory_model.h"
#include "plan/plan_report.h"
#include "plan/yaml_writer.h"

namespace brisk::plan {
namespace {

using Json = nlohmann::ordered_json;

// The HorizontalPodAutoscaler adds a replica when more requests than this wait, on average,
// per pod (deploy/k8s/hpa.yaml uses the same).
constexpr const char* kWaitingTarget = "2";

int sequence_tokens(const Workload& workload) {
  return workload.input_tokens + workload.output_tokens;
}

int gib_at_least(double bytes) {
  return std::max(1, static_cast<int>(std::ceil(bytes / (1024.0 * 1024 * 1024))));
}

std::string model_file_name(const ModelProfile& model) {
  if (!model.gguf_path.empty()) return std::filesystem::path(model.gguf_path).filename().string();
  return model.id + ".gguf";
}

std::vector<std::string> differences_from_plan(const PlanRequest& request,
                                               const Candidate& candidate,
                                               const ServeSettings& settings) {
  std::vector<std::string> notes;
  const ModelProfile& model = request.model;
  if (model.gguf_path.empty()) {
    notes.push_back(fmt::format("put a GGUF of {} in {} at {}", model.name, request.precision.name,
                                settings.model_path));
  } else if (model.stored_precision && model.stored_precision->name != request.precision.name) {
    notes.push_back(
        fmt::format("the plan assumed {} weights but the GGUF holds {}: deploy a GGUF "
                    "in {}",
                    request.precision.name, model.stored_precision->name, request.precision.name));
  }
  if (settings.kv_cache_type == "f16" && request.kv_bytes_per_element != 2) {
    notes.push_back(fmt::format(
        "the plan assumed a KV cache of {:g} bytes per element ({}); brisk serve has no such "
        "cache type and deploys f16 (2 bytes; q8_0 is its 1-byte choice), so --ctx-size needs "
        "more memory than planned",
        request.kv_bytes_per_element, request.kv_cache_type));
  }
  if (!candidate.deployment.device->is_gpu()) {
    notes.push_back(
        "the catalog does not count this CPU's cores: add a cpu request (and "
        "--threads) that match your nodes");
  }
  if (candidate.deployment.devices > 1) {
    notes.push_back(fmt::format(
        "the plan assumed tensor parallelism over {} GPUs; llama.cpp splits the layers over "
        "them instead, so each token passes the GPUs one after another: expect a slower TPOT "
        "than predicted",
        candidate.deployment.devices));
  }
  return notes;
}

// The prediction and where each planned number went, as comment lines.
std::string header(const PlanRequest& request, const Candidate& candidate,
                   const ServeSettings& settings, const std::string& what) {
  const Deployment& deployment = candidate.deployment;
  const Workload& workload = request.workload;
  const LoadPrediction& load = candidate.at_target;
  std::string text;
  auto line = [&text](const std::string& content) { text += "# " + content + "\n"; };
  line(fmt::format("brisk plan --emit {}: {} ({} weights) on {}", what, request.model.name,
                   request.precision.name, deployment.device->name));
  line(fmt::format("{} replica{} x {} {} = {} device{}, ${:.2f}/hour", candidate.replicas,
                   candidate.replicas > 1 ? "s" : "", deployment.devices, deployment.device->id,
                   candidate.device_count(), candidate.device_count() > 1 ? "s" : "",
                   candidate.usd_per_hour));
  line(fmt::format("workload: {} input + {} output tokens, {}; SLO: {}", workload.input_tokens,
                   workload.output_tokens, load_text(workload), slo_text(request.slo)));
  line(fmt::format(
      "predicted per replica at the target load: TTFT p50/p95/p99 {:.0f}/{:.0f}/{:.0f} ms, "
      "TPOT p50/p95/p99 {:.1f}/{:.1f}/{:.1f} ms",
      load.ttft_ms.p50, load.ttft_ms.p95, load.ttft_ms.p99, load.tpot_ms.p50, load.tpot_ms.p95,
      load.tpot_ms.p99));
  line(
      fmt::format("--max-seqs {}: the users one replica serves within the SLO and its memory; "
                  "more wait in brisk's queue",
                  settings.max_seqs));
  line(
      fmt::format("--ctx-size {} = {} x ({} + {}) tokens; --max-batched-tokens {} (the plan's "
                  "--step-tokens)",
                  settings.ctx_size_tokens, settings.max_seqs, workload.input_tokens,
                  workload.output_tokens, settings.max_batched_tokens));
  for (const std::string& note : settings.notes) line("note: " + note);
  return text;
}

Json probe(const std::string& path, int period_s, int timeout_s, int failures) {
  Json probe = {{"httpGet", {{"path", path}, {"port", "http"}}}, {"periodSeconds", period_s}};
  if (timeout_s > 0) probe["timeoutSeconds"] = timeout_s;
  probe["failureThreshold"] = failures;
  return probe;
}

Json pod_labels() {
  return {{"app.kubernetes.io/name", "brisk"}, {"app.kubernetes.io/component", "server"}};
}

Json resources(const ServeSettings& settings) {
  Json amounts = {{"memory", fmt::format("{}Gi", settings.host_memory_gib)}};
  if (settings.gpus_per_replica > 0) amounts["nvidia.com/gpu"] = settings.gpus_per_replica;
  return {{"requests", amounts}, {"limits", amounts}};
}

Json deployment_object(const ServeSettings& settings, const std::vector<std::string>& arguments) {
  Json container = {
      {"name", "brisk"},
      // The CUDA (or CPU) build of this repository; no image is published.
      {"image", settings.gpus_per_replica > 0 ? "brisk:cuda" : "brisk:cpu"},
      {"command", Json::array({"brisk"})},
      {"args", arguments},
      {"ports",
       Json::array({{{"name", "http"}, {"containerPort", kServePort}, {"protocol", "TCP"}}})},
      {"startupProbe", probe("/health", 5, 0, 60)},
      {"livenessProbe", probe("/health", 10, 5, 3)},
      {"readinessProbe", probe("/ready", 5, 2, 1)},
      {"lifecycle", {{"preStop", {{"sleep", {{"seconds", kPreStopSleepS}}}}}}},
      {"resources", resources(settings)},
      {"volumeMounts",
       Json::array({{{"name", "models"}, {"mountPath", kModelDirectory}, {"readOnly", true}}})}};
  Json pod_spec = {
      {"terminationGracePeriodSeconds", kTerminationGraceS},
      {"containers", Json::array({container})},
      {"volumes", Json::array({{{"name", "models"},
                                {"persistentVolumeClaim",
                                 {{"claimName", "brisk-models"}, {"readOnly", true}}}}})}};
  return {
      {"apiVersion", "apps/v1"},
      {"kind", "Deployment"},
      {"metadata", {{"name", "brisk"}, {"labels", pod_labels()}}},
      {"spec",
       {{"replicas", settings.replicas},
        {"selector", {{"matchLabels", pod_labels()}}},
        {"strategy",
         {{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxUnavailable", 0}, {"maxSurge", 1}}}}},
        {"template",
         {{"metadata",
           {{"labels", pod_labels()},
            {"annotations",
             {{"prometheus.io/scrape", "true"},
              {"prometheus.io/port", std::to_string(kServePort)},
              {"prometheus.io/path", "/metrics"}}}}},
          {"spec", pod_spec}}}}}};
}

Json autoscaler_object(const ServeSettings& settings) {
  return {
      {"apiVersion", "autoscaling/v2"},
      {"kind", "HorizontalPodAutoscaler"},
      {"metadata", {{"name", "brisk"}, {"labels", {{"app.kubernetes.io/name", "brisk"}}}}},
      {"spec",
       {{"scaleTargetRef", {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", "brisk"}}},
        {"minReplicas", settings.replicas},
        {"maxReplicas", settings.max_replicas},
        {"metrics",
         Json::array(
             {{{"type", "Pods"},
               {"pods",
                {{"metric", {{"name", "brisk_requests_waiting"}}},
                 {"target", {{"type", "AverageValue"}, {"averageValue", kWaitingTarget}}}}}}})},
        {"behavior",
         {{"scaleUp", {{"stabilizationWindowSeconds", 30}}},
          {"scaleDown", {{"stabilizationWindowSeconds", 300}}}}}}}};
}

std::string haproxy_backend_lines(int max_seqs, int replicas) {
  std::string text = fmt::format(
      "backend brisk\n"
      "    balance leastconn\n"
      "    option httpchk GET /ready\n"
      "    http-check expect status 200\n"
      "    # A replica runs --max-seqs requests at once; HAProxy queues the rest itself and hands\n"
      "    # each to the first replica with a free sequence.\n"
      "    default-server check inter 2s fall 1 rise 2 maxconn {}\n",
      max_seqs);
  for (int replica = 1; replica <= replicas; ++replica) {
    text += fmt::format("    server brisk-{} 10.0.{}.{}:{}\n", replica, replica / 256,
                        replica % 256, kServePort);
  }
  return text;
}

// The pod's arguments for a measured configuration: its flags, in the pod's paths and port.
std::vector<std::string> measured_arguments(const MeasuredServe& measured, bool metrics_compat) {
  std::vector<std::string> arguments = {"serve",
                                        "--model",
                                        std::string(kModelDirectory) + "/" + measured.model_file,
                                        "--served-model-name",
                                        measured.served_model_name,
                                        "--host",
                                        "0.0.0.0",
                                        "--port",
                                        std::to_string(kServePort)};
  arguments.insert(arguments.end(), measured.serve_flags.begin(), measured.serve_flags.end());
  arguments.insert(arguments.end(), {"--drain-timeout", std::to_string(kDrainTimeoutS)});
  if (metrics_compat) arguments.insert(arguments.end(), {"--metrics-compat", "vllm"});
  arguments.insert(arguments.end(), {"--log-format", "json"});
  return arguments;
}

ServeSettings measured_settings(const MeasuredServe& measured) {
  ServeSettings settings;
  settings.max_seqs = measured.max_seqs;
  settings.gpus_per_replica = measured.gpu ? 1 : 0;
  settings.host_memory_gib = gib_at_least(measured.peak_memory_bytes * 1.25);
  return settings;
}

std::string measured_header(const MeasuredServe& measured, const std::string& what) {
  std::string text = "# brisk tune --emit " + what + ": the configuration measured best\n";
  for (const std::string& comment : measured.comments) text += "# " + comment + "\n";
  return text;
}

std::string command_line(const std::vector<std::string>& arguments) {
  std::string text = "brisk";
  for (const std::string& argument : arguments) text += " " + argument;
  return text;
}

}  // namespace

ServeSettings serve_settings_for(const PlanRequest& request, const Candidate& candidate) {
  const Deployment& deployment = candidate.deployment;
  const Workload& workload = request.workload;
  ServeSettings settings;
  settings.model_path = std::string(kModelDirectory) + "/" + model_file_name(request.model);
  settings.served_model_name = request.model.id;
  int sequences = candidate.max_concurrency;
  // Open loop: the simulation let every arrival run; as many must fit in brisk's sequences.
  if (workload.rate_per_s > 0) {
    sequences = std::max(sequences, static_cast<int>(std::ceil(candidate.at_target.in_flight_p99)));
  }
  const int memory_sequences =
      memory_for(deployment, 1, sequence_tokens(workload), request.headroom).max_sequences;
  if (memory_sequences > 0) sequences = std::min(sequences, memory_sequences);
  settings.max_seqs = std::max(1, sequences);
  const long long context = static_cast<long long>(settings.max_seqs) * sequence_tokens(workload);
  settings.ctx_size_tokens = static_cast<int>(std::min<long long>(context, INT_MAX));
  settings.max_batched_tokens = request.step_token_budget;
  settings.chunking = request.chunking;
  // fp8 is a GPU format llama.cpp's cache does not store: f16 is deployed, and a note says so.
  if (request.kv_cache_type != "fp8") {
    settings.kv_cache_type = request.kv_cache_type;
  }
  settings.replicas = std::max(1, candidate.replicas);
  settings.max_replicas =
      std::max(settings.replicas, request.max_devices / std::max(1, deployment.devices));
  settings.gpus_per_replica = deployment.device->is_gpu() ? deployment.devices : 0;
  // On a GPU the host holds the model file while it loads (mmap); on a CPU everything lives in
  // host memory: the plan's total at max_seqs sequences.
  const double weight_bytes = static_cast<double>(request.model.weight_bytes(request.precision));
  const double host_bytes =
      deployment.device->is_gpu()
          ? weight_bytes + 1e9
          : memory_for(deployment, settings.max_seqs, sequence_tokens(workload), request.headroom)
                    .total_gb *
                1e9;
  settings.host_memory_gib = gib_at_least(host_bytes);
  settings.notes = differences_from_plan(request, candidate, settings);
  return settings;
}

std::vector<std::string> serve_arguments(const ServeSettings& settings) {
  std::vector<std::string> arguments = {"serve",
          "--model",
          settings.model_path,
          "--served-model-name",
          settings.served_model_name,
          "--host",
          "0.0.0.0",
          "--port",
          std::to_string(kServePort),
          "--ctx-size",
          std::to_string(settings.ctx_size_tokens),
          "--max-seqs",
          std::to_string(settings.max_seqs),
          "--max-batched-tokens",
          std::to_string(settings.max_batched_tokens),
          "--target-itl-ms",
          fmt::format("{:g}", settings.chunking.target_step_ms),
          "--long-prefill-tokens",
          std::to_string(settings.chunking.long_prefill_tokens),
          "--max-long-prefills",
          std::to_string(settings.chunking.max_long_prefills),
          "--drain-timeout",
          std::to_string(kDrainTimeoutS),
          "--metrics-compat",
          "vllm",
          "--log-format",
          "json"};
  if (settings.kv_cache_type != "f16") {
    arguments.insert(arguments.end(), {"--cache-type-k", settings.kv_cache_type, "--cache-type-v",
                                       settings.kv_cache_type});
  }
  return arguments;
}

std::string kubernetes_manifests(const PlanRequest& request, const Candidate& candidate) {
  const ServeSettings settings = serve_settings_for(request, candidate);
  std::string text = header(request, candidate, settings, "k8s");
  text += fmt::format(
      "# The HorizontalPodAutoscaler keeps {} to {} replicas (--max-devices {}) and adds one when "
      "more than {} requests wait per pod.\n"
      "# deploy/k8s/models-pvc.yaml, service.yaml and inferencepool.yaml go with these "
      "(docs/deploy.md).\n",
      settings.replicas, settings.max_replicas, request.max_devices, kWaitingTarget);
  text += "---\n" + to_yaml(deployment_object(settings, serve_arguments(settings)));
  text += "---\n" + to_yaml(autoscaler_object(settings));
  return text;
}

std::string haproxy_backend(const PlanRequest& request, const Candidate& candidate) {
  const ServeSettings settings = serve_settings_for(request, candidate);
  std::string text = header(request, candidate, settings, "haproxy");
  std::vector<std::string> arguments = serve_arguments(settings);
  // HAProxy reads no vLLM metric names; it balances by open requests.
  const auto compat = std::find(arguments.begin(), arguments.end(), "--metrics-compat");
  if (compat != arguments.end()) arguments.erase(compat, compat + 2);
  text += fmt::format(
      "# Each replica runs on its own {} ({} per replica):\n#   {}\n"
      "# The addresses below are placeholders: one host per replica, port {}.\n",
      candidate.deployment.device->id, candidate.deployment.devices, command_line(arguments),
      kServePort);
  return text + haproxy_backend_lines(settings.max_seqs, settings.replicas);
}

std::string kubernetes_manifests(const MeasuredServe& measured) {
  const ServeSettings settings = measured_settings(measured);
  std::string text = measured_header(measured, "k8s");
  text +=
      "# One replica, measured on one device; the HorizontalPodAutoscaler adds one when more "
      "than " +
      std::string(kWaitingTarget) +
      " requests wait per pod (raise maxReplicas).\n"
      "# deploy/k8s/models-pvc.yaml, service.yaml and inferencepool.yaml go with these "
      "(docs/deploy.md).\n";
  text += "---\n" + to_yaml(deployment_object(settings, measured_arguments(measured, true)));
  text += "---\n" + to_yaml(autoscaler_object(settings));
  return text;
}

std::string haproxy_backend(const MeasuredServe& measured) {
  std::string text = measured_header(measured, "haproxy");
  text += "# Each replica runs, on a device of its own:\n#   " +
          command_line(measured_arguments(measured, false)) +
          "\n# The address below is a placeholder: one server line per replica, port " +
          std::to_string(kServePort) + ".\n";
  return text + haproxy_backend_lines(measured.max_seqs, 1);
}

}  // namespace brisk::plan
