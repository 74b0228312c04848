#include "bench/http_fetch.h"

#include <nlohmann/json.hpp>

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace brisk::bench {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

FetchResult fetch(const TargetEndpoint& target, const std::string& route, const std::string& body,
                  std::chrono::milliseconds timeout) {
  FetchResult result;
  net::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  net::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec) {
    result.error = "resolve " + target.host + ": " + ec.message();
    return result;
  }
  http::request<http::string_body> request{body.empty() ? http::verb::get : http::verb::post,
                                           target.route(route), 11};
  request.set(http::field::host, target.host_header());
  request.set(http::field::user_agent, "brisk-bench");
  if (!target.api_key.empty()) request.set(http::field::authorization, "Bearer " + target.api_key);
  if (!body.empty()) request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();

  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  // Chained async operations on a private io_context give the whole exchange one deadline,
  // which the blocking Beast calls cannot.
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code connect_ec, const auto&) {
    if (connect_ec) {
      ec = connect_ec;
      return;
    }
    http::async_write(stream, request, [&](beast::error_code write_ec, size_t) {
      if (write_ec) {
        ec = write_ec;
        return;
      }
      http::async_read(stream, buffer, response,
                       [&](beast::error_code read_ec, size_t) { ec = read_ec; });
    });
  });
  io.run();
  if (ec) {
    result.error = target.url() + route + ": " + ec.message();
    return result;
  }
  result.status = static_cast<int>(response.result_int());
  result.body = std::move(response.body());
  return result;
}

std::optional<std::string> first_served_model(const TargetEndpoint& target,
                                              std::chrono::milliseconds timeout,
                                              std::string& error) {
  const FetchResult result = fetch(target, "/v1/models", "", timeout);  // fetch adds base_path
  if (!result.ok()) {
    error = result.status == 0 ? result.error
                               : "GET /v1/models answered HTTP " + std::to_string(result.status);
    return std::nullopt;
  }
  const auto reply = nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_object() && reply.contains("data") && reply["data"].is_array() &&
      !reply["data"].empty() && reply["data"][0].is_object() && reply["data"][0].contains("id") &&
      reply["data"][0]["id"].is_string()) {
    return reply["data"][0]["id"].get<std::string>();
  }
  error = "GET /v1/models listed no model";
  return std::nullopt;
}

std::string served_model_kind(const TargetEndpoint& target, const std::string& model,
                              std::chrono::milliseconds timeout) {
  const FetchResult result = fetch(target, "/v1/models", "", timeout);
  if (!result.ok()) return {};
  const auto reply = nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object() || !reply.contains("data") || !reply["data"].is_array()) return {};
  for (const auto& entry : reply["data"]) {
    if (entry.is_object() && entry.contains("id") && entry["id"].is_string() &&
        entry["id"] == model && entry.contains("kind") && entry["kind"].is_string()) {
      return entry["kind"].get<std::string>();
    }
  }
  return {};
}

}  // namespace brisk::bench
