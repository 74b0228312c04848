#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/api_error.h"

namespace brisk {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

// An ApiError as an HTTP response with the OpenAI error body.
HttpResponse error_response(const ApiError& error);

struct HttpLimits {
  size_t max_body_bytes = 8 << 20;
  // A connection must deliver a whole request within this time, and an idle keep-alive
  // connection is closed after it: a slow or silent client cannot hold a connection forever.
  std::chrono::seconds read_timeout{30};
  // A streaming client that stops reading for this long is dropped (its request cancelled).
  std::chrono::seconds write_timeout{60};
};

class HttpSession;
// Handles one request; must answer through the session (now or later, on its executor).
using RequestHandler = std::function<void(HttpRequest&&, const std::shared_ptr<HttpSession>&)>;
// Answers requests refused before their body is read (size, auth): returns a response to send.
using HeaderCheck =
    std::function<std::optional<HttpResponse>(const http::request_parser<http::string_body>&)>;

// One HTTP/1.1 connection: reads requests (keep-alive), writes whole responses or an event
// stream (chunked), and notices a client that goes away while its request is being served.
// Every member function runs on the connection's strand.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, const HttpLimits& limits, HeaderCheck header_check,
              RequestHandler handler);

  void start();
  net::any_io_executor executor() { return stream_.get_executor(); }

  void respond(HttpResponse&& response);
  void begin_event_stream(int status, const std::string& content_type);
  void send_event(const std::string& data);
  void end_event_stream();
  // Calls `on_gone` once if the peer closes the connection before the response is complete.
  void watch_for_disconnect(std::function<void()> on_gone);

 private:
  void read_header();
  void on_header(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void queue_write(std::string bytes);
  void write_next();
  void on_write(beast::error_code ec);
  void finish_response();
  void refuse_and_close(HttpResponse&& response);
  void refuse_too_large();
  void drain_then_close();
  void discard_incoming(std::shared_ptr<std::array<char, 64 * 1024>> scratch);
  void close();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  HttpLimits limits_;
  HeaderCheck header_check_;
  RequestHandler handler_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = false;
  bool close_after_write_ = false;
  bool response_done_ = false;  // the whole response is queued
  bool writing_ = false;
  bool reading_body_ = false;
  bool closed_ = false;
  std::deque<std::string> outbox_;
  std::function<void()> on_gone_;
};

}  // namespace brisk
