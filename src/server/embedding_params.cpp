#include "server/embedding_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/field_reader.h"

namespace brisk {
namespace {

using nlohmann::json;

// Every field /v1/embeddings reads; `user` is OpenAI's end-user tag for abuse monitoring,
// accepted and not acted on (docs/api.md).
constexpr const char* kKnownFields[] = {"model", "input",    "encoding_format", "dimensions",
                                        "user",  "priority", "deadline_ms",     "truncate"};

bool is_token_ids(const json& value) {
  return value.is_array() && !value.empty() &&
         std::all_of(value.begin(), value.end(),
                     [](const json& t) { return t.is_number_integer(); });
}

std::optional<TokenList> read_token_ids(FieldReader& reader, const json& ids, size_t index) {
  TokenList tokens;
  for (const json& token : ids) {
    const int64_t id = token.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      reader.fail(fmt::format("token ids in 'input[{}]' must be between 0 and {}, got {}", index,
                              std::numeric_limits<int32_t>::max(), token.dump()),
                  "input");
      return std::nullopt;
    }
    tokens.push_back(static_cast<Token>(id));
  }
  return tokens;
}

// OpenAI's four forms: a string, a list of strings, a list of token ids (one input), or a list
// of token-id lists.
void read_inputs(FieldReader& reader, EmbeddingParams& params) {
  constexpr const char* kForms =
      "'input' must be a string, a list of strings, a list of token ids, or a list of token-id "
      "lists";
  const json* input = reader.find("input");
  if (input == nullptr) return reader.fail("'input' is required", "input");
  if (input->is_string()) {
    if (input->get<std::string>().empty()) return reader.fail("'input' must not be empty", "input");
    params.inputs.push_back({input->get<std::string>(), std::nullopt});
    return;
  }
  if (!input->is_array()) return reader.fail(kForms, "input");
  if (input->empty()) return reader.fail("'input' must not be an empty list", "input");
  if (is_token_ids(*input)) {
    if (auto tokens = read_token_ids(reader, *input, 0)) params.inputs.push_back({{}, tokens});
    return;
  }
  if (input->size() > kMaxEmbeddingInputs) {
    return reader.fail(fmt::format("'input' holds {} inputs; a request may hold at most {} (split "
                                   "it into several requests)",
                                   input->size(), kMaxEmbeddingInputs),
                       "input");
  }
  const bool all_strings =
      std::all_of(input->begin(), input->end(), [](const json& i) { return i.is_string(); });
  const bool all_token_lists = std::all_of(input->begin(), input->end(), is_token_ids);
  if (!all_strings && !all_token_lists) {
    return reader.fail(
        std::string(kForms) + ", not a mix (a token list must be non-empty and hold only integers)",
        "input");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const json& item = (*input)[i];
    if (all_strings) {
      if (item.get<std::string>().empty()) {
        return reader.fail(fmt::format("'input[{}]' must not be empty", i), "input");
      }
      params.inputs.push_back({item.get<std::string>(), std::nullopt});
    } else if (auto tokens = read_token_ids(reader, item, i)) {
      params.inputs.push_back({{}, std::move(tokens)});
    } else {
      return;
    }
  }
}

void read_format(FieldReader& reader, EmbeddingParams& params) {
  if (const json* format = reader.find("encoding_format")) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return reader.fail("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    }
    params.base64 = *format == "base64";
  }
  if (auto dimensions = reader.integer("dimensions")) {
    if (*dimensions < 1 || *dimensions > 1 << 20) {
      return reader.fail("'dimensions' must be a positive integer", "dimensions");
    }
    params.dimensions = static_cast<int>(*dimensions);
  }
  params.truncate = reader.boolean("truncate").value_or(false);
}

void read_scheduling(FieldReader& reader, EmbeddingParams& params) {
  if (const json* model = reader.find("model")) {
    if (!model->is_string()) return reader.fail("'model' must be a string", "model");
    params.model = model->get<std::string>();
  }
  params.priority = reader.priority();
  if (auto deadline = reader.number("deadline_ms", 1, 86400000.0)) params.deadline_ms = *deadline;
  if (const json* user = reader.find("user"); user != nullptr && !user->is_string()) {
    return reader.fail("'user' must be a string", "user");
  }
}

}  // namespace

std::variant<EmbeddingParams, ApiError> parse_embedding_params(std::string_view body_text) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return ApiError::invalid("the request body must be a JSON object");
  }
  if (auto unknown = FieldReader::unknown_field(body, kKnownFields, "/v1/embeddings")) {
    return *unknown;
  }
  EmbeddingParams params;
  FieldReader reader{body, std::nullopt};
  read_scheduling(reader, params);
  read_inputs(reader, params);
  read_format(reader, params);
  if (reader.error) return *reader.error;
  return params;
}

}  // namespace brisk
