#include "sched/stop_matcher.h"

#include <gtest/gtest.h>

namespace brisk {

TEST(StopMatcher, PassesTextThroughWithoutStopStrings) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("Hello").releasable, "Hello");
  EXPECT_EQ(matcher.push(" world").releasable, " world");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, StopsBeforeAStopStringSplitAcrossPieces) {
  StopMatcher matcher({"END"});
  StopMatcher::Result first = matcher.push("abc E");
  EXPECT_EQ(first.releasable, "abc ");  // "E" might start "END"
  EXPECT_FALSE(first.stopped);
  StopMatcher::Result second = matcher.push("ND tail");
  EXPECT_TRUE(second.stopped);
  EXPECT_EQ(second.releasable, "");
}

TEST(StopMatcher, ReleasesHeldTextWhenItDoesNotComplete) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.push("xE").releasable, "x");
  EXPECT_EQ(matcher.push("Nx").releasable, "ENx");
}

TEST(StopMatcher, PicksTheEarliestOfSeveralStops) {
  StopMatcher matcher({"world", "lo"});
  StopMatcher::Result result = matcher.push("hello world");
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(result.releasable, "hel");
}

TEST(StopMatcher, NeverReleasesHalfACharacter) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("a\xE4\xBD").releasable, "a");
  EXPECT_EQ(matcher.push("\xA0").releasable, "\xE4\xBD\xA0");
}

TEST(StopMatcher, FlushReturnsHeldBackText) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("abST").releasable, "ab");
  EXPECT_EQ(matcher.flush(), "ST");
}

}  // namespace brisk
