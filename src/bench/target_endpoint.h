#pragma once

#include <memory>
#include <optional>
#include <string>

namespace brisk::bench {

// Which OpenAI route the benchmark drives.
// rerank: /v1/rerank, one query with --inputs-per-request documents (an input each).
enum class ApiKind { completions, chat, embeddings, rerank };

// embeddings and rerank: a stateless model's routes, answered whole (never streamed), one
// result per input sent (a vector, a document's score).
inline bool pooling_route(ApiKind kind) {
  return kind == ApiKind::embeddings || kind == ApiKind::rerank;
}
// "embeddings" or "rerank", as --endpoint and result.json name them.
inline const char* pooling_route_name(ApiKind kind) {
  return kind == ApiKind::rerank ? "rerank" : "embeddings";
}

// How the server treats a kept-alive connection, learned by the first connection re-used.
// Some servers close it right after an answer while their headers say keep-alive (llama-server
// does, after a streamed answer). A request sent in that moment cannot be told from one the
// server read before closing, so it must not be sent again (it may have been served): brisk
// bench learns the habit once and then opens a connection for every request instead.
enum class KeepAliveHabit { unknown, keeps, closes_after_answer };

// The server under test, parsed from a URL such as "http://127.0.0.1:8080" or
// "http://gateway:80/llm" (a path prefix, for servers mounted behind a proxy).
struct TargetEndpoint {
  std::string host;
  std::string port = "80";
  std::string base_path;  // without a trailing '/', prepended to every route
  std::string api_key;    // sent as "Authorization: Bearer ..." when not empty
  // Shared by every copy, so by every connection to the target, across load points.
  std::shared_ptr<KeepAliveHabit> keep_alive = std::make_shared<KeepAliveHabit>();

  std::string url() const { return "http://" + host_header() + base_path; }
  std::string route(const std::string& path) const { return base_path + path; }
  // "Host" header value; an IPv6 address in brackets (RFC 9110 §7.2), "[::1]:8080".
  std::string host_header() const {
    const bool ipv6 = host.find(':') != std::string::npos;
    return (ipv6 ? "[" + host + "]" : host) + ":" + port;
  }
};

// Parses "http://host[:port][/prefix]". Returns nullopt with `error` set for anything else;
// https is refused explicitly rather than silently sent as plain text.
std::optional<TargetEndpoint> parse_target_url(const std::string& url, std::string& error);

const char* completion_route(ApiKind kind);

}  // namespace brisk::bench
