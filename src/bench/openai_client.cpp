#include "bench/openai_client.h"

#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <limits>
#include <vector>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "bench/completion_response.h"
#include "bench/sse_parser.h"

// GCC 12 flags Boost 1.74's coroutine-frame allocator (operator new paired with a sized class
// delete) as mismatched; the pairing is intended, see boost/asio/impl/awaitable.hpp.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace brisk::bench {

namespace http = beast::http;
using json = nlohmann::json;

namespace {

constexpr auto kAwait = net::use_awaitable;
constexpr size_t kMaxKeptErrorBody = 4096;

// A reset: the server's socket was closed with the request unread in it (or before it came).
bool is_reset(const beast::error_code& ec) {
  return ec == net::error::connection_reset || ec == net::error::broken_pipe;
}

RequestError classify_network_error(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return RequestError::timeout;
  if (ec == net::error::connection_refused || ec == net::error::host_not_found ||
      ec == net::error::host_not_found_try_again || ec == net::error::network_unreachable ||
      ec == net::error::host_unreachable) {
    return RequestError::connect_refused;
  }
  return RequestError::disconnected;
}

RequestError classify_status(unsigned status) {
  if (status == 429) return RequestError::http_429;
  if (status >= 500) return RequestError::http_5xx;
  return RequestError::http_4xx;  // includes unexpected 1xx/3xx: the request was not served
}

json request_body(const std::string& model, int max_tokens, bool stream,
                  const SamplingOptions& sampling) {
  json body = {
      {"model", model}, {"max_tokens", max_tokens}, {"stream", stream}, {"ignore_eos", true}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  sampling.add_to(body);
  return body;
}

}  // namespace

std::string build_completion_body(ApiKind kind, const std::string& model, const std::string& prompt,
                                  int max_tokens, bool stream, const SamplingOptions& sampling) {
  if (kind == ApiKind::chat) {
    return build_messages_body(model, json::array({{{"role", "user"}, {"content", prompt}}}),
                               max_tokens, stream, sampling);
  }
  json body = request_body(model, max_tokens, stream, sampling);
  body["prompt"] = prompt;
  return body.dump();
}

std::string build_embeddings_body(const std::string& model,
                                  const std::vector<std::string>& inputs) {
  return json{{"model", model}, {"input", inputs}}.dump();
}

std::string build_rerank_body(const std::string& model, const std::string& query,
                              const std::vector<std::string>& documents) {
  return json{{"model", model}, {"query", query}, {"documents", documents}}.dump();
}

std::string build_token_prompt_body(const std::string& model, const std::vector<int>& prompt,
                                    int max_tokens, bool stream, const SamplingOptions& sampling) {
  json body = request_body(model, max_tokens, stream, sampling);
  body["prompt"] = prompt;
  return body.dump();
}

std::string build_messages_body(const std::string& model, const json& messages, int max_tokens,
                                bool stream, const SamplingOptions& sampling) {
  json body = request_body(model, max_tokens, stream, sampling);
  body["messages"] = messages;
  return body.dump();
}

OpenAiConnection::OpenAiConnection(net::any_io_executor executor, TargetEndpoint target,
                                   ApiKind kind, std::chrono::milliseconds timeout)
    : target_(std::move(target)),
      kind_(kind),
      timeout_(timeout),
      resolver_(executor),
      stream_(executor) {}

void OpenAiConnection::close() {
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
  buffer_.clear();
}

net::awaitable<bool> OpenAiConnection::connect(TimePoint deadline, RequestRecord& record) {
  beast::error_code ec;
  // An IP address needs no resolver: Asio resolves on a helper thread, which costs a thread
  // hand-off per new connection and shows up as schedule lag at high rates.
  const net::ip::address address = net::ip::make_address(target_.host, ec);
  unsigned short port = 0;
  const auto [end, port_error] =
      std::from_chars(target_.port.data(), target_.port.data() + target_.port.size(), port);
  std::vector<net::ip::tcp::endpoint> endpoints;
  if (!ec && port_error == std::errc() && end == target_.port.data() + target_.port.size()) {
    endpoints.emplace_back(address, port);
  } else {
    ec = {};
    const auto resolved = co_await resolver_.async_resolve(target_.host, target_.port,
                                                           net::redirect_error(kAwait, ec));
    for (const auto& entry : resolved) endpoints.push_back(entry.endpoint());
  }
  if (!ec) {
    stream_.expires_at(deadline);
    co_await stream_.async_connect(endpoints, net::redirect_error(kAwait, ec));
  }
  if (ec) {
    record.fail(classify_network_error(ec), "connect to " + target_.url() + ": " + ec.message());
    close();
    co_return false;
  }
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);
  co_return true;
}

net::awaitable<void> OpenAiConnection::send(const CompletionRequest& request,
                                            RequestRecord& record) {
  record.streamed = request.stream;
  record.embedding_inputs = request.inputs;
  const TimePoint deadline = Clock::now() + timeout_;
  // A kept-alive connection the server has closed since (its idle timeout), or is closing, is
  // replaced before anything goes out on it. A request is sent again only when the server
  // provably never read it (it reset the connection): a POST that reached the server must not
  // be counted, and served, twice (RFC 9110, 9.2.2).
  co_await drop_if_closing();
  if (!stream_.socket().is_open()) record.new_connection = true;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = stream_.socket().is_open();
    if (!reused) record.connect_started = Clock::now();
    if (!reused && !co_await connect(deadline, record)) break;
    // Measured after connecting: with keep-alive only the first request of a user would pay
    // the handshake, which is noise, not serving latency.
    record.sent = Clock::now();
    if (co_await exchange(request, record, deadline, reused) == Attempt::finished) break;
    close();  // the server closed this connection before it read the request: a fresh one
    record.new_connection = true;
  }
  record.end = Clock::now();
}

net::awaitable<void> OpenAiConnection::open() {
  co_await drop_if_closing();
  if (stream_.socket().is_open()) co_return;
  RequestRecord unused;  // a failed connect is closed again; the next send() reports it
  co_await connect(Clock::now() + timeout_, unused);
}

net::awaitable<void> OpenAiConnection::drop_if_closing() {
  if (!stream_.socket().is_open()) co_return;
  KeepAliveHabit& habit = *target_.keep_alive;
  if (habit == KeepAliveHabit::closes_after_answer) co_return close();
  // Only a connection that has carried an answer shows what the server does after one.
  if (habit == KeepAliveHabit::unknown && last_answer_end_ != TimePoint{}) {
    net::steady_timer timer(stream_.get_executor());
    while (!peer_has_closed() && Clock::now() < last_answer_end_ + kHabitProbe) {
      timer.expires_after(std::chrono::microseconds(250));
      beast::error_code ignored;
      co_await timer.async_wait(net::redirect_error(kAwait, ignored));
    }
    // Learned once, by whichever connection looks first.
    if (habit == KeepAliveHabit::unknown) {
      habit = peer_has_closed() ? KeepAliveHabit::closes_after_answer : KeepAliveHabit::keeps;
    }
  }
  if (peer_has_closed()) close();
}

bool OpenAiConnection::peer_has_closed() {
  if (buffer_.size() > 0) return true;  // the server sent bytes no request asked for
  char byte;
  const ssize_t got = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got < 0) return errno != EAGAIN && errno != EWOULDBLOCK;  // a reset, or worse
  return true;  // 0: the server's FIN; more: an answer to no request (an HTTP 408, say)
}

net::awaitable<OpenAiConnection::Attempt> OpenAiConnection::exchange(
    const CompletionRequest& request, RequestRecord& record, TimePoint deadline, bool reused) {
  http::request<http::string_body> http_request{http::verb::post, request.route, 11};
  http_request.set(http::field::host, target_.host_header());
  http_request.set(http::field::user_agent, "brisk-bench");
  http_request.set(http::field::content_type, "application/json");
  http_request.set(http::field::accept, request.stream ? "text/event-stream" : "application/json");
  if (!target_.api_key.empty())
    http_request.set(http::field::authorization, "Bearer " + target_.api_key);
  http_request.keep_alive(true);
  http_request.body() = request.body;
  http_request.prepare_payload();

  beast::error_code ec;
  stream_.expires_at(deadline);
  co_await http::async_write(stream_, http_request, net::redirect_error(kAwait, ec));
  if (reused && is_reset(ec)) co_return Attempt::unread;
  if (!ec) record.written = Clock::now();

  http::response_parser<http::buffer_body> parser;
  // A long stream is not an error. (Not boost::none: Boost 1.74 compares `len > none`, which is
  // always true, so every response with a Content-Length would fail.)
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!ec) {
    stream_.expires_at(deadline);
    co_await http::async_read_header(stream_, buffer_, parser, net::redirect_error(kAwait, ec));
    if (reused && is_reset(ec) && buffer_.size() == 0) co_return Attempt::unread;
    if (!ec) record.first_byte = Clock::now();
  }
  if (ec) {
    const bool closed = ec == http::error::end_of_stream || ec == net::error::eof;
    if (reused && closed && buffer_.size() == 0) {
      // A close and nothing else: the server may have read the request first, so it is not
      // sent again; and from now on no connection is re-used.
      *target_.keep_alive = KeepAliveHabit::closes_after_answer;
      record.fail(RequestError::disconnected,
                  "the server closed the kept-alive connection as the request went out (it may "
                  "have read it, so it is not sent again); brisk bench opens a connection for "
                  "every request from now on");
    } else {
      record.fail(classify_network_error(ec), "sending request: " + ec.message());
    }
    close();
    co_return Attempt::finished;
  }

  record.http_status = static_cast<int>(parser.get().result_int());
  if (record.http_status == 429 || record.http_status == 503) {
    // Delay-seconds only; an HTTP date is read as none.
    const auto header = parser.get().find(http::field::retry_after);
    if (header != parser.get().end()) {
      const std::string_view value(header->value().data(), header->value().size());
      double seconds = -1;
      const auto [end, parsed] =
          std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (parsed == std::errc() && end == value.data() + value.size() && seconds >= 0) {
        record.retry_after_s = seconds;
      }
    }
  }
  const bool success_status = record.http_status == 200;
  const bool parse_sse = success_status && request.stream;
  SseParser sse;
  std::string kept_body;  // error bodies and non-streamed responses
  char chunk[16 * 1024];

  // read_some returns as soon as the parser has consumed any body bytes, so each content
  // event is time-stamped when it arrives rather than when a buffer fills.
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    stream_.expires_at(deadline);
    co_await http::async_read_some(stream_, buffer_, parser, net::redirect_error(kAwait, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      record.fail(classify_network_error(ec), "reading response: " + ec.message());
      close();
      co_return Attempt::finished;
    }
    const TimePoint arrived = Clock::now();
    const std::string_view bytes(chunk, sizeof(chunk) - parser.get().body().size);
    if (!parse_sse) {
      if (!success_status && kept_body.size() >= kMaxKeptErrorBody) continue;
      kept_body.append(bytes);
      continue;
    }
    for (const SseEvent& event : sse.feed(bytes)) {
      if (event.is_done() || !record.ok()) continue;
      read_stream_event(event.data, kind_, arrived, record);
    }
  }

  if (!success_status) {
    record.fail(classify_status(record.http_status),
                "HTTP " + std::to_string(record.http_status) + ": " + kept_body.substr(0, 300));
  } else if (request.stream) {
    if (!sse.saw_done()) record.fail(RequestError::malformed_sse, "stream ended without [DONE]");
  } else {
    read_response_body(kept_body, kind_, record);
  }
  last_answer_end_ = Clock::now();
  if (!parser.get().keep_alive()) close();
  co_return Attempt::finished;
}

}  // namespace brisk::bench
