#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace brisk {

// A size as users write one on a command line: "12GiB", "800MiB", "64KiB" (powers of 1024),
// "12GB", "800MB" (powers of 1000), "12G" or "800M" (read as GiB and MiB, as llama.cpp and
// Docker read them), plain bytes, or "75%" of `whole` (when the caller gives one). nullopt with
// `error` saying what a valid one looks like.
std::optional<uint64_t> parse_byte_size(std::string_view text, std::optional<uint64_t> whole,
                                        std::string& error);

}  // namespace brisk
