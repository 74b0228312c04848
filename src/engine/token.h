#pragma once

#include <cstdint>
#include <vector>

namespace brisk {

// Same width as llama_token; kept here so rooms above the engine need not include llama.h.
using Token = int32_t;
using TokenList = std::vector<Token>;

}  // namespace brisk
