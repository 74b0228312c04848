#include "telemetry/server_metrics.h"

#include <algorithm>

namespace brisk::telemetry {

namespace {

// Each quantity under every name a server uses for it, newest first.
struct Dialect {
  const char* name;
  std::vector<const char*> waiting, running, kv_usage, preemptions, prefix_queries, prefix_hits,
      prefix_hit_rate;
  // llama.cpp counts looked-up tokens as "processed" + "cached": queries are their sum.
  bool queries_exclude_hits = false;
};

const std::vector<Dialect>& dialects() {
  static const std::vector<Dialect> table = {
      {"brisk",
       {"brisk_requests_waiting", "brisk_embedding_queued_requests"},  // the second: embeddings alone
       {"brisk_requests_running"},
       {"brisk_kv_cache_usage_ratio"},
       {"brisk_preemptions_total"},
       {"brisk_prefix_cache_query_tokens_total"},
       {"brisk_prefix_cache_hit_tokens_total"},
       {}},
      {"vllm",
       {"vllm:num_requests_waiting"},
       {"vllm:num_requests_running"},
       {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
       {"vllm:num_preemptions_total", "vllm:num_preemptions"},
       {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries_total"},
       {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits_total"},
       {}},
      {"sglang",
       {"sglang:num_queue_reqs"},
       {"sglang:num_running_reqs"},
       {"sglang:token_usage"},
       {"sglang:num_retracted_reqs"},
       {},
       {},
       {"sglang:cache_hit_rate"}},
      {"tgi", {"tgi_queue_size"}, {"tgi_batch_current_size"}, {}, {}, {}, {}, {}},
      {"llama.cpp",
       {"llamacpp:requests_deferred"},
       {"llamacpp:requests_processing"},
       {"llamacpp:kv_cache_usage_ratio"},
       {},
       {"llamacpp:prompt_tokens_total"},
       {"llamacpp:prompt_tokens_cached_total"},
       {},
       /*queries_exclude_hits=*/true},
  };
  return table;
}

std::optional<double> first_present(const std::vector<MetricSample>& samples,
                                    const std::vector<const char*>& names) {
  for (const char* name : names) {
    if (auto value = sum_samples(samples, name)) return value;
  }
  return std::nullopt;
}

// A ratio over several engines is not a sum: the fullest one is what requests meet.
std::optional<double> highest_present(const std::vector<MetricSample>& samples,
                                      const std::vector<const char*>& names) {
  for (const char* name : names) {
    std::optional<double> highest;
    for (const MetricSample& sample : samples) {
      if (sample.name == name && sample.value == sample.value) {
        highest = std::max(highest.value_or(sample.value), sample.value);
      }
    }
    if (highest) return highest;
  }
  return std::nullopt;
}

// The series of `model` and the unlabelled ones, when some series carry model="..." labels and
// one of them is `model`'s; otherwise every series.
std::vector<MetricSample> series_of(const std::vector<MetricSample>& samples,
                                    const std::string& model) {
  const auto model_of = [](const MetricSample& sample) -> const std::string* {
    const auto label = sample.labels.find("model");
    return label == sample.labels.end() ? nullptr : &label->second;
  };
  const bool labelled = !model.empty() && std::any_of(samples.begin(), samples.end(), [&](const auto& s) {
    const std::string* of = model_of(s);
    return of != nullptr && *of == model;
  });
  if (!labelled) return samples;
  std::vector<MetricSample> out;
  for (const MetricSample& sample : samples) {
    const std::string* of = model_of(sample);
    if (of == nullptr || *of == model) out.push_back(sample);
  }
  return out;
}

void read_device_sharing(const std::vector<MetricSample>& all, const std::string& model,
                         ServerMetrics& metrics) {
  for (const MetricSample& sample : all) {
    const auto label = sample.labels.find("model");
    if (label == sample.labels.end()) continue;
    if (sample.name == "brisk_device_busy_seconds_total") {
      metrics.device_busy_seconds_by_model[label->second] += sample.value;
    } else if (label->second == model && sample.name == "brisk_arbiter_wait_seconds_sum") {
      metrics.arbiter_wait_seconds_total = metrics.arbiter_wait_seconds_total.value_or(0) + sample.value;
    } else if (label->second == model && sample.name == "brisk_arbiter_wait_seconds_count") {
      metrics.arbiter_waits_total = metrics.arbiter_waits_total.value_or(0) + sample.value;
    }
  }
}

// Every model's loads and unloads: one model's swaps slow the others too.
void read_model_residency(const std::vector<MetricSample>& all, ServerMetrics& metrics) {
  for (const MetricSample& sample : all) {
    const auto label = [&](const char* name) -> std::string {
      const auto found = sample.labels.find(name);
      return found == sample.labels.end() ? std::string() : found->second;
    };
    if (sample.name == "brisk_model_loads_total" && label("reason") != "start") {
      metrics.model_loads_by_model[label("model")] += sample.value;
    } else if (sample.name == "brisk_model_unloads_total") {
      metrics.model_unloads_by_reason[label("reason")] += sample.value;
    } else if (sample.name == "brisk_model_load_seconds_sum") {
      metrics.model_load_seconds_total = metrics.model_load_seconds_total.value_or(0) + sample.value;
    }
  }
}

std::optional<ServerMetrics::EmbeddingBatcher> read_embedding_batcher(
    const std::vector<MetricSample>& samples) {
  const auto batches = sum_samples(samples, "brisk_embedding_batch_inputs_count");
  if (!batches) return std::nullopt;
  const auto value = [&](const char* name) { return sum_samples(samples, name).value_or(0); };
  ServerMetrics::EmbeddingBatcher batcher;
  batcher.batches = *batches;
  batcher.batch_inputs = value("brisk_embedding_batch_inputs_sum");
  batcher.batch_tokens = value("brisk_embedding_batch_tokens_sum");
  batcher.compute_seconds = value("brisk_embedding_batch_compute_seconds_sum");
  batcher.window_wait_seconds = value("brisk_embedding_window_wait_seconds_sum");
  batcher.waited_inputs = value("brisk_embedding_window_wait_seconds_count");
  batcher.tokenize_seconds = value("brisk_embedding_tokenize_seconds_sum");
  batcher.tokenized_requests = value("brisk_embedding_tokenize_seconds_count");
  return batcher;
}

}  // namespace

ServerMetrics read_server_metrics(const std::vector<MetricSample>& all_samples,
                                  const std::string& model) {
  const std::vector<MetricSample> samples = series_of(all_samples, model);
  for (const Dialect& dialect : dialects()) {
    ServerMetrics metrics;
    metrics.requests_waiting = first_present(samples, dialect.waiting);
    metrics.requests_running = first_present(samples, dialect.running);
    if (!metrics.requests_waiting && !metrics.requests_running) continue;
    metrics.dialect = dialect.name;
    metrics.kv_usage_fraction = highest_present(samples, dialect.kv_usage);
    metrics.preemptions_total = first_present(samples, dialect.preemptions);
    metrics.prefix_query_tokens_total = first_present(samples, dialect.prefix_queries);
    metrics.prefix_hit_tokens_total = first_present(samples, dialect.prefix_hits);
    metrics.prefix_hit_rate = highest_present(samples, dialect.prefix_hit_rate);
    if (metrics.dialect == "brisk") {
      metrics.kv_full_blocks_total = sum_samples(samples, "brisk_admission_blocked_steps_total",
                                                 {{"reason", "kv_cache_full"}});
      for (const MetricSample& sample : samples) {
        if (sample.name != "brisk_requests_rejected_total") continue;
        const auto reason = sample.labels.find("reason");
        if (reason != sample.labels.end()) metrics.rejections_total[reason->second] += sample.value;
      }
      metrics.embedding = read_embedding_batcher(samples);
      read_device_sharing(all_samples, model, metrics);
      read_model_residency(all_samples, metrics);
    }
    if (dialect.queries_exclude_hits && metrics.prefix_query_tokens_total &&
        metrics.prefix_hit_tokens_total) {
      *metrics.prefix_query_tokens_total += *metrics.prefix_hit_tokens_total;
    }
    return metrics;
  }
  return {};
}

nlohmann::json server_metrics_delta(const ServerMetrics& before, const ServerMetrics& after) {
  using nlohmann::json;
  const auto delta = [](const std::optional<double>& a, const std::optional<double>& b) {
    return a && b ? json(*b - *a) : json(nullptr);
  };
  json out = {{"dialect", after.dialect},
              {"prefix_cache_query_tokens",
               delta(before.prefix_query_tokens_total, after.prefix_query_tokens_total)},
              {"prefix_cache_hit_tokens",
               delta(before.prefix_hit_tokens_total, after.prefix_hit_tokens_total)},
              {"preemptions", delta(before.preemptions_total, after.preemptions_total)}};
  const json& queries = out["prefix_cache_query_tokens"];
  const json& hits = out["prefix_cache_hit_tokens"];
  out["prefix_cache_hit_rate"] = queries.is_number() && hits.is_number() &&
                                         queries.get<double>() > 0
                                     ? json(hits.get<double>() / queries.get<double>())
                                     : json(nullptr);
  if (after.dialect == "brisk") {
    json rejections = json::object();
    for (const auto& [reason, count] : after.rejections_total) {
      const auto it = before.rejections_total.find(reason);
      const double change = count - (it == before.rejections_total.end() ? 0 : it->second);
      if (change != 0) rejections[reason] = change;
    }
    out["rejections"] = rejections;
  } else {
    out["rejections"] = nullptr;
  }
  return out;
}

}  // namespace brisk::telemetry
