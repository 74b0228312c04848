#include "bench/request_record.h"

namespace brisk::bench {

std::string_view error_name(RequestError error) {
  switch (error) {
    case RequestError::none:
      return "none";
    case RequestError::connect_refused:
      return "connect_refused";
    case RequestError::timeout:
      return "timeout";
    case RequestError::http_429:
      return "http_429";
    case RequestError::http_4xx:
      return "http_4xx";
    case RequestError::http_5xx:
      return "http_5xx";
    case RequestError::malformed_sse:
      return "malformed_sse";
    case RequestError::stream_error:
      return "stream_error";
    case RequestError::disconnected:
      return "disconnected";
    case RequestError::abandoned:
      return "abandoned";
  }
  return "unknown";
}

void RequestRecord::fail(RequestError cause, std::string detail) {
  if (!ok()) return;
  error = cause;
  error_detail = std::move(detail);
}

}  // namespace brisk::bench
