#pragma once

#include <cstddef>
#include <string_view>

namespace brisk {

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Length of the longest prefix of `text` that does not end inside a multi-byte character.
// Tokens can split a character; streamed text is held back until the character is complete.
size_t complete_utf8_prefix_length(std::string_view text);

}  // namespace brisk
