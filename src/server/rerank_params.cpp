#include "server/rerank_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/field_reader.h"

namespace brisk {
namespace {

using nlohmann::json;

constexpr const char* kKnownFields[] = {
    "model",    "query",       "documents", "top_n",   "return_documents", "max_tokens_per_doc",
    "truncate", "priority",    "deadline_ms"};

void read_documents(FieldReader& reader, RerankParams& params) {
  constexpr const char* kForm =
      "'documents' must be a non-empty list of strings (or of {\"text\": string} objects)";
  const json* documents = reader.find("documents");
  if (documents == nullptr) return reader.fail("'documents' is required", "documents");
  if (!documents->is_array() || documents->empty()) return reader.fail(kForm, "documents");
  if (documents->size() > kMaxRerankDocuments) {
    return reader.fail(fmt::format("'documents' holds {} documents; a request may hold at most {} "
                                   "(split it into several requests)",
                                   documents->size(), kMaxRerankDocuments),
                       "documents");
  }
  for (size_t i = 0; i < documents->size(); ++i) {
    const json& item = (*documents)[i];
    const json* text = &item;
    if (item.is_object()) {
      auto found = item.find("text");
      if (found == item.end() || item.size() != 1) {
        return reader.fail(fmt::format("'documents[{}]' is an object, so it must be {{\"text\": "
                                       "string}} and nothing else",
                                       i),
                           "documents");
      }
      text = &*found;
    }
    if (!text->is_string()) return reader.fail(kForm, "documents");
    if (text->get<std::string>().empty()) {
      return reader.fail(fmt::format("'documents[{}]' must not be empty", i), "documents");
    }
    params.documents.push_back(text->get<std::string>());
  }
}

void read_query(FieldReader& reader, RerankParams& params) {
  const json* query = reader.find("query");
  if (query == nullptr) return reader.fail("'query' is required", "query");
  if (!query->is_string() || query->get<std::string>().empty()) {
    return reader.fail("'query' must be a non-empty string", "query");
  }
  params.query = query->get<std::string>();
}

void read_options(FieldReader& reader, RerankParams& params) {
  if (const json* model = reader.find("model")) {
    if (!model->is_string()) return reader.fail("'model' must be a string", "model");
    params.model = model->get<std::string>();
  }
  if (auto top_n = reader.integer("top_n")) {
    if (*top_n < 1) return reader.fail("'top_n' must be a positive integer", "top_n");
    params.top_n = static_cast<int>(std::min<int64_t>(*top_n, kMaxRerankDocuments));
  }
  params.return_documents = reader.boolean("return_documents").value_or(false);
  if (auto cap = reader.integer("max_tokens_per_doc")) {
    if (*cap < 1 || *cap > 1 << 20) {
      return reader.fail("'max_tokens_per_doc' must be a positive integer", "max_tokens_per_doc");
    }
    params.max_tokens_per_doc = static_cast<int>(*cap);
  }
  params.truncate = reader.boolean("truncate").value_or(false);
  params.priority = reader.priority();
  if (auto deadline = reader.number("deadline_ms", 1, 86400000.0)) params.deadline_ms = *deadline;
}

}  // namespace

std::variant<RerankParams, ApiError> parse_rerank_params(std::string_view body_text) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return ApiError::invalid("the request body must be a JSON object");
  if (auto unknown = FieldReader::unknown_field(body, kKnownFields, "/v1/rerank")) {
    return *unknown;
  }
  RerankParams params;
  FieldReader reader{body, std::nullopt};
  read_options(reader, params);
  read_query(reader, params);
  read_documents(reader, params);
  if (reader.error) return *reader.error;
  return params;
}

}  // namespace brisk
