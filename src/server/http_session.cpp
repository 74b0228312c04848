#include "server/http_session.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <sstream>

namespace brisk {

HttpResponse error_response(const ApiError& error) {
  HttpResponse response{static_cast<http::status>(error.status), 11};
  response.set(http::field::content_type, "application/json");
  response.body() = error.to_json();
  return response;
}

namespace {

// The errors this layer raises itself, before any route sees the request.
HttpResponse protocol_error(int status, const std::string& message, const char* code) {
  ApiError error = ApiError::invalid(message);
  error.status = status;
  error.code = code;
  return error_response(error);
}

template <class Message>
std::string serialize(Message& message) {
  std::ostringstream out;
  out << message;
  return out.str();
}

}  // namespace

HttpSession::HttpSession(tcp::socket&& socket, const HttpLimits& limits, HeaderCheck header_check,
                         RequestHandler handler)
    : stream_(std::move(socket)),
      limits_(limits),
      header_check_(std::move(header_check)),
      handler_(std::move(handler)) {}

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void HttpSession::read_header() {
  parser_.emplace();
  parser_->header_limit(16 * 1024);
  parser_->body_limit(limits_.max_body_bytes);
  keep_alive_ = false;
  close_after_write_ = false;
  response_done_ = false;
  stream_.expires_after(limits_.read_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset ||
      ec == net::error::eof) {
    return close();
  }
  if (ec == http::error::body_limit) {
    return refuse_too_large();
  }
  if (ec) {
    return refuse_and_close(
        protocol_error(400, "malformed HTTP request: " + ec.message(), "bad_http_request"));
  }
  if (auto refusal = header_check_(*parser_)) {
    keep_alive_ = parser_->get().keep_alive();
    // Unread body bytes would be parsed as the next request: close instead.
    if (!parser_->is_done()) return refuse_and_close(std::move(*refusal));
    return respond(std::move(*refusal));
  }
  if (parser_->get()[http::field::expect] == "100-continue") {
    queue_write("HTTP/1.1 100 Continue\r\n\r\n");
  }
  reading_body_ = true;
  read_body();
}

void HttpSession::read_body() {
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  reading_body_ = false;
  if (ec == http::error::body_limit) {
    return refuse_too_large();
  }
  if (ec) return close();
  // While the request is served, nothing is read: no timeout until a response is written.
  stream_.expires_never();
  HttpRequest request = parser_->release();
  keep_alive_ = request.keep_alive();
  handler_(std::move(request), shared_from_this());
}

void HttpSession::respond(HttpResponse&& response) {
  if (closed_) return;
  response.version(11);
  response.keep_alive(keep_alive_ && !close_after_write_);
  response.set(http::field::server, "brisk");
  response.prepare_payload();
  response_done_ = true;
  queue_write(serialize(response));
}

void HttpSession::begin_event_stream(int status, const std::string& content_type) {
  if (closed_) return;
  http::response<http::empty_body> header{static_cast<http::status>(status), 11};
  header.set(http::field::server, "brisk");
  header.set(http::field::content_type, content_type);
  header.set(http::field::cache_control, "no-cache");
  header.keep_alive(keep_alive_);
  header.chunked(true);
  queue_write(serialize(header.base()));
}

void HttpSession::send_event(const std::string& data) {
  if (closed_ || data.empty()) return;
  queue_write(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
}

void HttpSession::end_event_stream() {
  if (closed_) return;
  response_done_ = true;
  queue_write("0\r\n\r\n");
}

void HttpSession::watch_for_disconnect(std::function<void()> on_gone) {
  on_gone_ = std::move(on_gone);
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
        if (ec == net::error::operation_aborted || !self->on_gone_) return;
        char byte;
        const ssize_t peeked =
            ec ? 0
               : ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (peeked > 0) return;  // a pipelined request, not a goodbye
        if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        auto on_gone = std::move(self->on_gone_);
        self->on_gone_ = nullptr;
        on_gone();
        self->close();
      });
}

void HttpSession::queue_write(std::string bytes) {
  outbox_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void HttpSession::write_next() {
  if (closed_) return;
  writing_ = true;
  stream_.expires_after(limits_.write_timeout);
  net::async_write(
      stream_, net::buffer(outbox_.front()),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void HttpSession::on_write(beast::error_code ec) {
  writing_ = false;
  if (ec) {
    // The client stopped reading or went away: its request must not keep running.
    if (auto on_gone = std::move(on_gone_)) {
      on_gone_ = nullptr;
      on_gone();
    }
    return close();
  }
  outbox_.pop_front();
  if (!outbox_.empty()) return write_next();
  if (reading_body_) {
    stream_.expires_after(limits_.read_timeout);  // only a "100 Continue" went out
    return;
  }
  stream_.expires_never();
  if (response_done_) finish_response();
}

void HttpSession::finish_response() {
  on_gone_ = nullptr;
  if (close_after_write_) return drain_then_close();
  if (!keep_alive_) return close();
  beast::error_code ignored;
  stream_.socket().cancel(ignored);  // stop the disconnect watch before reading again
  read_header();
}

void HttpSession::refuse_too_large() {
  refuse_and_close(protocol_error(
      413,
      fmt::format("the request body is larger than the limit of {} bytes (--max-body-bytes)",
                  limits_.max_body_bytes),
      "request_too_large"));
}

// For requests whose body we will not read: answer, then close gracefully.
void HttpSession::refuse_and_close(HttpResponse&& response) {
  close_after_write_ = true;
  respond(std::move(response));
}

// Closing with unread data makes the kernel send a reset that can destroy the response in
// flight; half-close and discard what the client is still sending for a short while instead.
void HttpSession::drain_then_close() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(2));
  discard_incoming(std::make_shared<std::array<char, 64 * 1024>>());
}

void HttpSession::discard_incoming(std::shared_ptr<std::array<char, 64 * 1024>> scratch) {
  stream_.async_read_some(net::buffer(*scratch),
                          [self = shared_from_this(), scratch](beast::error_code ec, size_t) {
                            if (ec) return self->close();
                            self->discard_incoming(scratch);
                          });
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  on_gone_ = nullptr;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace brisk
