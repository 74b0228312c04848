#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/engine.h"
#include "sched/request.h"
#include "server/completion_params.h"

namespace brisk {

// Builds OpenAI's `logprobs` object of a choice from the engine's token log-probabilities:
// chat's {"content": [{token, logprob, bytes, top_logprobs}]}, or completions'
// {tokens, token_logprobs, top_logprobs, text_offset}. Collects tokens as they are generated;
// take() returns the object for what came since the last take (one stream chunk, or the whole
// response).
class LogprobsJson {
 public:
  LogprobsJson(const Engine& engine, CompletionKind kind) : engine_(engine), kind_(kind) {}

  void append(const std::vector<GeneratedTokenLogprobs>& tokens);
  bool empty() const { return pending_.empty(); }
  nlohmann::json take();

 private:
  nlohmann::json chat_entry(Token token, float logprob) const;

  const Engine& engine_;
  CompletionKind kind_;
  std::vector<GeneratedTokenLogprobs> pending_;
  size_t text_offset_ = 0;  // completions: bytes of generated text before the next token
};

}  // namespace brisk
