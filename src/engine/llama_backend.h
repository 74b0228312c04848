#pragma once

#include <string>
#include <string_view>

#include "engine/token.h"

struct llama_vocab;

namespace brisk {

// Initialises llama.cpp's backends once per process and routes its log through spdlog (its
// per-tensor load chatter at debug level; warnings and errors at theirs).
void init_llama_backend_once();

// A vocabulary's tokenizer, as every model in brisk uses it. `parse_special`: text such as
// "<start_of_turn>" becomes its special token, as llama-server does with templated prompts.
TokenList tokenize_text(const llama_vocab* vocab, std::string_view text, bool add_special,
                        bool parse_special);
std::string token_text(const llama_vocab* vocab, Token token);

}  // namespace brisk
