#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "app/commands.h"
#include "app/serve_flags.h"
#include "common/byte_size.h"
#include "common/log.h"
#include "common/model_store.h"
#include "common/models_file.h"
#include "engine/attention_calls.h"
#include "engine/embedding_model.h"
#include "engine/engine.h"
#include "engine/llama_backend.h"
#include "plan/memory_model.h"
#include "plan/model_profile.h"
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

// One model to serve: what to load, under which names, with which flags and share of the device.
struct ModelSpec {
  std::string model;   // as --model (or `model` of the file) names it
  std::string origin;  // where it was named, for messages: "--model X" or "FILE:LINE: [[model]] N"
  ResolveResult resolved;
  bool embedding = false;  // a pooling model (embeddings or a reranker): the batcher serves it
  bool reranker = false;   // its pooling is rank: /v1/rerank
  std::string name;  // empty until resolved: the catalog name or the file's stem
  std::vector<std::string> aliases;
  DeviceTenantOptions share;
  bool pinned = false;
  ModelFlags flags;
  GenerationDefaults generation;  // a generative model's, set once its flags are checked
  size_t host_cache_bytes = 0;    // its prefix cache's host tier (--cache-ram)
  plan::ServingMemory memory;     // what it takes of --memory-budget, estimated before loading
};

// An embedding model serves /v1/embeddings through the dynamic batcher, a reranker /v1/rerank;
// nothing of the completion engine (KV cache, step scheduler) is built.
std::unique_ptr<ModelParts> load_embedding_model(const ModelFlags& flags, const std::string& name,
                                                 const ResolveResult& model, std::string* error) {
  EmbeddingModelOptions options = flags.embedding;
  options.model_path = model.path.string();
  options.threads = flags.engine.threads;
  options.gpu_layers = flags.engine.gpu_layers;
  options.device = flags.engine.device;
  spdlog::info("loading {} (a pooling model)", model.path.string());
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
      "{}: {} ({}, {} outputs, {} pooling), inputs up to {} tokens; batches of up to {} inputs "
      "and {} tokens, window {} ms, preferred sizes {}",
      name, embedding_model->ranks() ? "/v1/rerank" : "/v1/embeddings",
      embedding_model->description(), embedding_model->dimensions(),
      embedding_model->pooling_name(), embedding_model->max_input_tokens(),
      options.max_batch_inputs, embedding_model->max_batch_tokens(), flags.batch_window.window_ms,
      preferred.empty() ? "none" : preferred);
  auto parts = std::make_unique<ModelParts>();
  parts->embedding_model = std::move(embedding_model);
  parts->batch_window = flags.batch_window;
  return parts;
}

std::unique_ptr<ModelParts> load_generative_model(const ModelFlags& flags,
                                                  const GenerationDefaults& generation,
                                                  std::string name, const ResolveResult& model,
                                                  size_t host_cache_bytes, std::string* error) {
  EngineOptions engine_options = flags.engine;
  SchedulerOptions scheduler = flags.scheduler;
  engine_options.model_path = model.path.string();
  scheduler.prefix_cache.enabled = flags.prefix_cache == "on";
  scheduler.prefix_cache.host_bytes = host_cache_bytes;
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
  if (!engine->attention_on_gpu()) scheduler.min_alone_chunk_tokens = kTiledAttentionRows;
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
  route.generation = generation;
  // A prompt read from the prefix cache was computed in another batch than a recomputed one.
  const std::string numerics =
      engine->numerics_identity() +
      (scheduler.prefix_cache.enabled ? "; prefix cache on" : "; prefix cache off");
  route.system_fingerprint = system_fingerprint_for(numerics);
  spdlog::info("{}: {} — ctx {} tokens, max {} per request, {} seqs, sampling threads: {}",
               route.model_name, engine->description(), engine->context_size(),
               engine->max_request_tokens(), scheduler.max_seqs, scheduler.sampling_threads);
  spdlog::info("{}: chat template {}", route.model_name, engine->chat_template_origin());
  spdlog::info("{}: requests that name no sampling parameter get: {}", route.model_name,
               describe_generation_defaults(generation));
  spdlog::info("{}: system_fingerprint {}: {}", route.model_name, route.system_fingerprint,
               numerics);
  auto parts = std::make_unique<ModelParts>();
  parts->engine = std::move(engine);
  parts->scheduler = scheduler;
  parts->route = std::move(route);
  return parts;
}

// A flag only the other kind of model takes, given to `spec` in its models file entry.
std::optional<std::string> check_entry_flags_fit(const ModelSpec& spec) {
  const auto& wrong = spec.embedding ? spec.flags.generation_flags : spec.flags.embedding_flags;
  for (const CLI::Option* option : wrong) {
    if (option->count() == 0) continue;
    return fmt::format("{}: '{}' sets {}, and '{}' is {} model", spec.origin,
                       option->get_name().substr(2),
                       spec.embedding ? "the completion engine" : "the batcher of an embedding model",
                       spec.model, spec.embedding ? "an embedding" : "a generative");
  }
  return std::nullopt;
}

// A command-line model flag of a kind no served model has.
std::optional<std::string> check_flags_fit_the_models(const ModelFlags& flags, bool any_generative,
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

// The checks of one generative model's flags that need nothing loaded; its generation defaults.
std::variant<GenerationDefaults, std::string> check_generative_flags(const ModelFlags& flags) {
  if (flags.scheduler.max_batched_tokens <= flags.scheduler.max_seqs) {
    return fmt::format(
        "--max-batched-tokens ({}) must be larger than --max-seqs ({}) so prompts can make "
        "progress beside running decodes",
        flags.scheduler.max_batched_tokens, flags.scheduler.max_seqs);
  }
  if (flags.prefix_cache_seqs >= 0 && !flags.engine.kv_unified) {
    return std::string(
        "--prefix-cache-seqs counts extra sequences of one KV buffer (--kv-unified); with "
        "--no-kv-unified the idle ones of --max-seqs hold the prefix cache");
  }
  return make_generation_defaults(flags.generation_config, flags.override_generation_config);
}

// The server's own flags, checked before any model loads.
std::optional<std::string> check_server_flags(ServeFlags& flags) {
  if (!flags.models_file.empty() &&
      (flags.models_option->count() > 0 || !flags.served_model_names.empty())) {
    return std::string(
        "--models names the models and their names: leave out --model and "
        "--served-model-name");
  }
  if (!flags.served_model_names.empty() &&
      flags.served_model_names.size() != flags.models.size()) {
    return fmt::format(
        "--served-model-name is given {} times for {} --model: give one name per model, in "
        "the same order",
        flags.served_model_names.size(), flags.models.size());
  }
  if (auto error = check_file_descriptor_room(flags.server.max_connections)) return error;
  std::erase(flags.server.public_routes, std::string());  // --public-routes "" protects all
  for (const std::string& route : flags.server.public_routes) {
    if (!route.starts_with("/")) {
      return "--public-routes takes paths such as /health, not '" + route + "'";
    }
  }
  if (flags.trace.path.empty() && flags.trace.include_text) {
    return std::string("--trace-text adds the prompts' text to --trace-out: name the file");
  }
  return std::nullopt;
}

// Why the models cannot be served, and the exit status that says so (1: a model cannot be
// found, 2: the flags or the models file are wrong).
struct SpecFailure {
  std::string message;
  int exit_status = 2;
};

std::optional<SpecFailure> resolve(ModelSpec& spec) {
  spec.resolved = ModelStore::from_environment().resolve(spec.model);
  if (!spec.resolved.ok()) {
    return SpecFailure{spec.origin.starts_with("--model")
                           ? spec.resolved.error
                           : spec.origin + ": " + spec.resolved.error,
                       1};
  }
  const FilePooling pooling = pooling_of_model_file(spec.resolved.path.string());
  spec.embedding = pooling != FilePooling::none;
  spec.reranker = pooling == FilePooling::rank;
  if (spec.name.empty()) spec.name = spec.resolved.served_name;
  spec.share.name = spec.name;
  return std::nullopt;
}

// The models of a --models file: each starts from the command line's model flags and applies
// its own over them.
std::variant<std::vector<ModelSpec>, SpecFailure> specs_from_file(const ServeFlags& flags) {
  auto read = read_models_file(flags.models_file);
  if (auto* error = std::get_if<std::string>(&read)) return SpecFailure{*error, 2};
  std::vector<ModelSpec> specs;
  for (const ModelFileEntry& entry : std::get<std::vector<ModelFileEntry>>(read)) {
    ModelSpec spec;
    spec.model = entry.model;
    spec.origin =
        fmt::format("{}:{}: [[model]] {}", flags.models_file, entry.line, specs.size() + 1);
    spec.name = entry.name;
    spec.aliases = entry.aliases;
    spec.share.weight = entry.weight;
    spec.share.critical = entry.critical;
    spec.pinned = entry.pinned;
    if (auto error = resolve(spec)) return *error;
    spec.flags = flags.model;
    spec.flags.embedding_flags.clear();
    spec.flags.generation_flags.clear();
    CLI::App entry_flags("the flags of one model");
    add_model_flags(entry_flags, spec.flags);
    std::vector<std::string> args(entry.flag_args.rbegin(), entry.flag_args.rend());
    try {
      entry_flags.parse(args);
    } catch (const CLI::ExtrasError& e) {
      return SpecFailure{fmt::format("{}: {} (its keys are model, name, aliases, critical, "
                                     "weight and the model flags of `brisk serve --help` "
                                     "without their dashes; the server's own, such as port, "
                                     "go on the command line)",
                                     spec.origin, e.what()),
                         2};
    } catch (const CLI::ParseError& e) {
      return SpecFailure{fmt::format("{}: {}", spec.origin, e.what()), 2};
    }
    if (auto error = check_entry_flags_fit(spec)) return SpecFailure{*error, 2};
    spec.flags.embedding_flags.clear();  // their options die with entry_flags
    spec.flags.generation_flags.clear();
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::variant<std::vector<ModelSpec>, SpecFailure> specs_from_command_line(
    const ServeFlags& flags) {
  std::vector<ModelSpec> specs;
  for (size_t i = 0; i < flags.models.size(); ++i) {
    ModelSpec spec;
    spec.model = flags.models[i];
    spec.origin = "--model " + spec.model;
    if (!flags.served_model_names.empty()) spec.name = flags.served_model_names[i];
    if (auto error = resolve(spec)) return *error;
    spec.flags = flags.model;
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::optional<std::string> check_names_are_distinct(const std::vector<ModelSpec>& specs) {
  std::set<std::string> seen;
  for (const ModelSpec& spec : specs) {
    std::vector<std::string> names = spec.aliases;
    names.push_back(spec.name);
    for (const std::string& name : names) {
      if (!seen.insert(name).second) {
        return fmt::format("two models are served as '{}': give each its own name{}", name,
                           spec.origin.starts_with("--model") ? " (--served-model-name)" : "");
      }
    }
  }
  return std::nullopt;
}

// What the model takes of --memory-budget, from its file's shape and its flags.
std::variant<plan::ServingMemory, std::string> estimate_memory(const ModelSpec& spec) {
  std::string error;
  const auto profile = plan::profile_from_gguf(spec.resolved.path.string(), &error);
  if (!profile) return spec.origin + ": " + error;
  plan::ServingShape shape;
  if (spec.embedding) {
    shape.kv_cells = 0;
    shape.step_tokens = spec.flags.embedding.max_batch_tokens > 0
                            ? spec.flags.embedding.max_batch_tokens
                            : std::max(512, profile->max_context);
  } else {
    const EngineOptions& engine = spec.flags.engine;
    shape.kv_cells = engine.ctx_size;
    shape.max_seqs = spec.flags.scheduler.max_seqs;
    shape.kv_unified = engine.kv_unified;
    shape.kv_bytes_per_element = (plan::kv_cache_type_bytes(engine.cache_type_k) +
                                  plan::kv_cache_type_bytes(engine.cache_type_v)) /
                                 2;
    shape.step_tokens = spec.flags.scheduler.max_batched_tokens;
    // On a GPU the host tier is in the machine's memory, not the device's.
    shape.host_cache_bytes =
        spec.flags.prefix_cache == "on" && engine.gpu_layers == 0 ? spec.host_cache_bytes : 0;
  }
  return plan::serving_memory(*profile, shape);
}

std::unique_ptr<ServedModel> make_served_model(const ModelSpec& spec,
                                               RejectionCounts& rejections) {
  ServedModel::Options options;
  options.name = spec.name;
  options.kind = spec.reranker    ? ModelKind::reranker
                 : spec.embedding ? ModelKind::embedding
                                  : ModelKind::generative;
  options.aliases = spec.aliases;
  options.share = spec.share;
  options.pinned = spec.pinned;
  options.memory_bytes = spec.memory.total();
  options.max_waiting = spec.embedding ? 1024 : spec.flags.scheduler.max_queued_requests;
  options.device = spec.flags.engine.device;
  ModelLoader loader = [spec](std::string* error) -> std::unique_ptr<ModelParts> {
    if (spec.embedding) return load_embedding_model(spec.flags, spec.name, spec.resolved, error);
    return load_generative_model(spec.flags, spec.generation, spec.name, spec.resolved,
                                 spec.host_cache_bytes, error);
  };
  return std::make_unique<ServedModel>(std::move(options), std::move(loader), rejections);
}

// --memory-budget (of each device), or 75% of the device's memory: the GPU's when layers go to
// one (the smallest of those the models are on), else the machine's RAM (the headroom rule:
// keep a quarter free for the runtime and the rest).
std::variant<uint64_t, std::string> memory_budget(const ServeFlags& flags,
                                                  const std::vector<ModelSpec>& specs) {
  std::optional<uint64_t> device;
  for (const ModelSpec& spec : specs) {
    if (spec.flags.engine.gpu_layers == 0) continue;
    const auto gpu = gpu_memory_bytes(std::max(0, spec.flags.engine.device));
    if (gpu) device = std::min(device.value_or(*gpu), *gpu);
  }
  if (!device) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_bytes = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_bytes > 0) {
      device = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes);
    }
  }
  if (flags.memory_budget.empty()) {
    if (!device) return std::string("cannot tell this machine's memory: give --memory-budget");
    return *device / 4 * 3;
  }
  std::string error;
  const auto bytes = parse_byte_size(flags.memory_budget, device, error);
  if (!bytes) return "--memory-budget: " + error;
  return *bytes;
}

int run_serve(ServeFlags& flags) {
  if (!configure_logging(flags.log_format == "json" ? LogFormat::json : LogFormat::text,
                         flags.log_level)) {
    std::cerr << "error: unknown --log-level '" << flags.log_level << "'\n";
    return 2;
  }
  if (auto error = check_server_flags(flags)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  // Every model's flags are checked before the first one loads: a mistake fails in a moment,
  // not after minutes of loading.
  auto made = flags.models_file.empty() ? specs_from_command_line(flags) : specs_from_file(flags);
  if (auto* failure = std::get_if<SpecFailure>(&made)) {
    std::cerr << "error: " << failure->message << "\n";
    return failure->exit_status;
  }
  std::vector<ModelSpec>& specs = std::get<std::vector<ModelSpec>>(made);
  if (auto error = check_names_are_distinct(specs)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  bool any_generative = false;
  bool any_embedding = false;
  for (ModelSpec& spec : specs) {
    any_embedding = any_embedding || spec.embedding;
    any_generative = any_generative || !spec.embedding;
    if (spec.embedding) continue;
    auto generation = check_generative_flags(spec.flags);
    if (auto* error = std::get_if<std::string>(&generation)) {
      std::cerr << "error: " << (specs.size() > 1 ? spec.name + ": " : "") << *error << "\n";
      return 2;
    }
    spec.generation = std::get<GenerationDefaults>(generation);
  }
  if (auto error = check_flags_fit_the_models(flags.model, any_generative, any_embedding)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  // The default host tier (--cache-ram) is shared among the generative models.
  const int generative_models = static_cast<int>(
      std::count_if(specs.begin(), specs.end(), [](const ModelSpec& s) { return !s.embedding; }));
  for (ModelSpec& spec : specs) {
    spec.host_cache_bytes = cache_ram_bytes(spec.flags.cache_ram_mib);
    if (spec.flags.cache_ram_mib < 0) spec.host_cache_bytes /= std::max(1, generative_models);
    auto memory = estimate_memory(spec);
    if (auto* error = std::get_if<std::string>(&memory)) {
      std::cerr << "error: " << *error << "\n";
      return 2;
    }
    spec.memory = std::get<plan::ServingMemory>(memory);
  }
  auto budget = memory_budget(flags, specs);
  if (auto* error = std::get_if<std::string>(&budget)) {
    std::cerr << "error: " << *error << "\n";
    return 2;
  }
  ResidencyOptions residency;
  residency.memory_budget_bytes = std::get<uint64_t>(budget);
  if (flags.memory_budget.empty()) {
    // The default budget is a rule of thumb, not the user's word: a model it cannot hold is
    // still served (the budget grows to hold it), with a warning. A given budget refuses it.
    std::vector<ResidentModel> view;
    for (const ModelSpec& spec : specs) {
      view.push_back(ResidentModel{.bytes = spec.memory.total(), .pinned = spec.pinned});
    }
    const ModelResidency rule(residency.memory_budget_bytes);
    uint64_t raised = residency.memory_budget_bytes;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (auto missing = rule.shortfall_beside_pinned(view, i)) {
        raised = std::max(raised, residency.memory_budget_bytes + *missing);
      }
    }
    if (raised > residency.memory_budget_bytes) {
      spdlog::warn(
          "the models need up to {} at once, more than the default memory budget {} (75% of "
          "this device's memory, a quarter kept free): serving them within {}; set "
          "--memory-budget to hold the headroom, or lower --ctx-size or --cache-ram",
          format_bytes(raised), format_bytes(residency.memory_budget_bytes),
          format_bytes(raised));
      residency.memory_budget_bytes = raised;
    }
  }
  if (flags.keep_alive_s >= 0) residency.keep_alive_s = flags.keep_alive_s;
  residency.max_load_wait_s = flags.max_load_wait_s;
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

  RejectionCounts rejections;
  ModelRegistry registry(residency);
  for (const ModelSpec& spec : specs) {
    std::string error;
    if (!registry.add(make_served_model(spec, rejections), &error)) {
      std::cerr << "error: " << error << "\n";
      return 2;
    }
    spdlog::info(
        "{}: takes {} of the memory budget {} (weights {}, KV cache {}, compute {}, host cache "
        "{}){}",
        spec.name, format_bytes(spec.memory.total()),
        format_bytes(residency.memory_budget_bytes), format_bytes(spec.memory.weights),
        format_bytes(spec.memory.kv_cache), format_bytes(spec.memory.compute),
        format_bytes(spec.memory.host_cache), spec.pinned ? "; pinned" : "");
  }
  if (auto error = registry.load_at_start()) {
    std::cerr << "error: " << *error << "\n";
    return 1;
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
  registry.start_residency();
  if (registry.several()) {
    std::string shares;
    for (const auto& model : registry.models()) {
      const DeviceTenantOptions& share = model->device_share();
      shares += fmt::format("{}{} {}", shares.empty() ? "" : ", ", model->name(),
                            share.critical ? std::string("critical")
                                           : fmt::format("weight {}", share.weight));
    }
    spdlog::info("one model's step at a time on this device: {}", shares);
  }
  spdlog::info("serving {} on http://{}:{}", registry.quoted_names(), flags.server.host,
               server.port());
  server.run_until_signal();
  registry.shutdown_all(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace

CommandRunner register_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  add_server_flags(app, *flags);
  add_model_flags(app, flags->model);
  return [flags] { return run_serve(*flags); };
}

}  // namespace brisk
