#include "common/utf8.h"

#include <cstdint>

namespace brisk {
namespace {

// Number of bytes a sequence starting with `lead` claims, or 0 for an invalid lead byte.
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

bool is_valid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const uint8_t lead = bytes[i];
    const int length = sequence_length(lead);
    if (length == 0 || i + length > size) return false;
    for (int k = 1; k < length; ++k) {
      if (!is_continuation(bytes[i + k])) return false;
    }
    if (length == 3) {
      const uint8_t second = bytes[i + 1];
      if (lead == 0xE0 && second < 0xA0) return false;  // overlong
      if (lead == 0xED && second > 0x9F) return false;  // UTF-16 surrogate
    } else if (length == 4) {
      const uint8_t second = bytes[i + 1];
      if (lead == 0xF0 && second < 0x90) return false;  // overlong
      if (lead == 0xF4 && second > 0x8F) return false;  // above U+10FFFF
    }
    i += length;
  }
  return true;
}

size_t complete_utf8_prefix_length(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t size = text.size();
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t back = 0;
  while (back < 4 && back < size && is_continuation(bytes[size - 1 - back])) ++back;
  if (back == size) return size;  // only continuation bytes: nothing to wait for
  const size_t lead_index = size - 1 - back;
  const int length = sequence_length(bytes[lead_index]);
  if (length > 1 && static_cast<size_t>(length) > back + 1) return lead_index;
  return size;
}

}  // namespace brisk
