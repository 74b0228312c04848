#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace brisk {

std::string ApiError::to_json() const {
  nlohmann::json error = {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

ApiError ApiError::invalid(std::string message, std::string param) {
  ApiError error;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

}  // namespace brisk
