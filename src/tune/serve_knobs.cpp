#include "tune/serve_knobs.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "tune/command_line.h"

namespace brisk::tune {

namespace {

double number(const std::string& label) { return std::strtod(label.c_str(), nullptr); }

// A knob set by one numeric flag; `defaults` is brisk serve's own default.
Knob numeric_knob(std::vector<std::string>& base_flags, const std::string& flag,
                  const std::vector<std::string>& aliases, std::vector<std::string> labels,
                  const std::string& default_label, std::string effect, bool predicted) {
  std::vector<std::string> names = aliases;
  names.insert(names.begin(), "--" + flag);
  const std::optional<std::string> given = take_flag(base_flags, names);
  Knob knob;
  knob.name = flag;
  knob.baseline = given.value_or(default_label);
  knob.effect = std::move(effect);
  knob.predicted = predicted;
  if (std::find(labels.begin(), labels.end(), knob.baseline) == labels.end()) {
    labels.push_back(knob.baseline);
  }
  std::sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) {
    return number(a) < number(b);
  });
  for (const std::string& label : labels) knob.values.push_back({label, {"--" + flag, label}});
  return knob;
}

// llama.cpp's compute threads: all cores or half of them, a knob with 4 cores or more.
void add_threads_knob(std::vector<Knob>& knobs, std::vector<std::string>& base_flags, int cores,
                      std::string effect) {
  if (cores < 4) return;
  knobs.push_back(numeric_knob(base_flags, "threads", {"-t"},
                               {std::to_string(cores / 2), std::to_string(cores)},
                               std::to_string(cores), std::move(effect), false));
}

}  // namespace

ServeKnobs brisk_serve_knobs(std::vector<std::string> base_flags, int cores) {
  ServeKnobs serve;
  std::vector<Knob>& knobs = serve.knobs;
  knobs.push_back(numeric_knob(
      base_flags, "max-seqs", {}, {"1", "2", "4", "8", "16", "32"}, "16",
      "requests running at once: more batch more tokens per step until the step (each stream's "
      "token gap) grows too long; fewer keep TPOT short and make the rest wait in the queue",
      true));
  knobs.push_back(numeric_knob(
      base_flags, "max-batched-tokens", {}, {"256", "512", "1024", "2048"}, "512",
      "tokens one step may carry: more prefill a prompt in fewer steps (shorter TTFT under "
      "load), at the price of longer gaps for the streams that decode beside it",
      true));
  knobs.push_back(numeric_knob(
      base_flags, "target-itl-ms", {"--max-step-ms"}, {"0", "75", "150", "300"}, "150",
      "cuts prompt chunks so a step stays under it: lower protects ITL and TPOT, higher (or 0, "
      "off) gives prompts whole steps: shorter TTFT and more throughput",
      true));
  knobs.push_back(numeric_knob(
      base_flags, "long-prefill-tokens", {}, {"0", "256", "1024"}, "256",
      "prompts longer than this are prefilled after the short ones, so one long prompt does not "
      "hold back every short one (0: oldest first)",
      true));
  knobs.push_back(numeric_knob(
      base_flags, "min-prefill-step-tokens", {}, {"1", "64"}, "1",
      "a step carrying prompt tokens carries at least this many: on CPU ggml's flash attention "
      "is several times cheaper per prompt token from 64 rows a step",
      false));
  Knob layout;
  layout.name = "kv-layout";
  const bool per_sequence = take_switch(base_flags, "--no-kv-unified");
  take_switch(base_flags, "--kv-unified");
  layout.baseline = per_sequence ? "per-sequence" : "unified";
  layout.values = {{"unified", {"--kv-unified"}}, {"per-sequence", {"--no-kv-unified"}}};
  layout.effect =
      "unified: one KV buffer, a request may use the whole context, but every step attends "
      "over all cells in use; per-sequence: each step's cost follows each stream's own context "
      "(its --ctx-size grows to --max-seqs × the longest request where it must, so that none "
      "is refused)";
  knobs.push_back(std::move(layout));
  // The KV cache type, K and V alike: q8_0 halves the bytes attention reads each step and the
  // cache's memory (more sequences fit); brisk plan sees both. Differing K and V types given
  // in --base-flags stay as given.
  {
    std::vector<std::string> types = base_flags;
    const std::optional<std::string> k = take_flag(types, {"--cache-type-k"});
    const std::optional<std::string> v = take_flag(types, {"--cache-type-v"});
    if (k.value_or("f16") == v.value_or("f16")) {
      base_flags = std::move(types);
      Knob kv_type;
      kv_type.name = "kv-type";
      kv_type.baseline = k.value_or("f16");
      kv_type.predicted = true;
      kv_type.effect =
          "the KV cache's element type: q8_0 halves the bytes every step's attention reads and "
          "the memory each sequence holds, at a small cost in accuracy; f16 is exact";
      for (const std::string& type : {std::string("f16"), std::string("q8_0")}) {
        kv_type.values.push_back({type, {"--cache-type-k", type, "--cache-type-v", type}});
      }
      if (!kv_type.find(kv_type.baseline)) {
        kv_type.values.push_back({kv_type.baseline,
                                  {"--cache-type-k", kv_type.baseline, "--cache-type-v",
                                   kv_type.baseline}});
      }
      knobs.push_back(std::move(kv_type));
    }
  }
  add_threads_knob(knobs, base_flags, cores,
                   "llama.cpp's compute threads: all cores, or half of them when the HTTP threads "
                   "and the sampler compete for the rest");
  serve.fixed_args = std::move(base_flags);
  return serve;
}

ServeKnobs embedding_serve_knobs(std::vector<std::string> base_flags, int cores) {
  ServeKnobs serve;
  std::vector<Knob>& knobs = serve.knobs;
  knobs.push_back(numeric_knob(
      base_flags, "batch-window-ms", {}, {"0", "1", "2", "5", "10"}, "0",
      "how long the oldest waiting input waits for others to join its batch: a window fills "
      "batches when requests arrive one by one (fewer, fuller model calls), and every request "
      "waits it when the model is idle; 0 starts a batch as soon as the model is free",
      false));
  knobs.push_back(numeric_knob(
      base_flags, "max-batch-inputs", {}, {"8", "16", "32", "64"}, "64",
      "inputs in one batch: more spread a model call over more inputs, while llama.cpp "
      "attends over a whole batch at once (masked), so a batch's cost grows faster than its "
      "inputs",
      false));
  knobs.push_back(numeric_knob(
      base_flags, "max-batch-tokens", {}, {"0", "256", "1024", "2048"}, "0",
      "tokens of all inputs in one batch (0: the model's training context): the same trade in "
      "tokens; it is also the longest input served",
      false));
  add_threads_knob(knobs, base_flags, cores,
                   "llama.cpp's compute threads: all cores, or half of them when the HTTP "
                   "threads, which tokenize every input, compete for the rest");
  serve.fixed_args = std::move(base_flags);
  return serve;
}

std::optional<std::string> batch_tokens_refusal(const ServeKnobs& serve, const Setting& setting) {
  const auto tokens = setting.find("max-batch-tokens");
  if (tokens == setting.end() || serve.longest_request_tokens <= 0) return std::nullopt;
  const int max_batch_tokens = std::atoi(tokens->second.c_str());
  if (max_batch_tokens <= 0 || max_batch_tokens >= serve.longest_request_tokens) {
    return std::nullopt;
  }
  return "--max-batch-tokens " + tokens->second + " is below the workload's longest input (" +
         std::to_string(serve.longest_request_tokens) + " tokens): brisk serve would refuse it";
}

std::optional<int> per_sequence_context(const ServeKnobs& serve, const Setting& setting) {
  const auto layout = setting.find("kv-layout");
  if (layout == setting.end() || layout->second != "per-sequence") return std::nullopt;
  if (serve.longest_request_tokens <= 0) return std::nullopt;
  std::vector<std::string> fixed = serve.fixed_args;
  const int ctx_size = std::atoi(take_flag(fixed, {"--ctx-size", "-c"}).value_or("8192").c_str());
  const auto seqs = setting.find("max-seqs");
  const int max_seqs = seqs == setting.end() ? 16 : std::max(1, std::atoi(seqs->second.c_str()));
  if (serve.longest_request_tokens <= ctx_size / max_seqs) return std::nullopt;
  constexpr int kRound = 256;
  return (max_seqs * serve.longest_request_tokens + kRound - 1) / kRound * kRound;
}

}  // namespace brisk::tune
