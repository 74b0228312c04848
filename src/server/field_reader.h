#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"

namespace brisk {

// Reads a request body's fields with their types checked first (nlohmann's get<> throws on a
// wrong type): the first problem becomes a 400 naming the field, and reading goes on harmlessly.
struct FieldReader {
  const nlohmann::json& body;
  std::optional<ApiError> error;

  const nlohmann::json* find(const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void fail(std::string message, const char* param) {
    if (!error) error = ApiError::invalid(std::move(message), param);
  }

  std::optional<double> number(const char* name, double min, double max) {
    const nlohmann::json* value = find(name);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number()) {
      fail(std::string("'") + name + "' must be a number", name);
      return std::nullopt;
    }
    const double number = value->get<double>();
    if (!(number >= min && number <= max)) {
      fail(fmt_range(name, min, max, number), name);
      return std::nullopt;
    }
    return number;
  }

  std::optional<int64_t> integer(const char* name) {
    const nlohmann::json* value = find(name);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number_integer()) {
      fail(std::string("'") + name + "' must be an integer", name);
      return std::nullopt;
    }
    return value->get<int64_t>();
  }

  std::optional<bool> boolean(const char* name) {
    const nlohmann::json* value = find(name);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) {
      fail(std::string("'") + name + "' must be true or false", name);
      return std::nullopt;
    }
    return value->get<bool>();
  }

  static std::string fmt_range(const char* name, double min, double max, double got) {
    return std::string("'") + name + "' must be between " + trim(min) + " and " + trim(max) +
           ", got " + trim(got);
  }

  // The shortest text that reads back as `value`: 0.5, 2, 1e+308 (not 309 digits).
  static std::string trim(double value) { return fmt::format("{}", value); }
};

}  // namespace brisk
