#include "common/utf8.h"

#include <gtest/gtest.h>

namespace brisk {

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"));
}

TEST(Utf8, RejectsMalformedText) {
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("a\x80z"));            // stray continuation
}

TEST(Utf8, HoldsBackAnIncompleteTrailingCharacter) {
  EXPECT_EQ(complete_utf8_prefix_length("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix_length("ab\xE4\xBD"), 2u);
  EXPECT_EQ(complete_utf8_prefix_length("ab\xE4\xBD\xA0"), 5u);
  EXPECT_EQ(complete_utf8_prefix_length("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(complete_utf8_prefix_length(""), 0u);
}

}  // namespace brisk
