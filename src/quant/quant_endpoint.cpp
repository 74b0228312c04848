#include "quant/quant_endpoint.h"

#include <nlohmann/json.hpp>

#include "bench/http_fetch.h"

namespace brisk::quant {
namespace {

using nlohmann::json;

std::optional<std::string> first_listed_model(const std::string& body) {
  const json models = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array()) {
    return std::nullopt;
  }
  for (const json& entry : models["data"]) {
    if (entry.is_object() && entry.contains("id") && entry["id"].is_string()) {
      return entry["id"].get<std::string>();
    }
  }
  return std::nullopt;
}

json logprobs_request(const QuantEndpoint& endpoint, const DatasetItem& item, int max_tokens,
                      int top_logprobs) {
  json body = {
      {"model", endpoint.model}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", false}};
  if (item.is_chat()) {
    json messages = json::array();
    for (const ChatMessage& message : item.messages) {
      messages.push_back({{"role", message.role}, {"content", message.content}});
    }
    body["messages"] = std::move(messages);
    body["logprobs"] = true;
    body["top_logprobs"] = top_logprobs;
  } else {
    body["prompt"] = item.prompt;
    body["logprobs"] = top_logprobs;
    // llama-server reads its own name for the count on /v1/completions; others ignore it.
    body["n_probs"] = top_logprobs;
  }
  return body;
}

}  // namespace

std::optional<QuantEndpoint> connect_endpoint(const std::string& flag, const std::string& url,
                                              const std::string& api_key, const std::string& model,
                                              std::chrono::milliseconds timeout,
                                              std::string* error) {
  std::string parse_error;
  auto target = bench::parse_target_url(url, parse_error);
  if (!target) {
    // bench's message names its own flag.
    for (size_t at = parse_error.find("--url"); at != std::string::npos;
         at = parse_error.find("--url", at + flag.size())) {
      parse_error.replace(at, 5, flag);
    }
    *error = flag + " '" + url + "': " + parse_error;
    return std::nullopt;
  }
  target->api_key = api_key;
  QuantEndpoint endpoint{flag, url, *target, model};
  const bench::FetchResult models = bench::fetch(*target, "/v1/models", "", timeout);
  if (!models.error.empty()) {
    *error = flag + " " + url + " cannot be reached (" + models.error +
             "): start the server or correct the address";
    return std::nullopt;
  }
  if (!model.empty()) return endpoint;
  if (!models.ok()) {
    *error = flag + " " + url + ": GET /v1/models answered HTTP " + std::to_string(models.status) +
             (models.status == 401 ? " (give --api-key)" : "") + "; name the model with " +
             (flag == "--reference-url" ? "--reference-model" : "--candidate-model");
    return std::nullopt;
  }
  const auto first = first_listed_model(models.body);
  if (!first) {
    *error = flag + " " + url + ": GET /v1/models lists no model; name it with " +
             (flag == "--reference-url" ? "--reference-model" : "--candidate-model");
    return std::nullopt;
  }
  endpoint.model = *first;
  return endpoint;
}

std::optional<LogprobsAnswer> generate_with_logprobs(const QuantEndpoint& endpoint,
                                                     const DatasetItem& item, int max_tokens,
                                                     int top_logprobs,
                                                     std::chrono::milliseconds timeout,
                                                     std::string* error) {
  const char* route = item.is_chat() ? "/v1/chat/completions" : "/v1/completions";
  const bench::FetchResult result =
      bench::fetch(endpoint.target, route,
                   logprobs_request(endpoint, item, max_tokens, top_logprobs).dump(), timeout);
  const std::string where = endpoint.flag + " " + endpoint.url + route + ", item '" + item.id + "'";
  if (!result.error.empty()) {
    *error = where + ": " + result.error;
    return std::nullopt;
  }
  if (!result.ok()) {
    *error = where + ": HTTP " + std::to_string(result.status) + ": " + result.body.substr(0, 300);
    return std::nullopt;
  }
  std::string parse_error;
  auto answer = parse_logprobs_answer(result.body, &parse_error);
  if (!answer) *error = where + ": " + parse_error;
  return answer;
}

}  // namespace brisk::quant
