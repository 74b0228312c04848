// Fuzzes how brisk bench reads a completion server's answer, for chat and completions alike:
// the input as an event stream (SseParser, then read_stream_event for each event, as
// OpenAiConnection does) and as a whole non-streamed body (read_response_body). A server may send
// anything; the worst it may cause is a failed record that says why.
#include <cstdlib>
#include <string_view>

#include "bench/completion_response.h"
#include "bench/sse_parser.h"

namespace {

using namespace brisk::bench;

void require(bool condition) {
  if (!condition) std::abort();
}

// What the server sent can only make the record malformed or a stream error.
void check_record(const RequestRecord& record) {
  require(record.ok() || record.error == RequestError::malformed_sse ||
          record.error == RequestError::stream_error);
}

void read_as_stream(std::string_view bytes, ApiKind kind) {
  RequestRecord record;
  SseParser parser;
  size_t events = 0;
  for (const SseEvent& event : parser.feed(bytes)) {
    if (event.is_done() || !record.ok()) continue;
    read_stream_event(event.data, kind, brisk::Clock::now(), record);
    ++events;
  }
  require(record.content_chunks.size() <= events);
  check_record(record);
}

void read_as_body(std::string_view bytes, ApiKind kind) {
  RequestRecord record;
  read_response_body(bytes, kind, record);
  require(record.content_chunks.empty());
  check_record(record);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const ApiKind kind : {ApiKind::chat, ApiKind::completions}) {
    read_as_stream(bytes, kind);
    read_as_body(bytes, kind);
  }
  return 0;
}
