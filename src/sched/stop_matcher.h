#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace brisk {

// Turns a stream of decoded pieces into text that is safe to send: it never releases bytes
// that might turn out to start a stop string, nor half of a UTF-8 character.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string releasable;  // text that can be sent now
    bool stopped = false;    // a stop string was found; text after it is dropped
  };

  Result push(std::string_view piece);
  // End of generation: whatever is held back is released.
  std::string flush();

 private:
  size_t held_back_length() const;

  std::vector<std::string> stop_strings_;
  std::string pending_;
};

}  // namespace brisk
