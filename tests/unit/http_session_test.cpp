// HttpSession on a real loopback socket: limits, deadlines, keep-alive and the exception barrier.
#include "server/http_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

namespace brisk {
namespace {

using Seconds = std::chrono::duration<double>;

// A server of HttpSessions whose handler answers "ok", or throws for the path /throw.
class SessionServer {
 public:
  explicit SessionServer(HttpLimits limits, int max_connections = 1000)
      : limits_(limits), limiter_(max_connections), acceptor_(io_, {net::ip::make_address("127.0.0.1"), 0}) {
    accept_next();
    thread_ = std::thread([this] {
      for (;;) {
        try {
          io_.run();
          return;
        } catch (const std::exception&) {
          ++escaped_exceptions_;
        }
      }
    });
  }
  ~SessionServer() {
    io_.stop();
    thread_.join();
  }

  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  int escaped_exceptions() const { return escaped_exceptions_.load(); }
  const ConnectionLimiter& limiter() const { return limiter_; }

 private:
  void accept_next() {
    acceptor_.async_accept(net::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;
      auto slot = limiter_.try_acquire();
      const bool refused = slot == nullptr;
      auto session = std::make_shared<HttpSession>(
          std::move(socket), limits_, [](const auto&) { return std::optional<HttpResponse>(); },
          [](HttpRequest&& request, const std::shared_ptr<HttpSession>& session) {
            if (request.target() == "/throw") throw std::runtime_error("handler bug");
            HttpResponse response{http::status::ok, 11};
            response.body() = "ok";
            session->respond(std::move(response));
          },
          std::move(slot));
      if (refused) {
        ApiError error;
        error.status = 503;
        error.code = "too_many_connections";
        session->refuse(error_response(error));
      } else {
        session->start();
      }
      accept_next();
    });
  }

  HttpLimits limits_;
  ConnectionLimiter limiter_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<int> escaped_exceptions_{0};
};

// A blocking client connection.
class Client {
 public:
  explicit Client(unsigned short port) : socket_(io_) {
    socket_.connect({net::ip::make_address("127.0.0.1"), port});
  }

  void send(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }

  // Reads one response (status line, headers and a Content-Length body).
  HttpResponse read_response() {
    HttpResponse response;
    http::read(socket_, buffer_, response);
    return response;
  }

  // Seconds until the server closes the connection (reads and drops anything it sends).
  double seconds_until_closed(double at_most) {
    const auto started = std::chrono::steady_clock::now();
    socket_.non_blocking(true);
    char scratch[4096];
    while (Seconds(std::chrono::steady_clock::now() - started).count() < at_most) {
      beast::error_code ec;
      const size_t n = socket_.read_some(net::buffer(scratch), ec);
      if (ec == net::error::would_block) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (ec || n == 0) break;
    }
    return Seconds(std::chrono::steady_clock::now() - started).count();
  }

 private:
  net::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

HttpLimits short_limits() {
  HttpLimits limits;
  limits.read_timeout = std::chrono::seconds(2);
  limits.keep_alive_timeout = std::chrono::seconds(1);
  limits.write_timeout = std::chrono::seconds(5);
  return limits;
}

std::string error_code_of(const HttpResponse& response) {
  const auto body = nlohmann::json::parse(response.body(), nullptr, false);
  if (!body.is_object() || !body.contains("error")) return "(not an OpenAI error)";
  return body["error"].value("code", std::string("(no code)"));
}

TEST(HttpSession, AHandlerThatThrowsGetsA500AndTheServerGoesOn) {
  SessionServer server(short_limits());
  Client client(server.port());
  client.send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
  const HttpResponse response = client.read_response();
  EXPECT_EQ(response.result_int(), 500);
  EXPECT_EQ(error_code_of(response), "internal_error");
  EXPECT_EQ(server.escaped_exceptions(), 0);

  Client next(server.port());
  next.send("GET /fine HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(next.read_response().result_int(), 200);
}

TEST(HttpSession, HeadersOverTheLimitAre431) {
  SessionServer server(short_limits());
  Client client(server.port());
  client.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  const HttpResponse response = client.read_response();
  EXPECT_EQ(response.result_int(), 431);
  EXPECT_EQ(error_code_of(response), "request_header_fields_too_large");
}

TEST(HttpSession, BodiesOverTheLimitAre413) {
  HttpLimits limits = short_limits();
  limits.max_body_bytes = 100;
  SessionServer server(limits);
  Client client(server.port());
  client.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n");
  EXPECT_EQ(client.read_response().result_int(), 413);
}

// The request's deadline counts from its start: a slow header, a "100 Continue" and then
// silence must not buy the client a fresh read timeout.
TEST(HttpSession, HundredContinueDoesNotExtendTheRequestDeadline) {
  SessionServer server(short_limits());  // 2 s per request
  Client client(server.port());
  const auto started = std::chrono::steady_clock::now();
  const std::string header =
      "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n";
  for (size_t i = 0; i < header.size(); i += 8) {  // the header trickles in over ~1.5 s
    client.send(header.substr(i, 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 / (header.size() / 8 + 1)));
  }
  client.seconds_until_closed(10);
  const double total = Seconds(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(total, 3.0) << "closed " << total << " s after the first byte; the deadline is 2 s";
}

TEST(HttpSession, AnIdleKeepAliveConnectionIsClosedAfterItsOwnTimeout) {
  HttpLimits limits = short_limits();
  limits.read_timeout = std::chrono::seconds(30);  // so only the keep-alive timeout can close it
  SessionServer server(limits);
  Client client(server.port());
  client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(client.read_response().result_int(), 200);
  const double idle = client.seconds_until_closed(10);
  EXPECT_GT(idle, 0.5);
  EXPECT_LT(idle, 3.0);
}

TEST(HttpSession, PipelinedRequestsAreAllAnswered) {
  SessionServer server(short_limits());
  Client client(server.port());
  client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(client.read_response().result_int(), 200);
  EXPECT_EQ(client.read_response().result_int(), 200);
}

TEST(HttpSession, ConnectionsBeyondTheLimitGet503AndTheirPlaceIsReturned) {
  SessionServer server(short_limits(), /*max_connections=*/2);
  auto first = std::make_unique<Client>(server.port());
  Client second(server.port());
  first->send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(first->read_response().result_int(), 200);  // both are accepted and counted

  Client third(server.port());
  const HttpResponse refused = third.read_response();
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(error_code_of(refused), "too_many_connections");

  first.reset();  // a place is free again once the server sees the close
  for (int i = 0; i < 100 && server.limiter().open() >= 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Client fourth(server.port());
  fourth.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(fourth.read_response().result_int(), 200);
}

}  // namespace
}  // namespace brisk
