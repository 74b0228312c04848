#include "server/http_session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
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
                         RequestHandler handler, std::unique_ptr<ConnectionLimiter::Slot> slot)
    : stream_(std::move(socket)),
      limits_(limits),
      header_check_(std::move(header_check)),
      handler_(std::move(handler)),
      slot_(std::move(slot)) {}

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void HttpSession::refuse(HttpResponse&& response) {
  net::dispatch(stream_.get_executor(),
                [self = shared_from_this(), response = std::move(response)]() mutable {
                  self->refuse_and_close(std::move(response));
                });
}

// Between keep-alive requests the connection may idle for keep_alive_timeout; the request's own
// deadline starts with its first byte.
void HttpSession::await_next_request() {
  if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
  stream_.expires_after(limits_.keep_alive_timeout);
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->buffer_.commit(bytes);
                            if (ec || bytes == 0) return self->close();
                            self->read_header();
                          });
}

void HttpSession::read_header() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
  parser_->body_limit(limits_.max_body_bytes);
  keep_alive_ = false;
  close_after_write_ = false;
  response_begun_ = false;
  response_done_ = false;
  request_deadline_ = std::chrono::steady_clock::now() + limits_.read_timeout;
  stream_.expires_at(request_deadline_);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

namespace {

// The client went away or ran out of time: there is nobody to answer.
bool connection_ended(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == beast::error::timeout || ec == net::error::operation_aborted ||
         ec == net::error::connection_reset || ec == net::error::eof;
}

}  // namespace

void HttpSession::on_header(beast::error_code ec) {
  if (connection_ended(ec)) return close();
  if (ec == http::error::body_limit) {
    return refuse_too_large();
  }
  if (ec == http::error::header_limit) {
    return refuse_and_close(protocol_error(
        431,
        fmt::format("the request line and headers are larger than the limit of {} bytes "
                    "(--max-header-bytes)",
                    limits_.max_header_bytes),
        "request_header_fields_too_large"));
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
  reading_body_ = true;
  if (parser_->get()[http::field::expect] == "100-continue") {
    queue_write("HTTP/1.1 100 Continue\r\n\r\n");
  }
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
  if (connection_ended(ec)) return close();
  if (ec) {  // a bad chunk size or extension
    return refuse_and_close(
        protocol_error(400, "malformed HTTP request body: " + ec.message(), "bad_http_request"));
  }
  // While the request is served, nothing is read: no timeout until a response is written.
  stream_.expires_never();
  HttpRequest request = parser_->release();
  keep_alive_ = request.keep_alive();
  if (slot_) slot_->set_busy(true);
  serve(std::move(request));
}

// The last line of defence: whatever a handler throws ends this request, never the process.
void HttpSession::serve(HttpRequest&& request) {
  const std::string target(request.target());
  try {
    handler_(std::move(request), shared_from_this());
  } catch (const std::exception& e) {
    spdlog::error("request {} failed: {}", target, e.what());
    if (response_begun_) return close();
    ApiError error;
    error.status = 500;
    error.type = "server_error";
    error.code = "internal_error";
    error.message = "the server failed while handling this request; it has been logged";
    close_after_write_ = true;
    respond(error_response(error));
  }
}

bool HttpSession::server_closing() const { return slot_ && slot_->server_closing(); }

// Whether this response says `Connection: keep-alive`: not when the client or the server ends the
// connection after it.
bool HttpSession::keeps_alive() const {
  return keep_alive_ && !close_after_write_ && !server_closing();
}

void HttpSession::respond(HttpResponse&& response) {
  if (closed_) return;
  response.version(11);
  response.keep_alive(keeps_alive());
  response.set(http::field::server, "brisk");
  response.prepare_payload();
  response_begun_ = true;
  response_done_ = true;
  queue_write(serialize(response));
}

void HttpSession::begin_event_stream(int status, const std::string& content_type) {
  if (closed_) return;
  http::response<http::empty_body> header{static_cast<http::status>(status), 11};
  header.set(http::field::server, "brisk");
  header.set(http::field::content_type, content_type);
  header.set(http::field::cache_control, "no-cache");
  header.keep_alive(keeps_alive());
  header.chunked(true);
  response_begun_ = true;
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
  arm_disconnect_watch();
}

void HttpSession::arm_disconnect_watch() {
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
        if (ec == net::error::operation_aborted || !self->on_gone_ || self->closed_) return;
        char byte;
        const ssize_t peeked =
            ec ? 0
               : ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (peeked > 0) return;  // a pipelined request, not a goodbye
        // A wake-up with nothing to read: keep watching, or a later goodbye goes unnoticed.
        if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          return self->arm_disconnect_watch();
        }
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
  // A "100 Continue" sent while the body is read must not extend the request's deadline.
  if (reading_body_) {
    stream_.expires_at(request_deadline_);
  } else {
    stream_.expires_after(limits_.write_timeout);
  }
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
  if (reading_body_) return;  // only a "100 Continue" went out; the body read goes on
  stream_.expires_never();
  if (response_done_) finish_response();
}

void HttpSession::finish_response() {
  on_gone_ = nullptr;
  if (slot_) slot_->set_busy(false);
  if (close_after_write_ || server_closing()) return drain_then_close();
  if (!keep_alive_) return close();
  beast::error_code ignored;
  stream_.socket().cancel(ignored);  // stop the disconnect watch before reading again
  await_next_request();
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
  if (slot_) slot_->set_busy(false);
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace brisk
