#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"

namespace brisk::bench {

// Why a request did not succeed. One kind per request, so counts by kind add up to `failed`.
enum class RequestError {
  none,
  connect_refused,  // nobody listening (or DNS failed): the target is down, not slow
  timeout,          // the per-request deadline passed before the response completed
  http_429,         // the server shed load on purpose; separate from other 4xx
  http_4xx,         // our request was rejected: usually a wrong model name or a bad flag
  http_5xx,
  malformed_sse,  // the stream could not be parsed, or ended without `data: [DONE]`
  stream_error,   // the server sent an `error` object inside a 200 stream
  disconnected,   // the connection closed or reset in the middle of a response
  abandoned,      // in flight when its run was abandoned (RunOptions::abandon_if): dropped unread
};

std::string_view error_name(RequestError error);

// Everything measured about one request. Times come from brisk::Clock on the client; a
// default-constructed TimePoint means "did not happen".
struct RequestRecord {
  int index = 0;  // position in the run, counting warmup requests first
  bool warmup = false;
  bool streamed = true;
  // Requests of this run in flight (started, not yet ended) when this one started, itself
  // included: the concurrency the request actually met, in closed and open loop alike.
  int in_flight_at_send = 0;
  // It opened its own connection (its setup came before `sent`): none in a closed-loop run or a
  // burst, whose connections are all open before the clock starts; in a Poisson run, each time
  // more requests were in flight than ever before.
  bool new_connection = false;
  // A session run's conversation and turn (both from 0); -1 in other runs.
  int session = -1;
  int turn = -1;

  TimePoint scheduled{};  // when the load generator wanted to send it
  // The HTTP phases of the exchange (requests.csv's connect_ms ... receive_ms): connecting
  // (only a request that opened its connection), writing the request, waiting for the first
  // byte of the answer, reading the rest.
  TimePoint connect_started{};  // a connection was opened for it from here...
  TimePoint sent{};             // ...to here, when the request was handed to the socket
  TimePoint written{};          // its last byte was written
  TimePoint first_byte{};       // the answer's status line and headers arrived
  TimePoint end{};              // when the response completed or failed
  // Arrival time of every SSE event carrying non-empty text; the first one is "first token".
  std::vector<TimePoint> content_chunks;

  // Token counts reported by the server's `usage`; -1 when the server did not report them.
  int prompt_tokens = -1;
  int completion_tokens = -1;
  // Prompt tokens the server reused from its cache (`usage.prompt_tokens_details.cached_tokens`,
  // or llama-server's `timings.cache_n`); -1 when it did not say.
  int cached_prompt_tokens = -1;
  // An embeddings request: the inputs it sent, and the vectors that came back (-1: none read).
  int embedding_inputs = 0;
  int embeddings = -1;

  // What the server measured itself, when it reports it: brisk's `brisk_timings` (queue and
  // prefill) or llama-server's `timings` (prompt processing only, no queue); -1 when absent.
  // Client TTFT minus server TTFT is the time spent outside the server's engine: network,
  // HTTP frontend, tokenization (brisk doctor's attribution).
  double server_ttft_ms = -1;
  double server_queue_ms = -1;

  // The answer's visible text (content, not reasoning), kept only when `keep_answer` is set
  // before sending: a session resends it in its next turn's history.
  bool keep_answer = false;
  std::string answer;

  int http_status = 0;
  // A refusal's Retry-After header (429, 503), in seconds; -1 when it had none. A closed-loop
  // user waits that long before its next request (RunOptions::honour_retry_after).
  double retry_after_s = -1;
  RequestError error = RequestError::none;
  std::string error_detail;  // first line of what went wrong, for the log and requests.csv

  bool ok() const { return error == RequestError::none; }
  // Marks the request failed. The first cause is kept: later errors are its consequences.
  void fail(RequestError cause, std::string detail);
  bool has_first_content() const { return !content_chunks.empty(); }
  TimePoint first_content() const {
    return content_chunks.empty() ? TimePoint{} : content_chunks[0];
  }
};

}  // namespace brisk::bench
