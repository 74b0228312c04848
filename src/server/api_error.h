#pragma once

#include <string>

namespace brisk {

// An error a client caused (or may retry), rendered in the OpenAI error format.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty → null
  std::string code;   // empty → null

  std::string to_json() const;

  static ApiError invalid(std::string message, std::string param = {});
};

}  // namespace brisk
