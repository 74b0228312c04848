#include "bench/sse_parser.h"

#include <gtest/gtest.h>

namespace brisk::bench {
namespace {

// A stream mixing every line ending, a comment, a named event, multi-line data and [DONE].
constexpr std::string_view kSample =
    ": keep-alive comment\r\n"
    "data: {\"a\":1}\r\n"
    "\r\n"
    "data:no-space\n"
    "\n"
    "event: error\n"
    "data: line one\n"
    "data:  two leading spaces\n"
    "id: 7\n"
    "\n"
    "data: cr only\r"
    "\r"
    "data: [DONE]\r\n"
    "\r\n";

std::vector<SseEvent> expected_events() {
  return {{"", "{\"a\":1}"},
          {"", "no-space"},
          {"error", "line one\n two leading spaces"},
          {"", "cr only"},
          {"", "[DONE]"}};
}

void expect_same(const std::vector<SseEvent>& got, const std::vector<SseEvent>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].event, want[i].event) << "event " << i;
    EXPECT_EQ(got[i].data, want[i].data) << "event " << i;
  }
}

TEST(SseParser, ParsesWholeStream) {
  SseParser parser;
  expect_same(parser.feed(kSample), expected_events());
  EXPECT_TRUE(parser.saw_done());
  EXPECT_FALSE(parser.has_partial_event());
}

TEST(SseParser, SplitAtEveryByteBoundaryGivesTheSameEvents) {
  for (size_t split = 0; split <= kSample.size(); ++split) {
    SseParser parser;
    std::vector<SseEvent> events = parser.feed(kSample.substr(0, split));
    for (SseEvent& event : parser.feed(kSample.substr(split))) events.push_back(std::move(event));
    SCOPED_TRACE("split at byte " + std::to_string(split));
    expect_same(events, expected_events());
    EXPECT_TRUE(parser.saw_done());
  }
}

TEST(SseParser, OneByteAtATime) {
  SseParser parser;
  std::vector<SseEvent> events;
  for (const char c : kSample) {
    for (SseEvent& event : parser.feed(std::string_view(&c, 1))) events.push_back(std::move(event));
  }
  expect_same(events, expected_events());
}

TEST(SseParser, CrLfSplitAcrossChunksIsOneLineEnding) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: x\r").empty());
  // If the '\n' were read as a second (blank) line, the event would be dispatched here.
  EXPECT_TRUE(parser.feed("\n").empty());
  expect_same(parser.feed("\r\n"), {{"", "x"}});
}

TEST(SseParser, CommentsAndEmptyEventsAreNotDispatched) {
  SseParser parser;
  EXPECT_TRUE(parser.feed(": ping\n\n: ping\n\nevent: x\n\n").empty());
  EXPECT_FALSE(parser.saw_done());
}

TEST(SseParser, UnterminatedEventIsPartial) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: {\"choices\"").empty());
  EXPECT_TRUE(parser.has_partial_event());
  EXPECT_TRUE(parser.feed(":[]}\n").empty());
  EXPECT_TRUE(parser.has_partial_event());  // data buffered, blank line still missing
  expect_same(parser.feed("\n"), {{"", "{\"choices\":[]}"}});
  EXPECT_FALSE(parser.has_partial_event());
}

TEST(SseParser, DoneIsOnlyTheExactPayload) {
  SseParser parser;
  parser.feed("data: [DONE] \n\n");
  EXPECT_FALSE(parser.saw_done());
  parser.feed("data: [DONE]\n\n");
  EXPECT_TRUE(parser.saw_done());
}

}  // namespace
}  // namespace brisk::bench
