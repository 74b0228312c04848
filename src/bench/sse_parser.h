#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace brisk::bench {

// One dispatched Server-Sent Event. Only `data` matters for OpenAI streams; `event` is kept
// because some servers name their error events.
struct SseEvent {
  std::string event;  // the `event:` field, empty when absent
  std::string data;   // all `data:` lines of the event joined with '\n'
  bool is_done() const { return data == "[DONE]"; }
};

// Incremental parser for the text/event-stream format (WHATWG HTML §9.2). Bytes arrive in
// whatever pieces the network delivers, so a line, or even a "\r\n" pair, may be split across
// calls; the parser keeps the unfinished line and resumes.
class SseParser {
 public:
  // Consumes `bytes` and returns the events they completed, in order.
  std::vector<SseEvent> feed(std::string_view bytes);

  // True once a `data: [DONE]` event was dispatched.
  bool saw_done() const { return saw_done_; }

  // True when bytes of an unfinished event are buffered: a stream that ends here was cut off.
  bool has_partial_event() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  void process_line(std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);

  std::string line_;
  // The previous byte was '\r': a '\n' arriving next (maybe in the next call) ends the same line.
  bool after_cr_ = false;
  std::string data_;
  bool has_data_ = false;
  std::string event_;
  bool saw_done_ = false;
};

}  // namespace brisk::bench
