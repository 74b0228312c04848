#include "server/tool_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <variant>

namespace brisk {
namespace {

using nlohmann::json;

// OpenAI's rule for a function's name: letters, digits, underscores and dashes, at most 64.
bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
         });
}

// The keys `object` may have; the first other one, named with `where`, is the error.
std::optional<ApiError> only_keys(const json& object, std::initializer_list<const char*> keys,
                                  const std::string& where, const char* param) {
  for (const auto& item : object.items()) {
    if (std::none_of(keys.begin(), keys.end(), [&](const char* key) { return item.key() == key; })) {
      return ApiError::invalid(
          fmt::format("'{}.{}' is not a field brisk serve knows (docs/api.md)", where, item.key()),
          param);
    }
  }
  return std::nullopt;
}

std::variant<ToolDefinition, ApiError> read_tool(const json& tool, size_t index, bool* strict) {
  const std::string where = fmt::format("tools[{}]", index);
  if (!tool.is_object() || tool.value("type", json()) != "function" || !tool.contains("function") ||
      !tool["function"].is_object()) {
    return ApiError::invalid(
        where + " must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                "\"parameters\": {...}}}",
        "tools");
  }
  if (auto error = only_keys(tool, {"type", "function"}, where, "tools")) return *error;
  const json& function = tool["function"];
  const std::string fwhere = where + ".function";
  if (auto error = only_keys(function, {"name", "description", "parameters", "strict"}, fwhere,
                             "tools")) {
    return *error;
  }
  ToolDefinition definition;
  if (!function.contains("name") || !function["name"].is_string() ||
      !valid_function_name(function["name"].get<std::string>())) {
    return ApiError::invalid(
        fwhere + ".name must be 1-64 letters, digits, underscores or dashes", "tools");
  }
  definition.name = function["name"].get<std::string>();
  if (function.contains("description") && !function["description"].is_null()) {
    if (!function["description"].is_string()) {
      return ApiError::invalid(fwhere + ".description must be a string", "tools");
    }
    definition.description = function["description"].get<std::string>();
  }
  if (function.contains("parameters") && !function["parameters"].is_null()) {
    if (!function["parameters"].is_object()) {
      return ApiError::invalid(fwhere + ".parameters must be a JSON schema object", "tools");
    }
    definition.parameters = function["parameters"].dump();
  }
  *strict = false;
  if (function.contains("strict") && !function["strict"].is_null()) {
    if (!function["strict"].is_boolean()) {
      return ApiError::invalid(fwhere + ".strict must be true or false", "tools");
    }
    *strict = function["strict"].get<bool>();
  }
  return definition;
}

}  // namespace

std::variant<std::optional<ToolRequest>, ApiError> read_tool_request(const json& body) {
  ToolRequest request;
  const auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return ApiError::invalid("'tools' must be a list of tools", "tools");
    if (tools->size() > kMaxTools) {
      return ApiError::invalid(
          fmt::format("'tools' may hold at most {} tools, got {}", kMaxTools, tools->size()),
          "tools");
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      bool strict = false;
      auto tool = read_tool((*tools)[i], i, &strict);
      if (auto* error = std::get_if<ApiError>(&tool)) return *error;
      for (const ToolDefinition& earlier : request.tools.tools) {
        if (earlier.name == std::get<ToolDefinition>(tool).name) {
          return ApiError::invalid(
              fmt::format("tools[{}]: two tools are named '{}'", i, earlier.name), "tools");
        }
      }
      if (strict) request.strict_tools.push_back(i);
      request.tools.tools.push_back(std::move(std::get<ToolDefinition>(tool)));
    }
  }
  const bool has_tools = !request.tools.tools.empty();

  const auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string value = choice->get<std::string>();
      if (value == "auto") {
        request.tools.choice = ChatTools::Choice::automatic;
      } else if (value == "none") {
        request.tools.choice = ChatTools::Choice::none;
      } else if (value == "required") {
        if (!has_tools) {
          return ApiError::invalid("'tool_choice' is 'required', but 'tools' is empty",
                                   "tool_choice");
        }
        request.tools.choice = ChatTools::Choice::required;
      } else {
        return ApiError::invalid(
            "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}, got '" + value + "'",
            "tool_choice");
      }
    } else if (choice->is_object() && choice->value("type", json()) == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].value("name", json()).is_string()) {
      const std::string name = (*choice)["function"]["name"].get<std::string>();
      auto& list = request.tools.tools;
      const auto named = std::find_if(list.begin(), list.end(),
                                      [&](const ToolDefinition& t) { return t.name == name; });
      if (named == list.end()) {
        return ApiError::invalid(
            "'tool_choice' names the function '" + name + "', which is not in 'tools'",
            "tool_choice");
      }
      const size_t index = static_cast<size_t>(named - list.begin());
      const bool strict = std::find(request.strict_tools.begin(), request.strict_tools.end(),
                                    index) != request.strict_tools.end();
      ToolDefinition only = *named;
      list = {std::move(only)};
      request.strict_tools.clear();
      if (strict) request.strict_tools.push_back(index);
      request.tools.choice = ChatTools::Choice::required;
    } else {
      return ApiError::invalid(
          "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}",
          "tool_choice");
    }
  }

  const auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) {
      return ApiError::invalid("'parallel_tool_calls' must be true or false",
                               "parallel_tool_calls");
    }
    request.tools.parallel_calls = parallel->get<bool>();
  }
  if (!has_tools) return std::optional<ToolRequest>();
  return std::optional<ToolRequest>(std::move(request));
}

std::optional<ApiError> read_tool_calls(const json& calls, ChatMessage& message) {
  if (!calls.is_array()) {
    return ApiError::invalid("an assistant message's 'tool_calls' must be a list", "messages");
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    const bool shaped = call.is_object() && call.value("type", json("function")) == "function" &&
                        call.contains("function") && call["function"].is_object() &&
                        call["function"].value("name", json()).is_string();
    if (!shaped) {
      return ApiError::invalid(
          fmt::format("tool_calls[{}] must be {{\"id\": ..., \"type\": \"function\", "
                      "\"function\": {{\"name\": ..., \"arguments\": \"...\"}}}}",
                      i),
          "messages");
    }
    ToolCall parsed;
    if (call.contains("id") && !call["id"].is_null()) {
      if (!call["id"].is_string()) {
        return ApiError::invalid(fmt::format("tool_calls[{}].id must be a string", i), "messages");
      }
      parsed.id = call["id"].get<std::string>();
    }
    const json& function = call["function"];
    parsed.name = function["name"].get<std::string>();
    const json arguments = function.value("arguments", json("{}"));
    // OpenAI sends the arguments as JSON text; an object (some clients send one) means the same.
    if (arguments.is_string()) {
      parsed.arguments = arguments.get<std::string>();
    } else if (arguments.is_object()) {
      parsed.arguments = arguments.dump();
    } else {
      return ApiError::invalid(
          fmt::format("tool_calls[{}].function.arguments must be JSON text", i), "messages");
    }
    message.tool_calls.push_back(std::move(parsed));
  }
  return std::nullopt;
}

}  // namespace brisk
