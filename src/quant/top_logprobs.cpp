#include "quant/top_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

namespace brisk::quant {
namespace {

using nlohmann::json;

// A probability below this is treated as this: the servers round logprobs to float, and one
// lumped bucket of exactly 0 under a positive reference mass would make the KL infinite.
constexpr double kProbabilityFloor = 1e-12;

std::optional<double> number_at(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<std::string> string_at(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// {"token", "logprob"} entries: chat's content and top_logprobs, llama-server's on both routes.
std::optional<TokenWithLogprobs> chat_entry(const json& entry) {
  if (!entry.is_object()) return std::nullopt;
  const auto token = string_at(entry, "token");
  const auto logprob = number_at(entry, "logprob");
  if (!token || !logprob) return std::nullopt;
  TokenWithLogprobs generated{*token, *logprob, {}};
  const auto top = entry.find("top_logprobs");
  if (top == entry.end() || !top->is_array()) return generated;
  for (const json& alternative : *top) {
    const auto parsed = chat_entry(alternative);
    if (!parsed) return std::nullopt;
    generated.top.push_back({parsed->token, parsed->logprob});
  }
  return generated;
}

bool read_chat_shape(const json& content, LogprobsAnswer* answer, std::string* error) {
  for (const json& entry : content) {
    auto generated = chat_entry(entry);
    if (!generated) {
      *error = "a logprobs.content entry lacks a string 'token' or a numeric 'logprob'";
      return false;
    }
    answer->tokens.push_back(std::move(*generated));
  }
  return true;
}

// The legacy shape lists alternatives as an object {text: logprob}; JSON keeps no order, so
// they are sorted most likely first.
bool read_completions_shape(const json& logprobs, LogprobsAnswer* answer, std::string* error) {
  const auto tokens = logprobs.find("tokens");
  const auto token_logprobs = logprobs.find("token_logprobs");
  const auto top_logprobs = logprobs.find("top_logprobs");
  if (tokens == logprobs.end() || token_logprobs == logprobs.end() || !tokens->is_array() ||
      !token_logprobs->is_array() || tokens->size() != token_logprobs->size()) {
    *error = "logprobs has neither 'content' nor matching 'tokens' and 'token_logprobs' arrays";
    return false;
  }
  const bool has_top = top_logprobs != logprobs.end() && top_logprobs->is_array() &&
                       top_logprobs->size() == tokens->size();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& token = (*tokens)[i];
    const json& logprob = (*token_logprobs)[i];
    if (!token.is_string() || !logprob.is_number()) {
      *error = "logprobs.tokens[" + std::to_string(i) + "] is not a string with a number";
      return false;
    }
    TokenWithLogprobs generated{token.get<std::string>(), logprob.get<double>(), {}};
    const json* top = has_top ? &(*top_logprobs)[i] : nullptr;
    if (top != nullptr && top->is_object()) {
      for (const auto& [text, value] : top->items()) {
        if (!value.is_number()) {
          *error = "logprobs.top_logprobs[" + std::to_string(i) + "] has a non-numeric logprob";
          return false;
        }
        generated.top.push_back({text, value.get<double>()});
      }
      std::stable_sort(generated.top.begin(), generated.top.end(),
                       [](const auto& a, const auto& b) { return a.logprob > b.logprob; });
    }
    answer->tokens.push_back(std::move(generated));
  }
  return true;
}

// Token text -> probability; a text listed twice (two token ids that print alike) adds up.
std::map<std::string, double> probabilities_by_text(const std::vector<AlternativeLogprob>& top) {
  std::map<std::string, double> probabilities;
  for (const AlternativeLogprob& alternative : top) {
    probabilities[alternative.token] += std::exp(alternative.logprob);
  }
  return probabilities;
}

double kl_term(double p, double q) {
  if (p <= 0) return 0;  // 0 log 0 = 0
  return p * (std::log(std::max(p, kProbabilityFloor)) - std::log(std::max(q, kProbabilityFloor)));
}

}  // namespace

std::optional<LogprobsAnswer> parse_logprobs_answer(std::string_view body, std::string* error) {
  const json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    *error = "the response is not a JSON object: " + std::string(body.substr(0, 200));
    return std::nullopt;
  }
  const auto choices = object.find("choices");
  if (choices == object.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    *error = "the response has no choices: " + std::string(body.substr(0, 200));
    return std::nullopt;
  }
  const json& choice = (*choices)[0];
  LogprobsAnswer answer;
  if (const auto text = string_at(choice, "text")) answer.text = *text;
  const auto message = choice.find("message");
  if (message != choice.end() && message->is_object()) {
    if (const auto content = string_at(*message, "content")) answer.text = *content;
  }
  const auto logprobs = choice.find("logprobs");
  if (logprobs == choice.end() || !logprobs->is_object()) {
    *error = "the response carries no logprobs (does the server support 'logprobs'?)";
    return std::nullopt;
  }
  const auto content = logprobs->find("content");
  const bool read = content != logprobs->end() && content->is_array()
                        ? read_chat_shape(*content, &answer, error)
                        : read_completions_shape(*logprobs, &answer, error);
  if (!read) return std::nullopt;
  return answer;
}

TokenDivergence approximate_next_token_divergence(const TokenWithLogprobs& reference,
                                                  const TokenWithLogprobs& candidate) {
  const std::map<std::string, double> p = probabilities_by_text(reference.top);
  const std::map<std::string, double> q = probabilities_by_text(candidate.top);
  double q_listed = 0;
  double q_min = 1;
  for (const auto& [token, probability] : q) {
    q_listed += probability;
    q_min = std::min(q_min, probability);
  }
  size_t missing = 0;
  for (const auto& entry : p) missing += q.count(entry.first) == 0 ? 1 : 0;
  const double q_rest = std::max(0.0, 1.0 - q_listed);
  const double q_unlisted =
      missing > 0 ? std::min(q_rest / static_cast<double>(missing), q.empty() ? 1.0 : q_min) : 0;

  // Both sums run over R in the same order, so identical lists give identical "other" masses.
  double kld = 0;
  double p_in_r = 0;
  double q_in_r = 0;
  for (const auto& [token, p_i] : p) {
    const auto listed = q.find(token);
    const double q_i = listed != q.end() ? listed->second : q_unlisted;
    kld += kl_term(p_i, q_i);
    p_in_r += p_i;
    q_in_r += q_i;
  }
  kld += kl_term(std::max(0.0, 1.0 - p_in_r), std::max(0.0, 1.0 - q_in_r));

  TokenDivergence result;
  // The lumped KL is >= 0; rounding of near-identical lists can leave a tiny negative sum.
  result.kld = std::max(0.0, kld);
  result.same_top = reference.token == candidate.token;
  return result;
}

}  // namespace brisk::quant
