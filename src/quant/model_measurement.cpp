#include "quant/model_measurement.h"

#include <unistd.h>

#include <fstream>

#include "quant/sequential_speed.h"

namespace brisk::quant {

std::optional<std::vector<PreparedPrompt>> prepare_prompts(const ScoringModel& model,
                                                           const std::vector<DatasetItem>& items,
                                                           int default_max_tokens,
                                                           std::string* error) {
  std::vector<PreparedPrompt> prompts;
  for (const DatasetItem& item : items) {
    std::string text = item.prompt;
    if (item.is_chat()) {
      std::string template_error;
      if (!model.apply_chat_template(item.messages, &text, &template_error)) {
        *error = "item '" + item.id + "': the reference's chat template cannot render it (" +
                 template_error + ")";
        return std::nullopt;
      }
    }
    PreparedPrompt prompt;
    prompt.tokens = model.tokenize(text, true, true);
    prompt.max_tokens = item.max_tokens > 0 ? item.max_tokens : default_max_tokens;
    if (prompt.tokens.empty()) {
      *error = "item '" + item.id + "' tokenizes to nothing; give it some text";
      return std::nullopt;
    }
    if (static_cast<int>(prompt.tokens.size()) + prompt.max_tokens > model.context_size()) {
      *error = "item '" + item.id + "' needs " + std::to_string(prompt.tokens.size()) + " + " +
               std::to_string(prompt.max_tokens) + " tokens, more than --ctx-size " +
               std::to_string(model.context_size()) + "; raise --ctx-size or shorten it";
      return std::nullopt;
    }
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t total_pages = 0;
  uint64_t resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void measure_model(ScoringModel& model, const std::vector<DatasetItem>& items,
                   const std::vector<PreparedPrompt>& prompts, int concurrency,
                   int concurrent_tokens, ModelRun* run, std::vector<TokenList>* continuations,
                   const std::function<void()>& after_item) {
  SpeedFigures& speed = run->speed;
  // One short unmeasured generation first: the first pass over the weights pays page faults of
  // the mapped file and wakes the thread pool, which would otherwise be billed to whichever
  // model happens to run first.
  if (!prompts.empty()) {
    std::string ignored;
    model.generate_greedy(prompts.front().tokens, 2, &ignored);
  }
  SequentialSpeed sequential;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string error;
    const auto generation = model.generate_greedy(prompts[i].tokens, prompts[i].max_tokens, &error);
    if (!generation) {
      sequential.add_failure();
      run->answers.push_back(evaluate_answer(items[i], ""));
      continuations->push_back({});
      after_item();
      continue;
    }
    sequential.add(generation->ttft_ms, generation->e2e_ms,
                   static_cast<int>(generation->tokens.size()));
    TokenList visible = generation->tokens;
    if (generation->ended) visible.pop_back();  // the end token is not part of the answer
    run->answers.push_back(evaluate_answer(items[i], model.detokenize(visible)));
    continuations->push_back(generation->tokens);
    after_item();
  }
  sequential.write_to(&speed);
  speed.error_rate = speed.requests > 0 ? static_cast<double>(speed.errors) / speed.requests : 0;
  speed.concurrency = concurrency;
  // The shortest prompt keeps N streams within the context.
  const PreparedPrompt* shortest = nullptr;
  for (const PreparedPrompt& prompt : prompts) {
    if (shortest == nullptr || prompt.tokens.size() < shortest->tokens.size()) shortest = &prompt;
  }
  std::string error;
  if (shortest != nullptr) {
    if (const auto tokens_per_s = model.parallel_decode_tokens_per_s(shortest->tokens, concurrency,
                                                                     concurrent_tokens, &error)) {
      speed.decode_tokens_per_s_concurrent = *tokens_per_s;
    }
  }
  run->description = model.description();
  run->memory.weights_bytes = model.weights_bytes();
  const AllocatedBytes allocated = model.allocated_bytes();
  run->memory.kv_bytes = allocated.context_bytes;
  run->memory.compute_bytes = allocated.compute_bytes;
  run->memory.allocated_bytes = allocated.total();
  run->memory.context_tokens = model.context_size();
}

}  // namespace brisk::quant
