#pragma once

#include <optional>
#include <string>

namespace brisk::bench {

// Which OpenAI route the benchmark drives.
enum class ApiKind { completions, chat };

// The server under test, parsed from a URL such as "http://127.0.0.1:8080" or
// "http://gateway:80/llm" (a path prefix, for servers mounted behind a proxy).
struct TargetEndpoint {
  std::string host;
  std::string port = "80";
  std::string base_path;  // without a trailing '/', prepended to every route
  std::string api_key;    // sent as "Authorization: Bearer ..." when not empty

  std::string url() const { return "http://" + host + ":" + port + base_path; }
  std::string route(const std::string& path) const { return base_path + path; }
  // "Host" header value.
  std::string host_header() const { return host + ":" + port; }
};

// Parses "http://host[:port][/prefix]". Returns nullopt with `error` set for anything else;
// https is refused explicitly rather than silently sent as plain text.
std::optional<TargetEndpoint> parse_target_url(const std::string& url, std::string& error);

const char* completion_route(ApiKind kind);

}  // namespace brisk::bench
