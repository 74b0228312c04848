#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <thread>

#include "app/commands.h"
#include "app/duration_flag.h"
#include "common/log.h"
#include "common/model_store.h"
#include "engine/embedding_model.h"
#include "engine/engine.h"
#include "sched/embedding_batcher.h"
#include "sched/engine_loop.h"
#include "sched/serving_metrics.h"
#include "server/generation_config.h"
#include "server/model_registry.h"
#include "server/openai_server.h"
#include "server/trace_writer.h"

namespace brisk {
namespace {

// llama-server's --cache-ram default; brisk takes at most a quarter of the machine's memory.
constexpr int64_t kDefaultCacheRamMib = 8192;

size_t cache_ram_bytes(int64_t mib) {
  if (mib >= 0) return static_cast<size_t>(mib) << 20;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  const size_t quarter = pages > 0 && page_bytes > 0
                             ? static_cast<size_t>(pages) * static_cast<size_t>(page_bytes) / 4
                             : static_cast<size_t>(kDefaultCacheRamMib) << 20;
  return std::min(static_cast<size_t>(kDefaultCacheRamMib) << 20, quarter);
}

// Descriptors beyond the connections: the model file, logs, llama.cpp's own, the listener.
constexpr rlim_t kReservedFileDescriptors = 64;

// Raises the soft open-file limit as far as the hard limit allows (the default 1,024 would end
// accepts well below --max-connections) and says so when the limit is still too low.
std::optional<std::string> check_file_descriptor_room(int max_connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::nullopt;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + kReservedFileDescriptors;
  if (limit.rlim_cur < wanted && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = std::min(limit.rlim_max, std::max<rlim_t>(wanted, limit.rlim_cur));
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur >= wanted) return std::nullopt;
  return fmt::format(
      "--max-connections {} needs {} open files, but this process may open only {} (ulimit -n); "
      "lower --max-connections to at most {} or raise the limit",
      max_connections, wanted, limit.rlim_cur,
      limit.rlim_cur > kReservedFileDescriptors ? limit.rlim_cur - kReservedFileDescriptors : 0);
}

struct ServeFlags {
  // Served side by side; the first is the default of requests that name no model.
  std::vector<std::string> models = {"gemma3-270m"};
  std::vector<std::string> served_model_names;  // one per model, in their order
  EngineOptions engine;
  SchedulerOptions scheduler;
  ServerOptions server;
  GenerationDefaults generation;
  int read_timeout_s = 30;
  int keep_alive_timeout_s = 30;
  int write_timeout_s = 60;
  int drain_timeout_s = 10;
  std::string log_format = "text";
  std::string metrics_compat = "none";
  std::string log_level = "info";
  std::string generation_config = kGenerationConfigPresets[0];
  std::string override_generation_config;
  std::string prefix_cache = "on";
  std::string policy = "fcfs";
  int prefix_cache_seqs = -1;  // -1: as many as --max-seqs
  int64_t cache_ram_mib = -1;  // -1: kDefaultCacheRamMib, at most a quarter of the RAM
  TraceWriter::Options trace;  // --trace-out: no trace when its path is empty
  // An embedding model's batcher (docs/cli.md, "Embeddings"); `embedding_flags` are those that
  // only an embedding model takes.
  EmbeddingModelOptions embedding;
  BatchWindowOptions batch_window;
  std::vector<CLI::Option*> embedding_flags;
  std::vector<CLI::Option*> generation_flags;  // those an embedding model does not take
};

// The flags that mean the same for an embedding model as for a generative one.
constexpr std::string_view kFlagsOfEveryModel[] = {"--help",
                                                   "--model",
                                                   "--served-model-name",
                                                   "--host",
                                                   "--port",
                                                   "--api-key",
                                                   "--public-routes",
                                                   "--threads",
                                                   "--gpu-layers",
                                                   "--max-body-bytes",
                                                   "--max-header-bytes",
                                                   "--max-connections",
                                                   "--read-timeout",
                                                   "--keep-alive-timeout",
                                                   "--write-timeout",
                                                   "--drain-timeout",
                                                   "--io-threads",
                                                   "--log-format",
                                                   "--log-level"};

std::string served_name(const ServeFlags& flags, size_t index, const ResolveResult& model) {
  return flags.served_model_names.empty() ? model.served_name : flags.served_model_names[index];
}

// An embedding model serves /v1/embeddings through the dynamic batcher; nothing of the
// completion engine (KV cache, step scheduler) is built.
std::unique_ptr<ServedModel> load_embedding_model(const ServeFlags& flags, std::string name,
                                                  const ResolveResult& model, std::string* error) {
  EmbeddingModelOptions options = flags.embedding;
  options.model_path = model.path.string();
  options.threads = flags.engine.threads;
  options.gpu_layers = flags.engine.gpu_layers;
  spdlog::info("loading {} (an embedding model)", model.path.string());
  std::unique_ptr<EmbeddingModel> embedding_model = EmbeddingModel::load(options, error);
  if (!embedding_model) return nullptr;
  if (embedding_model->max_input_tokens() < embedding_model->train_context_size()) {
    spdlog::warn(
        "--max-batch-tokens {} is below the model's trained context: longer inputs get a "
        "400 (or are truncated with \"truncate\": true)",
        embedding_model->max_batch_tokens());
  }
  std::string preferred;
  for (int size : flags.batch_window.preferred_batch_sizes) {
    preferred += (preferred.empty() ? "" : ",") + std::to_string(size);
  }
  spdlog::info(
      "{}: embeddings ({}, {} dimensions, {} pooling), inputs up to {} tokens; batches of up to "
      "{} inputs and {} tokens, window {} ms, preferred sizes {}",
      name, embedding_model->description(), embedding_model->dimensions(),
      embedding_model->pooling_name(), embedding_model->max_input_tokens(),
      options.max_batch_inputs, embedding_model->max_batch_tokens(), flags.batch_window.window_ms,
      preferred.empty() ? "none" : preferred);
  return ServedModel::embedding(std::move(embedding_model), flags.batch_window, std::move(name));
}

std::unique_ptr<ServedModel> load_generative_model(const ServeFlags& flags, std::string name,
                                                   const ResolveResult& model,
                                                   RejectionCounts& rejections,
                                                   std::string* error) {
  EngineOptions engine_options = flags.engine;
  SchedulerOptions scheduler = flags.scheduler;
  engine_options.model_path = model.path.string();
  scheduler.prefix_cache.enabled = flags.prefix_cache == "on";
  scheduler.prefix_cache.host_bytes = cache_ram_bytes(flags.cache_ram_mib);
  if (scheduler.prefix_cache.enabled && scheduler.prefix_cache.host_bytes > 0) {
    spdlog::info(
        "prefix cache host tier: up to {} MiB of evicted prefixes in host memory "
        "(--cache-ram)",
        scheduler.prefix_cache.host_bytes >> 20);
  }
  scheduler.queue_policy.policy = flags.policy == "priority" ? SchedulingPolicy::priority
                                  : flags.policy == "slo"    ? SchedulingPolicy::slo
                                                             : SchedulingPolicy::fcfs;
  // Sequence ids beyond the running ones hold finished requests' cells for reuse; in one KV
  // buffer they cost no memory of their own (a sliding-window cache is capped at --ctx-size).
  // With a buffer per sequence each id would take its share of --ctx-size: there the idle
  // running ids hold the cache.
  const int cache_seqs = flags.prefix_cache_seqs < 0 ? scheduler.max_seqs : flags.prefix_cache_seqs;
  engine_options.max_seqs =
      scheduler.max_seqs + (scheduler.prefix_cache.enabled && engine_options.kv_unified
                                ? std::min(cache_seqs, 256 - scheduler.max_seqs)
                                : 0);
  engine_options.max_batched_tokens = scheduler.max_batched_tokens;

  spdlog::info("loading {}", model.path.string());
  std::unique_ptr<Engine> engine = Engine::load(engine_options, error);
  if (!engine) return nullptr;
  if (scheduler.sampling_threads == 0) {
    // Measured on 2 cores: a second sampling thread slowed decode by ~6% (llama.cpp's workers
    // spin on the cores it would use). Where the model is offloaded those cores are idle.
    const int threads = engine_options.threads > 0
                            ? engine_options.threads
                            : static_cast<int>(std::thread::hardware_concurrency());
    scheduler.sampling_threads = engine_options.gpu_layers > 0 ? threads : 1;
  }
  CompletionsRouteOptions route;
  route.model_name = std::move(name);
  route.generation = flags.generation;
  // A prompt read from the prefix cache was computed in another batch than a recomputed one.
  const std::string numerics =
      engine->numerics_identity() +
      (scheduler.prefix_cache.enabled ? "; prefix cache on" : "; prefix cache off");
  route.system_fingerprint = system_fingerprint_for(numerics);
  spdlog::info("{}: {} — ctx {} tokens, max {} per request, {} seqs, {} sampling threads",
               route.model_name, engine->description(), engine->context_size(),
               engine->max_request_tokens(), scheduler.max_seqs, scheduler.sampling_threads);
  spdlog::info("{}: chat template {}", route.model_name, engine->chat_template_origin());
  spdlog::info("{}: system_fingerprint {}: {}", route.model_name, route.system_fingerprint,
               numerics);
  return ServedModel::generative(std::move(engine), scheduler, std::move(route), rejections);
}

// Flags of one model kind given while no model of that kind is served.
std::optional<std::string> check_flags_fit_the_models(const ServeFlags& flags, bool any_generative,
                                                      bool any_embedding) {
  if (!any_embedding) {
    for (const CLI::Option* option : flags.embedding_flags) {
      if (option->count() > 0) {
        return option->get_name() +
               " sets the batcher of an embedding model, and every model served is generative";
      }
    }
  }
  if (!any_generative) {
    for (const CLI::Option* option : flags.generation_flags) {
      if (option->count() > 0) {
        return option->get_name() +
               " sets the completion engine, and every model served is an embedding model (an "
               "embedding model's batcher takes --batch-window-ms, --preferred-batch-sizes, "
               "--max-batch-tokens, --max-batch-inputs, --max-queued-inputs)";
      }
    }
  }
  return std::nullopt;
}

// Every check that needs no model loaded: a mistake in the flags fails before minutes of loading.
std::optional<std::string> check_serve_flags(ServeFlags& flags) {
  if (flags.scheduler.max_batched_tokens <= flags.scheduler.max_seqs) {
    return fmt::format(
        "--max-batched-tokens ({}) must be larger than --max-seqs ({}) so prompts can make "
        "progress beside running decodes",
        flags.scheduler.max_batched_tokens, flags.scheduler.max_seqs);
  }
  if (!flags.served_model_names.empty() &&
      flags.served_model_names.size() != flags.models.size()) {
    return fmt::format(
        "--served-model-name is given {} times for {} --model: give one name per model, in "
        "the same order",
        flags.served_model_names.size(), flags.models.size());
  }
  auto defaults =
      make_generation_defaults(flags.generation_config, flags.override_generation_config);
  if (auto* error = std::get_if<std::string>(&defaults)) return *error;
  flags.generation = std::get<GenerationDefaults>(defaults);
  if (auto error = check_file_descriptor_room(flags.server.max_connections)) return error;
  std::erase(flags.server.public_routes, std::string());  // --public-routes "" protects all
  for (const std::string& route : flags.server.public_routes) {
    if (!route.starts_with("/")) {
      return "--public-routes takes paths such as /health, not '" + route + "'";
    }
  }
  if (flags.trace.path.empty() && flags.trace.include_text) {
    return "--trace-text adds the prompts' text to --trace-out: name the file";
  }
  if (flags.prefix_cache_seqs >= 0 && !flags.engine.kv_unified) {
    return "--prefix-cache-seqs counts extra sequences of one KV buffer (--kv-unified); with "
           "--no-kv-unified the idle ones of --max-seqs hold the prefix cache";
  }
  return std::nullopt;
}

int run_serve(ServeFlags& flags) {
  if (!configure_logging(flags.log_format == "json" ? LogFormat::json : LogFormat::text,
                         flags.log_level)) {
    std::cerr << "error: unknown --log-level '" << flags.log_level << "'\n";
    return 2;
  }
  if (auto error = check_serve_flags(flags)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  // Opened before the models load, so a path that cannot be written fails at once.
  std::unique_ptr<TraceWriter> trace;
  if (!flags.trace.path.empty()) {
    std::string trace_error;
    trace = TraceWriter::open(flags.trace, trace_error);
    if (!trace) {
      std::cerr << "error: " << trace_error << "\n";
      return 2;
    }
  }
  std::vector<ResolveResult> resolved;
  bool any_generative = false;
  bool any_embedding = false;
  for (const std::string& name : flags.models) {
    resolved.push_back(ModelStore::from_environment().resolve(name));
    if (!resolved.back().ok()) {
      std::cerr << "error: " << resolved.back().error << "\n";
      return 1;
    }
    const bool embedding = is_embedding_model_file(resolved.back().path.string());
    any_embedding = any_embedding || embedding;
    any_generative = any_generative || !embedding;
  }
  if (auto error = check_flags_fit_the_models(flags, any_generative, any_embedding)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  if (flags.models.size() > 1) {
    spdlog::info(
        "serving {} models on the same cores: each model's steps run beside the others'",
        flags.models.size());
  }

  RejectionCounts rejections;
  ModelRegistry registry;
  for (size_t i = 0; i < resolved.size(); ++i) {
    std::string error;
    std::string name = served_name(flags, i, resolved[i]);
    std::unique_ptr<ServedModel> model =
        is_embedding_model_file(resolved[i].path.string())
            ? load_embedding_model(flags, std::move(name), resolved[i], &error)
            : load_generative_model(flags, std::move(name), resolved[i], rejections, &error);
    if (!model || !registry.add(std::move(model), &error)) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }
  }
  if (any_generative) {
    spdlog::info("requests that name no sampling parameter get: {}",
                 describe_generation_defaults(flags.generation));
  }
  flags.server.vllm_metrics = flags.metrics_compat == "vllm";
  flags.server.limits.read_timeout = std::chrono::seconds(flags.read_timeout_s);
  flags.server.limits.keep_alive_timeout = std::chrono::seconds(flags.keep_alive_timeout_s);
  flags.server.limits.write_timeout = std::chrono::seconds(flags.write_timeout_s);
  flags.server.drain_timeout = std::chrono::seconds(flags.drain_timeout_s);
  OpenAiServer server(registry, rejections, flags.server);
  if (trace) {
    server.set_trace_writer(trace.get());
    spdlog::info(
        "recording every finished request to {} (prefix hashes of {} tokens{}; SIGHUP "
        "reopens it)",
        flags.trace.path, flags.trace.block_tokens,
        flags.trace.include_text ? ", prompts' text included" : ", no text");
  }
  std::string error;
  if (!server.listen(&error)) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  registry.start_all();
  spdlog::info("serving {} on http://{}:{}", registry.quoted_names(), flags.server.host,
               server.port());
  server.run_until_signal();
  registry.shutdown_all(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace

CommandRunner register_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  flags->scheduler.sampling_threads = 0;  // as many as --threads, settled once they are known
#ifdef BRISK_WITH_CUDA
  flags->engine.gpu_layers = 999;
#endif
  app.add_option("-m,--model", flags->models,
                 "Catalog name (see `brisk pull`) or path to a GGUF file; repeat it to serve "
                 "several models side by side (the first answers requests that name none)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  app.add_option("--served-model-name", flags->served_model_names,
                 "Model id clients use (default: the catalog name or the file's stem); with "
                 "several --model, one per model in their order")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--host", flags->server.host, "Address to bind")->capture_default_str();
  app.add_option("--port", flags->server.port, "Port to bind (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--api-key", flags->server.api_key,
                 "Require 'Authorization: Bearer KEY' on every route but --public-routes");
  app.add_option("--public-routes", flags->server.public_routes,
                 "Routes served without the --api-key (probes, Prometheus); pass an empty "
                 "string to protect every route")
      ->delimiter(',')
      ->expected(0, -1)
      ->capture_default_str();
  app.add_option("-c,--ctx-size", flags->engine.ctx_size,
                 "KV cache capacity in tokens, shared by all running requests")
      ->check(CLI::Range(64, 1 << 22))
      ->capture_default_str();
  app.add_option("--max-seqs", flags->scheduler.max_seqs, "Most requests running at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-batched-tokens", flags->scheduler.max_batched_tokens,
                 "Token budget of one engine step (decodes + prefill chunks)")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  app.add_option("--target-itl-ms,--max-step-ms", flags->scheduler.max_step_ms,
                 "While streams decode, cut prompt chunks so a step (the gap between two tokens "
                 "of every running stream) stays under this many ms, from measured step costs "
                 "(0: off; only --max-batched-tokens limits them)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app.add_option("--min-prefill-step-tokens", flags->scheduler.min_prefill_step_tokens,
                 "A step that carries prompt tokens carries at least this many tokens in all, "
                 "whatever --target-itl-ms says: on CPU, llama.cpp's flash attention is several "
                 "times cheaper per prompt token from 64 tokens a step; 64 trades a longer p99 "
                 "inter-token gap for throughput and first tokens (1: no floor)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--long-prefill-tokens", flags->scheduler.long_prefill_tokens,
                 "A prompt with more tokens than this left to prefill is long: short prompts get "
                 "each step's token budget first (0: oldest first, no distinction)")
      ->check(CLI::Range(0, 1 << 22))
      ->capture_default_str();
  app.add_option("--max-long-prefills", flags->scheduler.max_long_prefills,
                 "Long prompts prefilled at once; the others wait their turn")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-queued-requests", flags->scheduler.max_queued_requests,
                 "Waiting requests beyond which new ones get 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-queue-delay-ms", flags->scheduler.max_queue_delay_ms,
                 "Refuse at once (429, Retry-After) a request whose estimated wait before its "
                 "prompt starts, from the work ahead and measured step costs, is longer than "
                 "this (0: off)")
      ->check(CLI::Range(0.0, 3600000.0))
      ->capture_default_str();
  app.add_option("--max-queued-tokens", flags->scheduler.max_queued_tokens,
                 "Prompt tokens waiting in the queue beyond which new requests get 429 (0: no "
                 "limit)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app.add_option("-t,--threads", flags->engine.threads, "CPU threads for llama.cpp (0: all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--poll", flags->engine.poll,
                 "How long llama.cpp's CPU threads spin waiting for the next step, 0-100 (as "
                 "llama-server's --poll): lower frees the cores for other work, higher answers "
                 "sooner")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--sampling-threads", flags->scheduler.sampling_threads,
                 "Threads that sample a step's sequences in parallel (0: 1 when the model runs on "
                 "the CPU, as many as --threads when its layers are on a GPU)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--generation-config", flags->generation_config,
                 "Defaults for sampling parameters a request leaves out: openai (temperature 1, "
                 "the full distribution) or llama-server (temperature 0.8, top_k 40, top_p 0.95, "
                 "min_p 0.05)")
      ->check(CLI::IsMember({"openai", "llama-server"}))
      ->capture_default_str();
  app.add_option("--override-generation-config", flags->override_generation_config,
                 "JSON applied over --generation-config, e.g. '{\"temperature\": 0.7, "
                 "\"top_k\": 40, \"max_tokens\": 512}' (fields: temperature, top_p, top_k, "
                 "min_p, max_tokens)");
  app.add_option("--gpu-layers,--n-gpu-layers", flags->engine.gpu_layers,
                 "Layers to offload to the GPU (CUDA builds; default all there, 0 elsewhere)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--chat-template", flags->engine.chat_template,
                 "llama.cpp built-in template name (gemma, chatml, llama3, ...); default: the "
                 "GGUF's own, else chosen by architecture");
  app.add_option("--chat-template-file", flags->engine.chat_template_file,
                 "A Jinja chat template file run instead of the GGUF's (as llama-server's "
                 "--chat-template-file): e.g. one that renders tools")
      ->check(CLI::ExistingFile);
  app.add_flag("--kv-unified,!--no-kv-unified", flags->engine.kv_unified,
               "One KV buffer for all requests (default: a request may use all of --ctx-size); "
               "--no-kv-unified gives each of --max-seqs its own ctx-size/max-seqs cells, as "
               "llama-server does, so attention reads only its own cells: faster with many "
               "concurrent requests, but a request is limited to its share");
  const auto kv_cache_type = CLI::Validator(
      [](std::string& name) {
        return is_kv_cache_type(name) ? std::string()
                                      : "not a KV cache type: one of " + kv_cache_type_names();
      },
      "TYPE");
  app.add_option("--cache-type-k", flags->engine.cache_type_k,
                 "KV cache type for K: f16 (default), bf16, f32, q8_0, q5_1, q5_0, q4_1, q4_0, "
                 "iq4_nl; q8_0 halves the cache's memory and the bytes attention reads")
      ->check(kv_cache_type)
      ->capture_default_str();
  app.add_option("--cache-type-v", flags->engine.cache_type_v,
                 "KV cache type for V, as --cache-type-k (a quantized V needs flash attention)")
      ->check(kv_cache_type)
      ->capture_default_str();
  app.add_flag("--swa-full", flags->engine.swa_full,
               "Keep full-size sliding-window KV caches (more memory; on a sliding-window model "
               "such as Gemma 3 every cached prefix then stays reusable)");
  app.add_option("--policy", flags->policy,
                 "Which waiting request starts next: fcfs (arrival order), priority (the "
                 "request's `priority` field or X-Request-Priority header, lower first, aged by "
                 "--priority-aging-ms; a higher one preempts the lowest running one), or slo "
                 "(earliest first-token deadline first: deadline_ms, else --slo-ttft-ms)")
      ->check(CLI::IsMember({"fcfs", "priority", "slo"}))
      ->capture_default_str();
  app.add_option("--priority-aging-ms", flags->scheduler.queue_policy.priority_aging_ms,
                 "--policy priority: every this many ms waited improve a request's priority by "
                 "one, so nothing starves (0: no aging)")
      ->check(CLI::Range(0.0, 3.6e6))
      ->capture_default_str();
  app.add_option("--slo-ttft-ms", flags->scheduler.queue_policy.slo_ttft_ms,
                 "--policy slo: the first-token deadline of a request that sends no deadline_ms")
      ->check(CLI::Range(1.0, 3.6e6))
      ->capture_default_str();
  app.add_option("--prefix-cache", flags->prefix_cache,
                 "Keep finished requests' KV cells and reuse them for prompts that start with "
                 "the same tokens (shared system prompts, the next turn of a chat); needs "
                 "--kv-unified")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--prefix-cache-min-tokens", flags->scheduler.prefix_cache.min_tokens,
                 "Shortest cached prefix reused (a shorter match is computed again)")
      ->check(CLI::Range(1, 1 << 22))
      ->capture_default_str();
  app.add_option("--prefix-cache-trial-seqs", flags->scheduler.prefix_cache.trial_sequences,
                 "Cached prefixes no later prompt has reused yet, kept at most (oldest freed "
                 "first): each step's attention spans every cell kept, so prompts that never "
                 "repeat would slow all streams; raise it for chats whose next turn comes after "
                 "many other requests")
      ->check(CLI::Range(0, 255))
      ->capture_default_str();
  app.add_option("--prefix-cache-seqs", flags->prefix_cache_seqs,
                 "Finished requests whose cells are kept at most (default: --max-seqs; the "
                 "least recently used is evicted first, and whenever running requests need "
                 "the cells)")
      ->check(CLI::Range(1, 255));
  app.add_option("--cache-ram", flags->cache_ram_mib,
                 "MiB of host memory for the prefix cache's second tier: evicted prefixes' KV "
                 "state is kept there and restored on a hit instead of recomputed (0: off; "
                 "default: 8192, at most a quarter of the machine's memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--max-body-bytes", flags->server.limits.max_body_bytes,
                 "Largest request body accepted (413 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--max-header-bytes", flags->server.limits.max_header_bytes,
                 "Largest request line + headers accepted (431 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-connections", flags->server.max_connections,
                 "Open client connections beyond which new ones get 503 and are closed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--read-timeout", flags->read_timeout_s,
                 "Seconds a connection has to send a whole request (header and body) from its "
                 "first byte; 100-continue does not extend it")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--keep-alive-timeout", flags->keep_alive_timeout_s,
                 "Seconds an idle keep-alive connection waits for its next request")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--write-timeout", flags->write_timeout_s,
                 "Seconds a client may stop reading a response before it is dropped")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--drain-timeout", flags->drain_timeout_s,
                 "Seconds to finish in-flight requests on SIGTERM/SIGINT before cancelling them")
      ->transform(duration_seconds())
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--metrics-compat", flags->metrics_compat,
                 "Also expose the queue and KV gauges under another server's names: vllm "
                 "(vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...; what Kubernetes' "
                 "inference gateway reads), or none")
      ->check(CLI::IsMember({"none", "vllm"}))
      ->capture_default_str();
  app.add_option("--trace-out", flags->trace.path,
                 "Append one JSON line per finished request to this file: arrival, lengths, "
                 "cached tokens, timings, session and prefix block hashes, no text "
                 "(docs/trace.md); brisk bench --trace replays it. SIGHUP reopens it");
  app.add_option("--trace-block-tokens", flags->trace.block_tokens,
                 "Prompt tokens per prefix hash in --trace-out")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--trace-text", flags->trace.include_text,
               "Also write each prompt's text to --trace-out (off: no text is stored)");
  app.add_option("--io-threads", flags->server.io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--log-format", flags->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", flags->log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  flags->embedding_flags = {
      app.add_option("--batch-window-ms", flags->batch_window.window_ms,
                     "Embedding models: how long the oldest waiting input waits for others to "
                     "join its batch (Triton's max_queue_delay; 0: a batch starts as soon as the "
                     "model is free)")
          ->check(CLI::Range(0.0, 10000.0))
          ->capture_default_str(),
      app.add_option("--preferred-batch-sizes", flags->batch_window.preferred_batch_sizes,
                     "Embedding models: batch sizes (inputs) that start without waiting for the "
                     "window, e.g. 8,16,32")
          ->delimiter(',')
          ->check(CLI::Range(1, 256)),
      app.add_option("--max-batch-tokens", flags->embedding.max_batch_tokens,
                     "Embedding models: tokens of all inputs in one batch; also the longest "
                     "input (0: the model's training context)")
          ->check(CLI::Range(0, 1 << 16))
          ->capture_default_str(),
      app.add_option("--max-batch-inputs", flags->embedding.max_batch_inputs,
                     "Embedding models: inputs in one batch")
          ->check(CLI::Range(1, 256))
          ->capture_default_str(),
      app.add_option("--max-queued-inputs", flags->batch_window.max_queued_inputs,
                     "Embedding models: waiting inputs beyond which new requests get 429")
          ->check(CLI::Range(1, 1 << 24))
          ->capture_default_str(),
  };
  for (CLI::Option* option : flags->embedding_flags) option->group("Embedding models");
  for (CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name(/*positional=*/false, /*all_options=*/false);
    const bool every_model = std::find(std::begin(kFlagsOfEveryModel), std::end(kFlagsOfEveryModel),
                                       name) != std::end(kFlagsOfEveryModel);
    const bool embedding = std::find(flags->embedding_flags.begin(), flags->embedding_flags.end(),
                                     option) != flags->embedding_flags.end();
    if (!every_model && !embedding) flags->generation_flags.push_back(option);
  }
  return [flags] { return run_serve(*flags); };
}

}  // namespace brisk
