#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/api_error.h"

namespace brisk {

// Documents one rerank request may carry (Cohere's recommended maximum).
constexpr size_t kMaxRerankDocuments = 1000;

// A /v1/rerank body, checked (docs/api.md, "Rerank"): the shape Jina's, Cohere's and
// llama-server's clients send.
struct RerankParams {
  std::optional<std::string> model;
  std::string query;
  std::vector<std::string> documents;  // strings, or {"text": ...} objects' texts
  std::optional<int> top_n;            // the best N results (default: all, best first)
  bool return_documents = false;       // each result carries {"document": {"text": ...}}
  std::optional<int> max_tokens_per_doc;  // Cohere's: each document cut to this many tokens
  bool truncate = false;       // cut a document so that query + document fit, instead of a 400
  std::optional<int> priority;  // lower runs sooner (else X-Request-Priority, else 0)
  double deadline_ms = 0;
};

// The body's fields, or a 400 that names the first bad or unknown one.
std::variant<RerankParams, ApiError> parse_rerank_params(std::string_view body);

}  // namespace brisk
