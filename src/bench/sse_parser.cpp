#include "bench/sse_parser.h"

namespace brisk::bench {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // second half of a "\r\n" already handled at the '\r'
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = (c == '\r');
      process_line(out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

void SseParser::process_line(std::vector<SseEvent>& out) {
  if (line_.empty()) {
    dispatch(out);
    return;
  }
  if (line_[0] == ':') return;  // comment, used by servers as keep-alive
  const std::string_view line(line_);
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);  // only one space is stripped
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
  // `id` and `retry` steer browser reconnection, which a benchmark never does: ignored.
}

void SseParser::dispatch(std::vector<SseEvent>& out) {
  // An event without data lines is not dispatched (per the spec), only reset.
  if (has_data_) {
    SseEvent event{std::move(event_), std::move(data_)};
    if (event.is_done()) saw_done_ = true;
    out.push_back(std::move(event));
  }
  data_.clear();
  event_.clear();
  has_data_ = false;
}

}  // namespace brisk::bench
