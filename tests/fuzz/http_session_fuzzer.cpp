// Fuzzes brisk serve's HTTP connection: the bytes a client sends, through the real HttpSession
// (Beast's request parser with our header and body limits, the header check, keep-alive,
// pipelining, "Expect: 100-continue", answers now or later, event streams, the disconnect watch).
//
// The input's first byte picks how the rest is delivered, the session running between pieces:
// whole; in two pieces split at a multiple of 8 bytes the byte also picks (a request cut anywhere
// in its first 500 bytes); or in pieces of 7 or 61 bytes. The rest is what the client sends
// before it closes its side. The peer is one end of a socketpair in this process, so a run needs no
// port and leaves no TIME_WAIT behind. A handler in the shape of OpenAiServer's answers each
// request: completions bodies go through the real parse_completion_params; a stream is answered in
// posted steps, as the engine thread's updates arrive.
//
// Beyond "no crash": whatever the session writes must parse as HTTP/1.1 responses (the last may
// be cut short by the client's close), and once the client has closed and the session has run
// out of work it must be gone.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/completion_params.h"
#include "server/http_session.h"

namespace {

using namespace brisk;

constexpr std::string_view kApiKey = "fuzz-key";

void require(bool condition) {
  if (!condition) std::abort();
}

std::string_view path_of(beast::string_view target) {
  const std::string_view view(target.data(), target.size());
  return view.substr(0, view.find('?'));
}

HttpLimits fuzz_limits() {
  HttpLimits limits;
  limits.max_body_bytes = 512;  // small, so that inputs of a few KB reach the 413 paths
  return limits;
}

// As OpenAiServer::check_header: /v1/ routes need the API key, refused before the body is read.
std::optional<HttpResponse> check_header(const http::request_parser<http::string_body>& parser) {
  const auto& request = parser.get();
  if (!path_of(request.target()).starts_with("/v1/")) return std::nullopt;
  const auto authorization = request[http::field::authorization];
  if (std::string_view(authorization.data(), authorization.size()) ==
      "Bearer " + std::string(kApiKey)) {
    return std::nullopt;
  }
  ApiError error;
  error.status = 401;
  error.type = "authentication_error";
  error.message = "invalid API key";
  return error_response(error);
}

HttpResponse text_response(http::status status, std::string body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  return response;
}

// Answers a streamed completion in steps posted to the session's executor, as the engine's
// token updates are; stops early when the client goes away.
void stream_answer(const std::shared_ptr<HttpSession>& session, int events_left,
                   const std::shared_ptr<bool>& gone) {
  net::post(session->executor(), [session, events_left, gone] {
    if (*gone) return;
    if (events_left == 0) {
      session->send_event("data: [DONE]\n\n");
      return session->end_event_stream();
    }
    session->send_event("data: {\"choices\":[{\"index\":0,\"text\":\"tok\"}]}\n\n");
    stream_answer(session, events_left - 1, gone);
  });
}

void answer_completion(const HttpRequest& request, CompletionKind kind,
                       const std::shared_ptr<HttpSession>& session) {
  auto parsed = parse_completion_params(request.body(), kind);
  if (const auto* error = std::get_if<ApiError>(&parsed)) {
    return session->respond(error_response(*error));
  }
  const CompletionParams& params = std::get<CompletionParams>(parsed);
  auto gone = std::make_shared<bool>(false);
  if (params.stream) session->begin_event_stream(200, "text/event-stream");
  session->watch_for_disconnect([gone] { *gone = true; });
  if (params.stream) return stream_answer(session, 2, gone);
  net::post(session->executor(), [session, gone] {
    if (!*gone) session->respond(text_response(http::status::ok, R"({"choices":[]})"));
  });
}

void handle(HttpRequest&& request, const std::shared_ptr<HttpSession>& session) {
  const std::string_view path = path_of(request.target());
  const bool post = request.method() == http::verb::post;
  if (path == "/v1/chat/completions" && post) {
    return answer_completion(request, CompletionKind::chat, session);
  }
  if (path == "/v1/completions" && post) {
    return answer_completion(request, CompletionKind::text, session);
  }
  if (path == "/health" && request.method() == http::verb::get) {
    return session->respond(text_response(http::status::ok, R"({"status":"ok"})"));
  }
  ApiError error;
  error.status = 404;
  error.type = "not_found_error";
  error.message = "no route";
  session->respond(error_response(error));
}

// Checks that `bytes` are HTTP/1.1 responses back to back; only the last may be incomplete.
void check_responses(std::string_view bytes) {
  while (!bytes.empty()) {
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    size_t used = 0;
    while (!parser.is_done()) {
      beast::error_code ec;
      const size_t consumed = parser.put(net::buffer(bytes.data() + used, bytes.size() - used), ec);
      used += consumed;
      if (ec == http::error::need_more || (!ec && consumed == 0)) {
        if (consumed == 0) return;  // the rest never came: the client's close cut it short
        continue;
      }
      require(!ec);
    }
    bytes.remove_prefix(used);
  }
}

class Client {
 public:
  explicit Client(int fd) : fd_(fd) {}
  ~Client() { ::close(fd_); }

  // Sends what fits, reading what the session wrote whenever the socket is full.
  bool send(std::string_view bytes, net::io_context& io) {
    while (!bytes.empty()) {
      const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) {
        bytes.remove_prefix(static_cast<size_t>(sent));
        continue;
      }
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;  // session closed
      settle(io);
    }
    return true;
  }

  // Runs the session until it waits for the client, keeping the socket drained.
  void settle(net::io_context& io) {
    for (;;) {
      io.restart();
      const size_t handlers_run = io.poll();
      const size_t bytes_received = receive();
      if (handlers_run == 0 && bytes_received == 0) return;
    }
  }

  void close_sending() { ::shutdown(fd_, SHUT_WR); }
  const std::string& received() const { return received_; }

 private:
  size_t receive() {
    char chunk[16 * 1024];
    size_t total = 0;
    for (;;) {
      const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), MSG_DONTWAIT);
      if (got <= 0) return total;
      received_.append(chunk, static_cast<size_t>(got));
      total += static_cast<size_t>(got);
    }
  }

  int fd_;
  std::string received_;
};

// Where the client's writes end: `bytes` cut into the pieces that `choice` selects.
std::vector<std::string_view> delivery(std::string_view bytes, uint8_t choice) {
  std::vector<std::string_view> pieces;
  const unsigned mode = choice % 4;
  if (mode == 1) {
    const size_t split = std::min<size_t>(bytes.size(), (choice >> 2) * 8u);
    pieces = {bytes.substr(0, split), bytes.substr(split)};
  } else {
    const size_t piece = mode == 0 ? bytes.size() : mode == 2 ? 7 : 61;
    for (size_t at = 0; at < bytes.size(); at += piece) pieces.push_back(bytes.substr(at, piece));
  }
  return pieces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static net::io_context io;
  static ConnectionLimiter limiter(1 << 20);  // every input gets a place; the count is checked
  int fds[2];
  require(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  Client client(fds[1]);
  std::weak_ptr<HttpSession> watched;
  {
    tcp::socket socket(io);
    socket.assign(tcp::v4(), fds[0]);
    auto session = std::make_shared<HttpSession>(std::move(socket), fuzz_limits(), check_header,
                                                 handle, limiter.try_acquire());
    watched = session;
    session->start();
  }

  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  client.settle(io);
  for (const std::string_view piece : delivery(bytes, data[0])) {
    if (piece.empty()) continue;
    if (!client.send(piece, io)) break;
    client.settle(io);
  }
  client.close_sending();
  client.settle(io);

  require(watched.expired());  // a session the client has left must not linger
  require(limiter.open() == 0);  // ... nor hold its place under --max-connections
  check_responses(client.received());
  return 0;
}
