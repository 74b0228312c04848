#include "server/rerank_params.h"

#include <gtest/gtest.h>

#include <string>

namespace brisk {
namespace {

RerankParams parsed(const std::string& body) {
  auto result = parse_rerank_params(body);
  if (auto* error = std::get_if<ApiError>(&result)) ADD_FAILURE() << error->message;
  return std::get<RerankParams>(result);
}

ApiError refused(const std::string& body) {
  auto result = parse_rerank_params(body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(result)) << body;
  return std::holds_alternative<ApiError>(result) ? std::get<ApiError>(result) : ApiError{};
}

TEST(RerankParams, ReadsJinaAndCohereBodies) {
  const RerankParams jina = parsed(
      R"({"model":"r","query":"q","documents":["a",{"text":"b"}],"top_n":1,)"
      R"("return_documents":true})");
  EXPECT_EQ(jina.model, "r");
  EXPECT_EQ(jina.query, "q");
  ASSERT_EQ(jina.documents.size(), 2u);
  EXPECT_EQ(jina.documents[1], "b");
  EXPECT_EQ(jina.top_n, 1);
  EXPECT_TRUE(jina.return_documents);
  const RerankParams cohere =
      parsed(R"({"query":"q","documents":["a"],"max_tokens_per_doc":64,"priority":-5})");
  EXPECT_EQ(cohere.max_tokens_per_doc, 64);
  EXPECT_EQ(cohere.priority, -5);
  EXPECT_FALSE(cohere.top_n.has_value());
  EXPECT_FALSE(cohere.return_documents);
}

TEST(RerankParams, EachBadFieldIsNamed) {
  EXPECT_EQ(refused(R"({"documents":["a"]})").param, "query");
  EXPECT_EQ(refused(R"({"query":"","documents":["a"]})").param, "query");
  EXPECT_EQ(refused(R"({"query":"q"})").param, "documents");
  EXPECT_EQ(refused(R"({"query":"q","documents":[]})").param, "documents");
  EXPECT_EQ(refused(R"({"query":"q","documents":["a",3]})").param, "documents");
  EXPECT_EQ(refused(R"({"query":"q","documents":[""]})").param, "documents");
  EXPECT_EQ(refused(R"({"query":"q","documents":[{"text":"a","title":"t"}]})").param,
            "documents");
  EXPECT_EQ(refused(R"({"query":"q","documents":["a"],"top_n":0})").param, "top_n");
  EXPECT_EQ(refused(R"({"query":"q","documents":["a"],"top_n":"2"})").param, "top_n");
  EXPECT_EQ(refused(R"({"query":"q","documents":["a"],"max_tokens_per_doc":0})").param,
            "max_tokens_per_doc");
  // TEI's body (texts, raw_scores) is not read: refused by name, not ignored.
  EXPECT_EQ(refused(R"({"query":"q","texts":["a"]})").param, "texts");
  EXPECT_EQ(refused(R"({"query":"q","documents":["a"],"raw_scores":true})").param, "raw_scores");
  std::string many = R"({"query":"q","documents":[)";
  for (size_t i = 0; i <= kMaxRerankDocuments; ++i) many += (i ? ",\"d\"" : "\"d\"");
  EXPECT_EQ(refused(many + "]}").param, "documents");
  EXPECT_EQ(refused("[1]").status, 400);
}

}  // namespace
}  // namespace brisk
