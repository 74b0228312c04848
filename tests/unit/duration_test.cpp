#include "common/duration.h"

#include <gtest/gtest.h>

namespace brisk {
namespace {

double seconds(const char* text) {
  std::string error;
  const auto value = parse_duration_s(text, error);
  EXPECT_TRUE(value) << text << ": " << error;
  return value.value_or(-1);
}

TEST(Duration, ReadsWhatUsersWrite) {
  EXPECT_DOUBLE_EQ(seconds("90"), 90);
  EXPECT_DOUBLE_EQ(seconds("90s"), 90);
  EXPECT_DOUBLE_EQ(seconds("2.5"), 2.5);
  EXPECT_DOUBLE_EQ(seconds("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(seconds("20m"), 1200);
  EXPECT_DOUBLE_EQ(seconds("1.5m"), 90);
  EXPECT_DOUBLE_EQ(seconds("1h"), 3600);
  EXPECT_DOUBLE_EQ(seconds("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(seconds("2m30s"), 150);
}

TEST(Duration, RefusesWhatIsNotOneAndSaysWhatIs) {
  for (const char* text : {"", "m", "20x", "1h30", "-5s", "1..2s", "5 s"}) {
    std::string error;
    EXPECT_FALSE(parse_duration_s(text, error)) << text;
    EXPECT_NE(error.find("20m"), std::string::npos) << error;
  }
}

TEST(Duration, FormatsBackToTheShortestText) {
  EXPECT_EQ(format_duration(1200), "20m");
  EXPECT_EQ(format_duration(5400), "1h30m");
  EXPECT_EQ(format_duration(90), "1m30s");
  EXPECT_EQ(format_duration(0.25), "250ms");
  std::string error;
  EXPECT_DOUBLE_EQ(*parse_duration_s(format_duration(3725), error), 3725);
}

}  // namespace
}  // namespace brisk
