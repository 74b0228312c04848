// Sizes as --memory-budget reads them.
#include "common/byte_size.h"

#include <gtest/gtest.h>

namespace brisk {
namespace {

std::optional<uint64_t> parse(std::string_view text, std::optional<uint64_t> whole = {}) {
  std::string error;
  auto bytes = parse_byte_size(text, whole, error);
  EXPECT_EQ(bytes.has_value(), error.empty()) << text;
  return bytes;
}

TEST(ByteSize, ReadsBinaryAndDecimalUnitsAndShares) {
  EXPECT_EQ(parse("12GiB"), 12ull << 30);
  EXPECT_EQ(parse("12G"), 12ull << 30);
  EXPECT_EQ(parse("800MiB"), 800ull << 20);
  EXPECT_EQ(parse("800mib"), 800ull << 20);
  EXPECT_EQ(parse("16GB"), 16000000000ull);
  EXPECT_EQ(parse("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse("4096"), 4096u);
  EXPECT_EQ(parse("75%", 1000), 750u);
}

TEST(ByteSize, RefusesWhatIsNoSize) {
  std::string error;
  for (const char* text : {"", "GiB", "12 parsecs", "-1GiB", "0", "75%", "nan"}) {
    EXPECT_FALSE(parse_byte_size(text, std::nullopt, error)) << text;
    EXPECT_NE(error.find("is no size"), std::string::npos) << text;
  }
  EXPECT_FALSE(parse_byte_size("150%", 1000, error));
  EXPECT_NE(error.find("75%"), std::string::npos);
}

}  // namespace
}  // namespace brisk
