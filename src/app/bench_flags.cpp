#include "app/bench_flags.h"

#include "app/duration_flag.h"

#include "bench/chat_session.h"
#include "bench/length_distribution.h"
#include "bench/workload_preset.h"

namespace brisk {

CLI::Option* add_bench_flags(CLI::App& app, BenchFlags& flags) {
  app.add_option("--url", flags.url, "Base URL of the OpenAI-compatible server")
      ->capture_default_str();
  app.add_option("--endpoint", flags.endpoint,
                 "Which API to drive: completions, chat, embeddings (synthetic inputs of "
                 "--input-tokens, --inputs-per-request in each request) or rerank (a 16-token "
                 "query and --inputs-per-request documents of --input-tokens)")
      ->check(CLI::IsMember({"completions", "chat", "embeddings", "rerank"}))
      ->capture_default_str();
  app.add_option("--inputs-per-request", flags.inputs_per_request,
                 "--endpoint embeddings: inputs in each request; rerank: documents")
      ->check(CLI::Range(1, 2048))
      ->capture_default_str();
  app.add_option("--model", flags.model, "Model name (default: the first of GET /v1/models)");
  app.add_option("--api-key", flags.api_key, "Sent as 'Authorization: Bearer KEY'");
  app.add_option("--rate", flags.rates,
                 "Open loop: requests per second (a list runs a sweep; inf = all at once). "
                 "Latency then counts from each request's scheduled time")
      ->delimiter(',')
      ->check([](const std::string& value) -> std::string {
        if (value == "inf") return {};
        try {
          size_t used = 0;
          const double rate = std::stod(value, &used);
          if (used == value.size() && rate > 0) return {};
        } catch (const std::exception&) {
        }
        return "a rate is a positive number of requests per second, or inf";
      });
  app.add_option("--arrival", flags.arrival, "Open-loop arrivals: constant, poisson or gamma")
      ->check(CLI::IsMember({"constant", "poisson", "gamma"}))
      ->capture_default_str();
  app.add_option("--burstiness", flags.burstiness,
                 "Gamma shape for --arrival gamma: < 1 burstier than Poisson")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-concurrency", flags.max_concurrency,
                 "Open loop: most requests in flight (0: no cap); late ones wait, and the wait "
                 "counts in their latency")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--concurrency", flags.concurrency,
                 "Virtual users; a list (1,4,16) runs a sweep, one run per value")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto* num_requests =
      app.add_option("--num-requests", flags.num_requests, "Measured requests per load point")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  app.add_option("--duration", flags.duration_s,
                 "Seconds of measured load per load point, instead of --num-requests (requests "
                 "in flight at the end still finish)")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->excludes(num_requests);
  app.add_option("--warmup-requests", flags.warmup_requests,
                 "Requests sent first at each load point and left out of the statistics")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  const auto length_check = [](const std::string& value) {
    std::string error;
    return bench::parse_length_distribution(value, error) ? std::string() : error;
  };
  app.add_option("--input-tokens", flags.input_tokens,
                 "Prompt length in the server's tokens: N, uniform:MIN:MAX or normal:MEAN:STDDEV")
      ->check(length_check)
      ->capture_default_str();
  auto* output_tokens =
      app.add_option("--output-tokens", flags.output_tokens,
                     "Tokens generated per request: N, uniform:MIN:MAX or normal:MEAN:STDDEV "
                     "(given with --dataset/--sharegpt: replaces each prompt's own length)")
          ->check(length_check)
          ->capture_default_str();
  app.add_option("--dataset", flags.dataset,
                 "JSONL test set: one {\"prompt\": ...} or {\"messages\": [...]} per line, "
                 "optional \"max_tokens\"; request i sends line i mod n")
      ->check(CLI::ExistingFile);
  app.add_option("--sharegpt", flags.sharegpt,
                 "ShareGPT JSON file: first human turn as prompt, the reply's length as output, "
                 "sampled with --seed")
      ->check(CLI::ExistingFile);
  app.add_option("--preset", flags.preset,
                 "Named workload run as its own load points: standard = short and long input, "
                 "each at low and peak concurrency (sizes: "
                 "standard:short=128,long=2048,output=128,low=1,peak=16)");
  app.add_option("--progress", flags.progress,
                 "Progress on stderr: auto (a bar on a terminal, else a line every 5 s), bar, "
                 "lines or off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();
  app.add_option("--retry-after", flags.retry_after,
                 "Closed loop: a user refused with Retry-After (429, 503) waits that long before "
                 "its next request, as the openai SDK does (honour), or resends at once (ignore; "
                 "against a server that sheds load the users then spin)")
      ->check(CLI::IsMember({"honour", "ignore"}))
      ->capture_default_str();
  app.add_flag("--busy-poll", flags.busy_poll,
               "Spin instead of sleeping between network events: uses a whole core, and keeps an "
               "idle CPU's wake-up delay (tens of microseconds) out of the timings");
  app.add_option("--seed", flags.seed,
                 "Seed of the synthetic prompts, their lengths, the ShareGPT sample and open-loop "
                 "arrivals")
      ->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "Per-request timeout in seconds")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--no-stream", flags.no_stream,
               "Ask for whole responses: only E2E and throughput are measured (no TTFT/ITL/TPOT)");
  app.add_option("--temperature", flags.sampling.temperature,
                 "Sent as \"temperature\" with every request (default: not sent, the server's "
                 "own default applies)");
  app.add_option("--top-p", flags.sampling.top_p,
                 "Sent as \"top_p\", in (0, 1] (default: not sent)");
  app.add_option("--top-k", flags.sampling.top_k,
                 "Sent as \"top_k\"; -1 or 0 mean no limit on vLLM and llama.cpp (default: not "
                 "sent)");
  app.add_option("--min-p", flags.sampling.min_p,
                 "Sent as \"min_p\", in [0, 1] (default: not sent)");
  app.add_option("--extra-body", flags.extra_body,
                 "A JSON object whose keys are added to every request body, e.g. "
                 "'{\"seed\": 1, \"repetition_penalty\": 1.1}'; it may replace ignore_eos, but not "
                 "the prompt, model, max_tokens, stream or a key that has its own flag");
  app.add_option("--out", flags.out_dir, "Directory for result.json and requests.csv");
  app.add_option("--usd-per-hour", flags.usd_per_hour,
                 "Price of the serving hardware: adds $/1M output tokens and $/1k requests")
      ->check(CLI::PositiveNumber);
  app.add_option("--slo", flags.slo,
                 "Limits such as ttft_p99=500ms,tpot_p99=50ms: adds goodput (requests/s meeting "
                 "every limit) and whether each load point meets them");
  app.add_flag("--find-max-rate", flags.find_max_rate,
               "Bisect open-loop rates for the highest that still meets --slo");
  app.add_option("--search-steps", flags.search_steps, "Bisection steps of --find-max-rate")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  app.add_option("--compare", flags.compare,
                 "Print two result.json files side by side with ratios (runs nothing)")
      ->expected(2);
  auto* trace =
      app.add_option("--trace", flags.trace,
                     "Replay a trace (brisk serve --trace-out's JSONL, Mooncake's JSONL or the "
                     "Azure LLM inference CSV; docs/trace.md): its arrival times, prompt and "
                     "output lengths and prefix sharing, as one open-loop run through "
                     "/v1/completions")
          ->check(CLI::ExistingFile);
  for (const char* other : {"--dataset", "--sharegpt", "--preset", "--rate", "--find-max-rate",
                            "--duration", "--num-requests", "--input-tokens", "--output-tokens",
                            "--concurrency", "--arrival", "--burstiness", "--endpoint"}) {
    trace->excludes(other);
  }
  app.add_option("--trace-format", flags.trace_format,
                 "Format of --trace: auto (by its fields), brisk, mooncake or azure")
      ->check(CLI::IsMember({"auto", "brisk", "mooncake", "azure"}))
      ->capture_default_str()
      ->needs(trace);
  app.add_option("--time-scale", flags.time_scale,
                 "Multiply the trace's arrival offsets by this (0.5 replays twice as fast)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(trace);
  app.add_option("--max-duration", flags.max_duration_s,
                 "Replay only the requests that arrive within this many seconds (after "
                 "--time-scale)")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->needs(trace);
  app.add_flag("--replay-sessions", flags.replay_sessions,
               "With --trace: the requests that share a session id (brisk serve records the "
               "`user` field or X-Session-Id) become conversations through /v1/chat/completions: "
               "each turn waits for the last answer and the recorded think time, and resends the "
               "history with this server's answers")
      ->needs(trace)
      ->excludes("--max-concurrency");
  auto* sessions =
      app.add_option("--sessions", flags.sessions,
                     "Chat-UI traffic: this many conversations at once, each turn resending the "
                     "history with the server's own answers (--input-tokens: each new message; "
                     "a list runs a sweep)")
          ->delimiter(',')
          ->check(CLI::PositiveNumber);
  for (const char* other :
       {"--dataset", "--sharegpt", "--preset", "--rate", "--find-max-rate", "--duration",
        "--num-requests", "--concurrency", "--arrival", "--burstiness", "--trace"}) {
    sessions->excludes(other);
  }
  app.add_option("--turns", flags.turns, "Turns of each --sessions conversation")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(sessions);
  app.add_option("--system-tokens", flags.system_tokens,
                 "A system prompt of about this many tokens opening each --sessions conversation "
                 "(its own: conversations share nothing)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->needs(sessions);
  app.add_option("--think-time", flags.think_time,
                 "Seconds a --sessions user reads before the next turn: S, uniform:MIN:MAX or "
                 "exponential:MEAN")
      ->check([](const std::string& value) {
        std::string error;
        return bench::parse_think_time(value, error) ? std::string() : error;
      })
      ->capture_default_str()
      ->needs(sessions);
  return output_tokens;
}

}  // namespace brisk
