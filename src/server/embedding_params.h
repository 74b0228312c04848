#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/token.h"
#include "server/api_error.h"

namespace brisk {

// Inputs one request may carry (OpenAI's limit for /v1/embeddings).
constexpr size_t kMaxEmbeddingInputs = 2048;

// One input as the client sent it: text, or token ids.
struct EmbeddingInput {
  std::string text;
  std::optional<TokenList> tokens;
};

// A /v1/embeddings body, checked (docs/api.md, "Embeddings").
struct EmbeddingParams {
  std::optional<std::string> model;
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;            // encoding_format "base64": little-endian float32 bytes
  std::optional<int> dimensions;  // must equal the model's (no Matryoshka models here yet)
  bool truncate = false;          // cut inputs to the model's limit instead of a 400
  std::optional<int> priority;    // lower runs sooner (else X-Request-Priority, else 0)
  double deadline_ms = 0;
};

// The body's fields, or a 400 that names the first bad or unknown one.
std::variant<EmbeddingParams, ApiError> parse_embedding_params(std::string_view body);

}  // namespace brisk
