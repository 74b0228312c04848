#include "server/tool_params.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace brisk {
namespace {

using nlohmann::json;

json tool(const std::string& name, bool strict = false) {
  return {{"type", "function"},
          {"function",
           {{"name", name}, {"parameters", {{"type", "object"}}}, {"strict", strict}}}};
}

std::optional<ToolRequest> read(const json& body) {
  auto result = read_tool_request(body);
  EXPECT_TRUE(std::holds_alternative<std::optional<ToolRequest>>(result))
      << std::get<ApiError>(result).message;
  return std::get<std::optional<ToolRequest>>(result);
}

ApiError refused(const json& body) {
  auto result = read_tool_request(body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(result));
  return std::get<ApiError>(result);
}

TEST(ToolParams, NoToolsIsNoToolRequest) {
  EXPECT_FALSE(read(json::object()).has_value());
  EXPECT_FALSE(read({{"tools", json::array()}, {"tool_choice", "none"}}).has_value());
  EXPECT_FALSE(read({{"tool_choice", "auto"}}).has_value());
}

TEST(ToolParams, ReadsToolsChoiceAndParallelCalls) {
  const auto request = read({{"tools", {tool("a"), tool("b", true)}},
                             {"tool_choice", "required"},
                             {"parallel_tool_calls", false}});
  ASSERT_TRUE(request);
  ASSERT_EQ(request->tools.tools.size(), 2u);
  EXPECT_EQ(request->tools.tools[1].name, "b");
  EXPECT_EQ(json::parse(request->tools.tools[0].parameters), json({{"type", "object"}}));
  EXPECT_EQ(request->tools.choice, ChatTools::Choice::required);
  EXPECT_FALSE(request->tools.parallel_calls);
  EXPECT_EQ(request->strict_tools, std::vector<size_t>{1});
}

TEST(ToolParams, ANamedFunctionLeavesOnlyThatToolAndRequiresACall) {
  const auto request =
      read({{"tools", {tool("a"), tool("b", true)}},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "b"}}}}}});
  ASSERT_TRUE(request);
  ASSERT_EQ(request->tools.tools.size(), 1u);
  EXPECT_EQ(request->tools.tools[0].name, "b");
  EXPECT_EQ(request->tools.choice, ChatTools::Choice::required);
  EXPECT_EQ(request->strict_tools, std::vector<size_t>{1});  // the index the client sent
}

TEST(ToolParams, MalformedFieldsAreNamed) {
  EXPECT_EQ(refused({{"tools", "f"}}).param, "tools");
  EXPECT_EQ(refused({{"tools", {tool("a"), tool("a")}}}).param, "tools");
  EXPECT_EQ(refused({{"tools", {tool("bad name")}}}).param, "tools");
  EXPECT_EQ(refused({{"tool_choice", "required"}}).param, "tool_choice");
  EXPECT_EQ(refused({{"tools", {tool("a")}},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "z"}}}}}})
                .param,
            "tool_choice");
  EXPECT_EQ(refused({{"tools", {tool("a")}}, {"parallel_tool_calls", 1}}).param,
            "parallel_tool_calls");
  json extra = tool("a");
  extra["function"]["colour"] = "red";
  EXPECT_NE(refused({{"tools", {extra}}}).message.find("tools[0].function.colour"),
            std::string::npos);
}

TEST(ToolParams, AssistantCallsTakeArgumentsAsTextOrObject) {
  ChatMessage message;
  const json calls = {
      {{"id", "call_1"}, {"type", "function"},
       {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}},
      {{"id", "call_2"}, {"type", "function"},
       {"function", {{"name", "g"}, {"arguments", {{"y", 2}}}}}}};
  ASSERT_FALSE(read_tool_calls(calls, message));
  ASSERT_EQ(message.tool_calls.size(), 2u);
  EXPECT_EQ(message.tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(message.tool_calls[1].id, "call_2");
  EXPECT_EQ(json::parse(message.tool_calls[1].arguments), json({{"y", 2}}));
  EXPECT_TRUE(read_tool_calls(json::array({{{"function", {{"arguments", "{}"}}}}}), message));
}

}  // namespace
}  // namespace brisk
