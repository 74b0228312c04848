#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on

#include <chrono>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <nlohmann/json.hpp>

#include "bench/request_record.h"
#include "bench/sampling_options.h"
#include "bench/target_endpoint.h"

namespace brisk::bench {

namespace net = boost::asio;
namespace beast = boost::beast;

// One completion request, ready to send: the workload decides what, the client only how.
struct CompletionRequest {
  std::string route;  // full request target, e.g. "/v1/completions"
  std::string body;   // JSON body
  bool stream = true;
  int inputs = 0;  // an embeddings request: the inputs it sends (as many vectors must come back)
};

// The JSON body of a completion request. Streaming asks for a final `usage` event
// (stream_options.include_usage) so token counts come from the server, not from chunk counting;
// ignore_eos makes every request generate exactly `max_tokens` (vLLM, SGLang, llama.cpp, brisk).
// `sampling` adds only the parameters it has, then its extra body (which may replace ignore_eos).
std::string build_completion_body(ApiKind kind, const std::string& model, const std::string& prompt,
                                  int max_tokens, bool stream, const SamplingOptions& sampling);
// /v1/completions with the prompt as token ids (OpenAI's API takes a list of ints), so its
// length on the server is exact.
std::string build_token_prompt_body(const std::string& model, const std::vector<int>& prompt,
                                    int max_tokens, bool stream, const SamplingOptions& sampling);
// The same for /v1/chat/completions with a whole `messages` array (e.g. a multi-turn test case).
std::string build_messages_body(const std::string& model, const nlohmann::json& messages,
                                int max_tokens, bool stream, const SamplingOptions& sampling);

// /v1/embeddings with these inputs, as OpenAI's `input` list (non-streamed).
std::string build_embeddings_body(const std::string& model, const std::vector<std::string>& inputs);
// /v1/rerank: `query` against `documents` (every score asked for: no top_n).
std::string build_rerank_body(const std::string& model, const std::string& query,
                              const std::vector<std::string>& documents);

// One virtual user's HTTP/1.1 connection to the target. It sends one request at a time and keeps
// the connection alive between requests, as a real client pool would, so connection setup is not
// part of the latency of every request. Not thread-safe: use it from one coroutine.
class OpenAiConnection {
 public:
  OpenAiConnection(net::any_io_executor executor, TargetEndpoint target, ApiKind kind,
                   std::chrono::milliseconds timeout);

  // Sends `request` and reads the whole response, filling every field of `record` except
  // index/warmup/scheduled. Never throws for network or server failures: they become
  // record.error.
  net::awaitable<void> send(const CompletionRequest& request, RequestRecord& record);

  // Connects now unless connected, so that a later send() starts at once. A failure is left for
  // that send() to meet and report.
  net::awaitable<void> open();

 private:
  enum class Attempt { finished, unread };

  net::awaitable<bool> connect(TimePoint deadline, RequestRecord& record);
  // `unread`: the server reset the re-used connection with the request unread in it, so the
  // request may go again on a fresh connection; `finished` otherwise.
  net::awaitable<Attempt> exchange(const CompletionRequest& request, RequestRecord& record,
                                   TimePoint deadline, bool reused);
  // Closes the connection unless it can take a request now (see KeepAliveHabit): while the
  // server's habit is unknown, waits up to kHabitProbe after the last answer for a close.
  net::awaitable<void> drop_if_closing();
  // True when the kept-alive connection can take no request: the server closed or reset it, or
  // wrote something unasked. Looks without blocking or reading.
  bool peer_has_closed();
  void close();

  // A server that closes after its answers does so within microseconds of the last byte.
  static constexpr std::chrono::milliseconds kHabitProbe{5};
  TimePoint last_answer_end_{};

  TargetEndpoint target_;
  ApiKind kind_;
  std::chrono::milliseconds timeout_;
  net::ip::tcp::resolver resolver_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

}  // namespace brisk::bench
