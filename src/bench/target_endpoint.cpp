#include "bench/target_endpoint.h"

namespace brisk::bench {

std::optional<TargetEndpoint> parse_target_url(const std::string& url, std::string& error) {
  constexpr std::string_view kScheme = "http://";
  if (url.starts_with("https://")) {
    error = "https is not supported yet; put a plain-http address (or a local TLS proxy) in --url";
    return std::nullopt;
  }
  if (!url.starts_with(kScheme)) {
    error = "--url must start with http://";
    return std::nullopt;
  }
  TargetEndpoint target;
  std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    target.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!target.base_path.empty() && target.base_path.back() == '/') target.base_path.pop_back();
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    target.port = rest.substr(colon + 1);
    rest.resize(colon);
  }
  if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
    rest = rest.substr(1, rest.size() - 2);
  if (rest.empty() || target.port.empty()) {
    error = "cannot read host and port from --url " + url;
    return std::nullopt;
  }
  target.host = rest;
  return target;
}

const char* completion_route(ApiKind kind) {
  switch (kind) {
    case ApiKind::chat:
      return "/v1/chat/completions";
    case ApiKind::embeddings:
      return "/v1/embeddings";
    case ApiKind::rerank:
      return "/v1/rerank";
    case ApiKind::completions:
      break;
  }
  return "/v1/completions";
}

}  // namespace brisk::bench
