#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

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

  // `priority`: lower runs sooner, as on every route.
  std::optional<int> priority() {
    const std::optional<int64_t> value = integer("priority");
    if (!value) return std::nullopt;
    if (*value < -1000000 || *value > 1000000) {
      fail("'priority' must be between -1000000 and 1000000 (lower runs sooner)", "priority");
      return std::nullopt;
    }
    return static_cast<int>(*value);
  }

  // A 400 naming the body's first field that is not in `known` (a route that reads only those).
  template <size_t N>
  static std::optional<ApiError> unknown_field(const nlohmann::json& body,
                                               const char* const (&known)[N],
                                               std::string_view route) {
    for (const auto& [name, value] : body.items()) {
      if (std::find(std::begin(known), std::end(known), name) != std::end(known)) continue;
      std::string takes;
      for (const char* field : known) takes += (takes.empty() ? "" : ", ") + std::string(field);
      return ApiError::invalid(
          fmt::format("'{}' is not a field of {} (it takes {})", name, route, takes), name);
    }
    return std::nullopt;
  }

  static std::string fmt_range(const char* name, double min, double max, double got) {
    return std::string("'") + name + "' must be between " + trim(min) + " and " + trim(max) +
           ", got " + trim(got);
  }

  // The shortest text that reads back as `value`: 0.5, 2, 1e+308 (not 309 digits).
  static std::string trim(double value) { return fmt::format("{}", value); }
};

}  // namespace brisk
