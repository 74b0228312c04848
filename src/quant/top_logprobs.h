#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quant/divergence.h"

namespace brisk::quant {

// What an OpenAI-compatible server says about one generated token when asked for logprobs:
// the token's text, its log-probability and the N most likely alternatives at that position.
struct AlternativeLogprob {
  std::string token;
  double logprob = 0;
};

struct TokenWithLogprobs {
  std::string token;
  double logprob = 0;
  std::vector<AlternativeLogprob> top;  // most likely first, as the server listed them
};

// A greedy answer with its per-token logprobs.
struct LogprobsAnswer {
  std::string text;
  std::vector<TokenWithLogprobs> tokens;
};

// Reads choices[0] of a non-streamed /v1/completions or /v1/chat/completions response. Both
// shapes servers use are read: the chat shape {"content": [{"token", "logprob",
// "top_logprobs": [{"token", "logprob"}]}]} (OpenAI chat, brisk chat, llama-server on both
// routes) and the legacy completions shape {"tokens", "token_logprobs", "top_logprobs":
// [{text: logprob}]} (OpenAI completions, brisk, vLLM). Nullopt with `error` when the response
// has no choice, no logprobs (the server ignored the request for them) or a malformed entry.
std::optional<LogprobsAnswer> parse_logprobs_answer(std::string_view body, std::string* error);

// KL(P_ref || P_cand) approximated from the two servers' top-N lists at one position, where
// both were conditioned on the same tokens. With R the reference's listed tokens (matched to
// the candidate's by token text), p_i = exp(reference logprob) and q_i = exp(candidate logprob):
//   - a token of R the candidate did not list gets q_i = min(q_rest / m, q_min), where q_rest =
//     1 - (sum of the candidate's listed q) is the mass it left unlisted, m the number of R's
//     tokens it did not list, and q_min its smallest listed q (an unlisted token cannot be more
//     likely than the least likely listed one);
//   - everything outside R is one bucket "other": p_o = 1 - sum_R p_i, q_o = 1 - sum_R q_i;
//   - KLD ~= sum_{i in R} p_i (log p_i - log q_i) + p_o (log p_o - log q_o).
// That is the exact KL between the two distributions lumped onto R plus "other", so it is >= 0,
// 0 when both lists are identical, and (were the unlisted q exact) never above the full-
// vocabulary KL: it underestimates, more so the more mass lies outside the top N.
// same_top compares the two tokens each server actually generated there (greedy: its top).
// The NLL fields are left 0: the servers' logprobs of the reference's own tokens are not known
// for the candidate once the continuations differ.
TokenDivergence approximate_next_token_divergence(const TokenWithLogprobs& reference,
                                                  const TokenWithLogprobs& candidate);

}  // namespace brisk::quant
