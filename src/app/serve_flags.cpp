#include "app/serve_flags.h"

#include "app/duration_flag.h"

namespace brisk {

ModelFlags::ModelFlags() {
  scheduler.sampling_threads = 0;  // as many as --threads, settled once they are known
  scheduler.warm_up = true;
#ifdef BRISK_WITH_CUDA
  engine.gpu_layers = 999;
#endif
}

void add_model_flags(CLI::App& app, ModelFlags& flags) {
  const size_t first_option = app.get_options().size();
  app.add_option("-c,--ctx-size", flags.engine.ctx_size,
                 "KV cache capacity in tokens, shared by all running requests")
      ->check(CLI::Range(64, 1 << 22))
      ->capture_default_str();
  app.add_option("--max-seqs", flags.scheduler.max_seqs, "Most requests running at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-batched-tokens", flags.scheduler.max_batched_tokens,
                 "Token budget of one engine step (decodes + prefill chunks)")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  app.add_option("--target-itl-ms,--max-step-ms", flags.scheduler.max_step_ms,
                 "While streams decode, cut prompt chunks so a step (the gap between two tokens "
                 "of every running stream) stays under this many ms, from measured step costs "
                 "(0: off; only --max-batched-tokens limits them)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app.add_option("--min-prefill-step-tokens", flags.scheduler.min_prefill_step_tokens,
                 "A step that carries prompt tokens carries at least this many tokens in all, "
                 "whatever --target-itl-ms says: on CPU, llama.cpp's flash attention is several "
                 "times cheaper per prompt token from 64 tokens a step; 64 trades a longer p99 "
                 "inter-token gap for throughput and first tokens (1: no floor)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--long-prefill-tokens", flags.scheduler.long_prefill_tokens,
                 "A prompt with more tokens than this left to prefill is long: short prompts get "
                 "each step's token budget first (0: oldest first, no distinction)")
      ->check(CLI::Range(0, 1 << 22))
      ->capture_default_str();
  app.add_option("--max-long-prefills", flags.scheduler.max_long_prefills,
                 "Long prompts prefilled at once; the others wait their turn")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-queued-requests", flags.scheduler.max_queued_requests,
                 "Waiting requests beyond which new ones get 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-queue-delay-ms", flags.scheduler.max_queue_delay_ms,
                 "Refuse at once (429, Retry-After) a request whose estimated wait before its "
                 "prompt starts, from the work ahead and measured step costs, is longer than "
                 "this (0: off)")
      ->check(CLI::Range(0.0, 3600000.0))
      ->capture_default_str();
  app.add_flag("--warmup,!--no-warmup", flags.scheduler.warm_up,
               "Before the first request, run a few decode steps and a prompt chunk to measure "
               "what a step costs here, so --max-queue-delay-ms prices a cold server's first "
               "waits (a fraction of a second at start)")
      ->capture_default_str();
  app.add_option("--max-queued-tokens", flags.scheduler.max_queued_tokens,
                 "Prompt tokens waiting in the queue beyond which new requests get 429 (0: no "
                 "limit)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app.add_option("-t,--threads", flags.engine.threads, "CPU threads for llama.cpp (0: all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--poll", flags.engine.poll,
                 "How long llama.cpp's CPU threads spin waiting for the next step, 0-100 (as "
                 "llama-server's --poll): lower frees the cores for other work, higher answers "
                 "sooner")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--sampling-threads", flags.scheduler.sampling_threads,
                 "Threads that sample a step's sequences in parallel (0: 1 when the model runs on "
                 "the CPU, as many as --threads when its layers are on a GPU)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--generation-config", flags.generation_config,
                 "Defaults for sampling parameters a request leaves out: openai (temperature 1, "
                 "the full distribution) or llama-server (temperature 0.8, top_k 40, top_p 0.95, "
                 "min_p 0.05)")
      ->check(CLI::IsMember({"openai", "llama-server"}))
      ->capture_default_str();
  app.add_option("--override-generation-config", flags.override_generation_config,
                 "JSON applied over --generation-config, e.g. '{\"temperature\": 0.7, "
                 "\"top_k\": 40, \"max_tokens\": 512}' (fields: temperature, top_p, top_k, "
                 "min_p, max_tokens)");
  app.add_option("--gpu-layers,--n-gpu-layers", flags.engine.gpu_layers,
                 "Layers to offload to the GPU (CUDA builds; default all there, 0 elsewhere)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--device", flags.engine.device,
                 "Put the whole model on GPU N (CUDA builds; -1: spread over every GPU). Models "
                 "on different GPUs do not take turns, and each GPU has its own --memory-budget")
      ->check(CLI::Range(-1, 255))
      ->capture_default_str();
  app.add_option("--chat-template", flags.engine.chat_template,
                 "llama.cpp built-in template name (gemma, chatml, llama3, ...); default: the "
                 "GGUF's own, else chosen by architecture");
  app.add_option("--chat-template-file", flags.engine.chat_template_file,
                 "A Jinja chat template file run instead of the GGUF's (as llama-server's "
                 "--chat-template-file): e.g. one that renders tools")
      ->check(CLI::ExistingFile);
  app.add_flag("--kv-unified,!--no-kv-unified", flags.engine.kv_unified,
               "One KV buffer for all requests (default: a request may use all of --ctx-size); "
               "--no-kv-unified gives each of --max-seqs its own ctx-size/max-seqs cells, as "
               "llama-server does, so attention reads only its own cells: faster with many "
               "concurrent requests, but a request is limited to its share");
  app.add_option("--cpu-attention-rows", flags.engine.cpu_attention_rows,
                 "On the CPU with one KV buffer, a step's decodes go to llama.cpp in calls of at "
                 "most this many rows and prompt chunks of 64+ tokens in a call of their own: "
                 "ggml-cpu's flash attention then reads only each decode's own cells (from 64 "
                 "rows it reads every cell in use for every row). 0: one call per step")
      ->check(CLI::Range(0, kMaxPerRowAttentionRows))
      ->capture_default_str();
  const auto kv_cache_type = CLI::Validator(
      [](std::string& name) {
        return is_kv_cache_type(name) ? std::string()
                                      : "not a KV cache type: one of " + kv_cache_type_names();
      },
      "TYPE");
  app.add_option("--cache-type-k", flags.engine.cache_type_k,
                 "KV cache type for K: f16 (default), bf16, f32, q8_0, q5_1, q5_0, q4_1, q4_0, "
                 "iq4_nl; q8_0 halves the cache's memory and the bytes attention reads")
      ->check(kv_cache_type)
      ->capture_default_str();
  app.add_option("--cache-type-v", flags.engine.cache_type_v,
                 "KV cache type for V, as --cache-type-k (a quantized V needs flash attention)")
      ->check(kv_cache_type)
      ->capture_default_str();
  app.add_flag("--swa-full", flags.engine.swa_full,
               "Keep full-size sliding-window KV caches (more memory; on a sliding-window model "
               "such as Gemma 3 every cached prefix then stays reusable)");
  app.add_option("--policy", flags.policy,
                 "Which waiting request starts next: fcfs (arrival order), priority (the "
                 "request's `priority` field or X-Request-Priority header, lower first, aged by "
                 "--priority-aging-ms; a higher one preempts the lowest running one), or slo "
                 "(earliest first-token deadline first: deadline_ms, else --slo-ttft-ms)")
      ->check(CLI::IsMember({"fcfs", "priority", "slo"}))
      ->capture_default_str();
  app.add_option("--priority-aging-ms", flags.scheduler.queue_policy.priority_aging_ms,
                 "--policy priority: every this many ms waited improve a request's priority by "
                 "one, so nothing starves (0: no aging)")
      ->check(CLI::Range(0.0, 3.6e6))
      ->capture_default_str();
  app.add_option("--slo-ttft-ms", flags.scheduler.queue_policy.slo_ttft_ms,
                 "--policy slo: the first-token deadline of a request that sends no deadline_ms")
      ->check(CLI::Range(1.0, 3.6e6))
      ->capture_default_str();
  app.add_option("--prefix-cache", flags.prefix_cache,
                 "Keep finished requests' KV cells and reuse them for prompts that start with "
                 "the same tokens (shared system prompts, the next turn of a chat); needs "
                 "--kv-unified")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--prefix-cache-min-tokens", flags.scheduler.prefix_cache.min_tokens,
                 "Shortest cached prefix reused (a shorter match is computed again)")
      ->check(CLI::Range(1, 1 << 22))
      ->capture_default_str();
  app.add_option("--prefix-cache-trial-seqs", flags.scheduler.prefix_cache.trial_sequences,
                 "Cached prefixes no later prompt has reused yet, kept at most (oldest freed "
                 "first): each step's attention spans every cell kept, so prompts that never "
                 "repeat would slow all streams; raise it for chats whose next turn comes after "
                 "many other requests")
      ->check(CLI::Range(0, 255))
      ->capture_default_str();
  app.add_option("--prefix-cache-seqs", flags.prefix_cache_seqs,
                 "Finished requests whose cells are kept at most (default: --max-seqs; the "
                 "least recently used is evicted first, and whenever running requests need "
                 "the cells)")
      ->check(CLI::Range(1, 255));
  app.add_option("--cache-ram", flags.cache_ram_mib,
                 "MiB of host memory for the prefix cache's second tier: evicted prefixes' KV "
                 "state is kept there and restored on a hit instead of recomputed (0: off; "
                 "default: 8192, at most a quarter of the machine's memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  flags.embedding_flags = {
      app.add_option("--batch-window-ms", flags.batch_window.window_ms,
                     "Embedding models: how long the oldest waiting input waits for others to "
                     "join its batch (Triton's max_queue_delay; 0: a batch starts as soon as the "
                     "model is free)")
          ->check(CLI::Range(0.0, 10000.0))
          ->capture_default_str(),
      app.add_option("--preferred-batch-sizes", flags.batch_window.preferred_batch_sizes,
                     "Embedding models: batch sizes (inputs) that start without waiting for the "
                     "window, e.g. 8,16,32")
          ->delimiter(',')
          ->check(CLI::Range(1, 256)),
      app.add_option("--max-batch-tokens", flags.embedding.max_batch_tokens,
                     "Embedding models: tokens of all inputs in one batch; also the longest "
                     "input (0: the model's training context)")
          ->check(CLI::Range(0, 1 << 16))
          ->capture_default_str(),
      app.add_option("--max-batch-inputs", flags.embedding.max_batch_inputs,
                     "Embedding models: inputs in one batch")
          ->check(CLI::Range(1, 256))
          ->capture_default_str(),
      app.add_option("--max-queued-inputs", flags.batch_window.max_queued_inputs,
                     "Embedding models: waiting inputs beyond which new requests get 429")
          ->check(CLI::Range(1, 1 << 24))
          ->capture_default_str(),
  };
  for (CLI::Option* option : flags.embedding_flags) option->group("Embedding models");
  const std::vector<CLI::Option*> options = app.get_options();
  for (size_t i = first_option; i < options.size(); ++i) {
    const std::string name = options[i]->get_name(/*positional=*/false, /*all_options=*/false);
    const bool every_model = name == "--threads" || name == "--gpu-layers" || name == "--device";
    const bool embedding = std::find(flags.embedding_flags.begin(), flags.embedding_flags.end(),
                                     options[i]) != flags.embedding_flags.end();
    if (!every_model && !embedding) flags.generation_flags.push_back(options[i]);
  }
}

void add_server_flags(CLI::App& app, ServeFlags& flags) {
  app.add_option("-m,--model", flags.models,
                 "Catalog name (see `brisk pull`) or path to a GGUF file; repeat it to serve "
                 "several models side by side (the first of each kind answers requests that "
                 "name none)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  flags.models_option = app.get_option("--model");
  app.add_option("--models", flags.models_file,
                 "A TOML file of the models to serve, each with its own names, share of the "
                 "device and model flags (docs/models.md); instead of --model")
      ->check(CLI::ExistingFile);
  app.add_option("--served-model-name", flags.served_model_names,
                 "Model id clients use (default: the catalog name or the file's stem); with "
                 "several --model, one per model in their order")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--host", flags.server.host, "Address to bind")->capture_default_str();
  app.add_option("--port", flags.server.port, "Port to bind (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--api-key", flags.server.api_key,
                 "Require 'Authorization: Bearer KEY' on every route but --public-routes");
  app.add_option("--public-routes", flags.server.public_routes,
                 "Routes served without the --api-key (probes, Prometheus); pass an empty "
                 "string to protect every route")
      ->delimiter(',')
      ->expected(0, -1)
      ->capture_default_str();
  app.add_option("--max-body-bytes", flags.server.limits.max_body_bytes,
                 "Largest request body accepted (413 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--max-header-bytes", flags.server.limits.max_header_bytes,
                 "Largest request line + headers accepted (431 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-connections", flags.server.max_connections,
                 "Open client connections beyond which new ones get 503 and are closed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--read-timeout", flags.read_timeout_s,
                 "Seconds a connection has to send a whole request (header and body) from its "
                 "first byte; 100-continue does not extend it")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--keep-alive-timeout", flags.keep_alive_timeout_s,
                 "Seconds an idle keep-alive connection waits for its next request")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--write-timeout", flags.write_timeout_s,
                 "Seconds a client may stop reading a response before it is dropped")
      ->transform(duration_seconds())
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--drain-timeout", flags.drain_timeout_s,
                 "Seconds to finish in-flight requests on SIGTERM/SIGINT before cancelling them")
      ->transform(duration_seconds())
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--memory-budget", flags.memory_budget,
                 "Memory the loaded models may take together: weights, KV cache, compute "
                 "buffers and host caches (12GiB, 800MiB, or a share such as 60%; default: "
                 "75% of the device's memory). Models that do not fit wait unloaded and load "
                 "on demand, unloading the least recently used idle ones");
  app.add_option("--keep-alive", flags.keep_alive_s,
                 "Unload a model (not pinned) idle this long (5m, 1h; -1: keep it until its "
                 "memory is needed)")
      ->transform(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "-1") return {};
            return duration_seconds()(text);
          },
          "DURATION", "duration or -1"))
      ->default_str("-1");
  app.add_option("--max-load-wait", flags.max_load_wait_s,
                 "Longest a request waits for its model to load (memory held by busy models "
                 "included) before a 503 with Retry-After")
      ->transform(duration_seconds())
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--metrics-compat", flags.metrics_compat,
                 "Also expose the queue and KV gauges under another server's names: vllm "
                 "(vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...; what Kubernetes' "
                 "inference gateway reads), or none")
      ->check(CLI::IsMember({"none", "vllm"}))
      ->capture_default_str();
  app.add_option("--trace-out", flags.trace.path,
                 "Append one JSON line per finished request to this file: arrival, lengths, "
                 "cached tokens, timings, session and prefix block hashes, no text "
                 "(docs/trace.md); brisk bench --trace replays it. SIGHUP reopens it");
  app.add_option("--trace-block-tokens", flags.trace.block_tokens,
                 "Prompt tokens per prefix hash in --trace-out")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--trace-text", flags.trace.include_text,
               "Also write each prompt's text to --trace-out (off: no text is stored)");
  app.add_option("--io-threads", flags.server.io_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
}

}  // namespace brisk
