#pragma once

#include <string>
#include <vector>

#include "plan/capacity_planner.h"

namespace brisk::plan {

// The brisk serve settings a plan's prediction assumed for one replica, so that a deployment
// runs what was predicted.
struct ServeSettings {
  std::string model_path;         // inside the pod or on the host: kModelDirectory + file name
  std::string served_model_name;  // the plan's model id
  // The users one replica serves within the SLO and its KV memory (Candidate::max_concurrency;
  // for --rate at least the requests in flight at p99). Beyond it requests wait in brisk's
  // queue, which is what the HorizontalPodAutoscaler watches.
  int max_seqs = 1;
  int ctx_size_tokens = 0;     // max_seqs x (isl + osl): each request reserves its whole length
  int max_batched_tokens = 0;  // --step-tokens
  ChunkPolicy chunking;        // --target-itl-ms, --long-prefill-tokens, --max-long-prefills
  std::string kv_cache_type = "f16";  // --cache-type-k and --cache-type-v
  int replicas = 1;
  int max_replicas = 1;            // --max-devices / devices per replica
  int gpus_per_replica = 0;        // 0 on a CPU device
  int host_memory_gib = 1;         // the pod's memory request: model file, and the KV on a CPU
  std::vector<std::string> notes;  // where brisk serve cannot run exactly what was planned
};

// Where the manifests mount the model volume.
inline constexpr const char* kModelDirectory = "/models";
inline constexpr int kServePort = 8080;
inline constexpr int kDrainTimeoutS = 10;
inline constexpr int kPreStopSleepS = 5;
inline constexpr int kTerminationGraceS = 30;

ServeSettings serve_settings_for(const PlanRequest& request, const Candidate& candidate);
// `serve --model ... --max-seqs ...`: the arguments of the brisk binary, without it.
std::vector<std::string> serve_arguments(const ServeSettings& settings);

// A Deployment and a HorizontalPodAutoscaler (autoscaling/v2) as YAML documents, with the
// prediction in comments. Labels and names match deploy/k8s, whose Service and InferencePool
// select these pods.
std::string kubernetes_manifests(const PlanRequest& request, const Candidate& candidate);
// An HAProxy backend with one server line per replica, and the brisk serve command each runs.
std::string haproxy_backend(const PlanRequest& request, const Candidate& candidate);

// A configuration measured rather than planned (brisk tune --emit): brisk serve's flags as the
// winner ran them, one replica per device.
struct MeasuredServe {
  std::string model_file;         // the GGUF's file name; the pods read it from kModelDirectory
  std::string served_model_name;  // the name clients send
  std::vector<std::string> serve_flags;  // the winner's flags, without --model, --host, --port
  int max_seqs = 16;                     // HAProxy's maxconn per replica
  double peak_memory_bytes = 0;          // measured; the pod's memory request adds a quarter
  bool gpu = false;
  std::vector<std::string> comments;  // what was measured, for the header
};

std::string kubernetes_manifests(const MeasuredServe& measured);
std::string haproxy_backend(const MeasuredServe& measured);

}  // namespace brisk::plan
