#include "sched/stop_matcher.h"

#include <algorithm>

#include "common/utf8.h"

namespace brisk {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  pending_.append(piece);
  Result result;
  size_t earliest_stop = std::string::npos;
  for (const std::string& stop : stop_strings_) {
    earliest_stop = std::min(earliest_stop, pending_.find(stop));
  }
  if (earliest_stop != std::string::npos) {
    result.releasable = pending_.substr(0, earliest_stop);
    result.stopped = true;
    pending_.clear();
    return result;
  }
  const size_t keep = held_back_length();
  const size_t release =
      complete_utf8_prefix_length(std::string_view(pending_).substr(0, pending_.size() - keep));
  result.releasable = pending_.substr(0, release);
  pending_.erase(0, release);
  return result;
}

std::string StopMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

// The longest suffix of pending_ that is a proper prefix of some stop string.
size_t StopMatcher::held_back_length() const {
  size_t longest = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > longest; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace brisk
