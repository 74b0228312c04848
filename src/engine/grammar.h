#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/token_constraint.h"

struct llama_sampler;
struct llama_vocab;

namespace brisk {

// A request's output format, as the client asked for it.
struct GrammarRequest {
  enum class Kind {
    json_schema,  // response_format json_schema (and json_object, as {"type": "object"})
    gbnf,         // llama.cpp's `grammar` field
  };
  Kind kind = Kind::json_schema;
  std::string text;  // the schema as JSON text, or the GBNF rules
  // A lazy grammar (a chat template's tool calls under tool_choice auto) allows anything until
  // the output matches one of these regular expressions (the text from the match on is then fed
  // to the grammar) or a trigger token comes; from there on it constrains. Not lazy when both
  // are empty.
  std::vector<std::string> trigger_patterns{};
  std::vector<Token> trigger_tokens{};

  bool lazy() const { return !trigger_patterns.empty() || !trigger_tokens.empty(); }
};

struct DecodedVocabulary;

// Compiles output formats into llama.cpp grammars for one vocabulary: JSON schemas through
// llama.cpp's converter (common/json-schema-to-grammar), GBNF through its parser. The most
// recently used compiled grammars are kept, so a schema a client sends with every request is
// converted and parsed once; each request then gets its own copy of the grammar's state.
// Safe to call from any thread.
class GrammarCompiler {
 public:
  GrammarCompiler(const llama_vocab* vocab, size_t capacity);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // A fresh constraint at the grammar's start, or null with `error` saying what is wrong with
  // the request (the schema feature llama.cpp does not support, a GBNF syntax error).
  std::shared_ptr<TokenConstraint> compile(const GrammarRequest& request, std::string* error);


  size_t hits() const;
  size_t misses() const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> find_or_compile(const GrammarRequest& request,
                                                  std::string* error);

  const llama_vocab* vocab_;
  const size_t capacity_;
  // The vocabulary's pieces decoded once, at the first compiled grammar (shared by them all).
  std::once_flag decoded_once_;
  std::shared_ptr<const DecodedVocabulary> decoded_;
  mutable std::mutex mutex_;
  std::list<std::string> recency_;  // keys, most recently used first
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<const Compiled>, std::list<std::string>::iterator>>
      compiled_;
  size_t hits_ = 0;
  size_t misses_ = 0;
};

}  // namespace brisk
