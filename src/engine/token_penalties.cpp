#include "engine/token_penalties.h"

namespace brisk {

void TokenPenalties::add_prompt(std::span<const Token> prompt) {
  if (params_.repetition == 1.0f || params_.repetition_last_n == 0) return;
  // With a window only its last tokens can stay in it.
  size_t first = 0;
  if (params_.repetition_last_n > 0 && prompt.size() > size_t(params_.repetition_last_n)) {
    first = prompt.size() - size_t(params_.repetition_last_n);
  }
  for (size_t i = first; i < prompt.size(); ++i) see(prompt[i]);
}

void TokenPenalties::add_generated(Token token) {
  if (params_.presence != 0.0f || params_.frequency != 0.0f) ++generated_[token];
  if (params_.repetition != 1.0f && params_.repetition_last_n != 0) see(token);
}

void TokenPenalties::see(Token token) {
  ++seen_[token];
  if (params_.repetition_last_n < 0) return;
  window_.push_back(token);
  if (window_.size() <= size_t(params_.repetition_last_n)) return;
  const auto oldest = seen_.find(window_.front());
  if (--oldest->second == 0) seen_.erase(oldest);
  window_.pop_front();
}

void TokenPenalties::apply(float* logits, int count) const {
  for (const auto& [token, seen] : seen_) {
    if (token < 0 || token >= count) continue;
    float& logit = logits[token];
    logit = logit <= 0.0f ? logit * params_.repetition : logit / params_.repetition;
  }
  for (const auto& [token, times] : generated_) {
    if (token < 0 || token >= count) continue;
    logits[token] -= params_.frequency * float(times) + params_.presence;
  }
}

}  // namespace brisk
