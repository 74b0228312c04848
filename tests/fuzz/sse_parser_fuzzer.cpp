// Fuzzes brisk bench's text/event-stream parser (SseParser) with whatever a server may send.
// Beyond "no crash": the network splits a stream anywhere, so feeding it in pieces (of a size the
// input's first byte picks, 1 to 256 bytes) must give exactly the events, [DONE] and partial state
// that feeding it whole gives.
#include <cstdlib>
#include <string_view>
#include <vector>

#include "bench/sse_parser.h"

namespace {

using brisk::bench::SseEvent;
using brisk::bench::SseParser;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  SseParser whole;
  const std::vector<SseEvent> expected = whole.feed(stream);

  SseParser pieces;
  std::vector<SseEvent> events;
  for (size_t at = 0; at < stream.size(); at += piece) {
    for (SseEvent& event : pieces.feed(stream.substr(at, piece)))
      events.push_back(std::move(event));
  }

  require(events.size() == expected.size());
  bool saw_done = false;
  for (size_t i = 0; i < events.size(); ++i) {
    require(events[i].event == expected[i].event && events[i].data == expected[i].data);
    saw_done = saw_done || expected[i].is_done();
  }
  require(pieces.saw_done() == whole.saw_done() && whole.saw_done() == saw_done);
  require(pieces.has_partial_event() == whole.has_partial_event());
  return 0;
}
