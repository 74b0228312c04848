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
#include "server/connection_limiter.h"

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
  size_t max_header_bytes = 16 << 10;  // request line + headers; 431 beyond
  // A request (header and body) must arrive whole within this time (from the connection's
  // opening, or a keep-alive request's first byte), whatever "100 Continue" or a trickle of
  // bytes does: a slow client cannot hold a connection forever.
  std::chrono::seconds read_timeout{30};
  // A keep-alive connection with no new request for this long is closed.
  std::chrono::seconds keep_alive_timeout{30};
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
  // `slot`: this connection's place under --max-connections (null for a refused connection).
  HttpSession(tcp::socket&& socket, const HttpLimits& limits, HeaderCheck header_check,
              RequestHandler handler, std::unique_ptr<ConnectionLimiter::Slot> slot);

  void start();
  // Answers at once without reading a request (the connection limit is reached), then closes.
  void refuse(HttpResponse&& response);
  net::any_io_executor executor() { return stream_.get_executor(); }

  void respond(HttpResponse&& response);
  void begin_event_stream(int status, const std::string& content_type);
  void send_event(const std::string& data);
  void end_event_stream();
  // Drops the connection at once: a response that cannot be completed must not look complete.
  void abort() { close(); }
  // Calls `on_gone` once if the peer closes the connection before the response is complete.
  void watch_for_disconnect(std::function<void()> on_gone);

 private:
  void await_next_request();
  void read_header();
  void on_header(beast::error_code ec);
  void serve(HttpRequest&& request);
  void read_body();
  void on_body(beast::error_code ec);
  void queue_write(std::string bytes);
  void write_next();
  void on_write(beast::error_code ec);
  void finish_response();
  bool server_closing() const;
  bool keeps_alive() const;
  void refuse_and_close(HttpResponse&& response);
  void arm_disconnect_watch();
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
  std::chrono::steady_clock::time_point request_deadline_;
  bool keep_alive_ = false;
  bool close_after_write_ = false;
  bool response_begun_ = false;  // a status line is queued: an error can no longer be sent
  bool response_done_ = false;  // the whole response is queued
  bool writing_ = false;
  bool reading_body_ = false;
  bool closed_ = false;
  std::deque<std::string> outbox_;
  std::function<void()> on_gone_;
  std::unique_ptr<ConnectionLimiter::Slot> slot_;
};

}  // namespace brisk
