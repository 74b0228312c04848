#include "engine/grammar.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdint>
#include <exception>
#include <optional>
#include <string_view>
#include <limits>
#include <vector>

#include "llama.h"

// llama.cpp's grammar engine, through the internal header of the pinned source (an installed
// llama.cpp does not ship it: that build refuses output formats by name).
#ifdef BRISK_HAVE_LLAMA_GRAMMAR
#include "llama-grammar.h"
#endif

#ifdef BRISK_HAVE_LLAMA_COMMON
#include "json-schema-to-grammar.h"
#include "json.h"
#endif

namespace brisk {

#ifdef BRISK_HAVE_LLAMA_GRAMMAR

// Every token's piece decoded to code points once per vocabulary (llama.cpp's grammar decodes
// every candidate's piece on every call), and the tokens indexed by their first code point: where
// the grammar expects one of a few characters (':' after a key, a digit, '"'), only the tokens
// starting with one of them are checked, not the whole vocabulary.
struct DecodedVocabulary {
  enum Kind : uint8_t { text, end_of_generation, never };
  std::vector<uint32_t> code_points;  // each token's code points, each list ended by a 0
  std::vector<size_t> start;          // token -> its list in code_points
  std::vector<llama_partial_utf8> partial;  // token -> a character left incomplete at its end
  std::vector<Kind> kind;
  std::vector<std::pair<uint32_t, Token>> by_first;  // text tokens by first code point
  std::vector<Token> no_whole_character;  // text tokens that complete no character

  explicit DecodedVocabulary(const llama_vocab* vocab) {
    const int count = llama_vocab_n_tokens(vocab);
    start.resize(size_t(count));
    partial.resize(size_t(count));
    kind.resize(size_t(count));
    std::vector<char> buffer(256);
    for (Token token = 0; token < count; ++token) {
      int length = llama_token_to_piece(vocab, token, buffer.data(), int(buffer.size()), 0, true);
      if (length < 0) {
        buffer.resize(size_t(-length));
        length = llama_token_to_piece(vocab, token, buffer.data(), int(buffer.size()), 0, true);
      }
      // The grammar reads a piece as a C string, as llama.cpp's does.
      const std::string piece(buffer.data(), size_t(std::max(length, 0)));
      start[size_t(token)] = code_points.size();
      if (llama_vocab_is_eog(vocab, token)) {
        kind[size_t(token)] = end_of_generation;
      } else if (piece.empty() || piece[0] == 0) {
        kind[size_t(token)] = never;
      } else {
        kind[size_t(token)] = text;
      }
      partial[size_t(token)] = decode(piece.c_str());
      if (kind[size_t(token)] != text) continue;
      const uint32_t first = code_points[start[size_t(token)]];
      if (first == 0) {
        no_whole_character.push_back(token);
      } else {
        by_first.emplace_back(first, token);
      }
    }
    std::sort(by_first.begin(), by_first.end());
  }

  // UTF-8 to code points from a fresh start, as llama.cpp's grammar decodes a piece (an invalid
  // sequence ends the list and leaves n_remain -1).
  llama_partial_utf8 decode(const char* pos) {
    static const int lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    const size_t first = code_points.size();
    uint32_t value = 0;
    int n_remain = 0;
    while (*pos != 0) {
      const uint8_t first_byte = static_cast<uint8_t>(*pos);
      n_remain = lookup[first_byte >> 4] - 1;
      if (n_remain < 0) {
        code_points.resize(first);
        code_points.push_back(0);
        return {0, n_remain};
      }
      const uint8_t mask = static_cast<uint8_t>((1 << (7 - n_remain)) - 1);
      value = first_byte & mask;
      ++pos;
      while (*pos != 0 && n_remain > 0) {
        value = (value << 6) + (static_cast<uint8_t>(*pos) & 0x3F);
        ++pos;
        --n_remain;
      }
      if (n_remain == 0) code_points.push_back(value);
    }
    code_points.push_back(0);
    return {value, n_remain};
  }
};

namespace {

using Grammar = std::unique_ptr<llama_grammar, decltype(&llama_grammar_free_impl)>;

// One sequence's position in a grammar: llama.cpp's grammar state and its rules, checked
// against pre-decoded pieces. After a token that ends inside a UTF-8 character (the state then
// depends on those bytes) llama.cpp's own apply decodes the pieces, as it always does.
class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(Grammar grammar, std::shared_ptr<const DecodedVocabulary> vocabulary)
      : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}

  bool allows(Token token) override {
    if (token < 0 || size_t(token) >= vocabulary_->kind.size()) return false;
    if (grammar_->awaiting_trigger) return true;  // a lazy grammar not started yet
    if (mid_character()) {
      llama_token_data candidate{token, 0.0f, 0.0f};
      llama_token_data_array one{&candidate, 1, -1, false};
      llama_grammar_apply_impl(*grammar_, &one);
      return std::isfinite(candidate.logit);
    }
    switch (vocabulary_->kind[size_t(token)]) {
      case DecodedVocabulary::end_of_generation:
        return allows_end();
      case DecodedVocabulary::never:
        return false;
      case DecodedVocabulary::text:
        break;
    }
    candidates_.clear();
    add_candidate(token);
    return !candidates_.empty() && rejects().empty();
  }

  int mask(float* logits, int vocabulary_size) override {
    const size_t count = std::min(size_t(vocabulary_size), vocabulary_->kind.size());
    if (grammar_->awaiting_trigger) return int(count);
    if (mid_character()) return mask_with_llama_apply(logits, count);
    allowed_.assign(count, 0);
    candidates_.clear();
    if (!grammar_->stacks.empty()) {
      if (first_characters()) {
        for (const auto& [low, high] : ranges_) {
          auto it = std::lower_bound(vocabulary_->by_first.begin(), vocabulary_->by_first.end(),
                                     std::make_pair(low, Token(0)));
          for (; it != vocabulary_->by_first.end() && it->first <= high; ++it) {
            if (!allowed_[size_t(it->second)]) {
              allowed_[size_t(it->second)] = 1;  // marks it queued, so ranges that overlap
              add_candidate(it->second);           // queue it once
            }
          }
        }
        for (Token token : vocabulary_->no_whole_character) add_candidate(token);
      } else {
        for (size_t token = 0; token < count; ++token) {
          if (vocabulary_->kind[token] == DecodedVocabulary::text) add_candidate(Token(token));
        }
      }
    }
    for (const llama_grammar_candidate& candidate : candidates_) allowed_[candidate.index] = 1;
    if (!candidates_.empty()) {
      for (const llama_grammar_candidate& reject : rejects()) allowed_[reject.index] = 0;
    }
    const bool end = allows_end();
    int allowed = 0;
    for (size_t token = 0; token < count; ++token) {
      const bool ok = vocabulary_->kind[token] == DecodedVocabulary::end_of_generation
                          ? end
                          : allowed_[token] != 0;
      if (ok) {
        ++allowed;
      } else {
        logits[token] = -std::numeric_limits<float>::infinity();
      }
    }
    for (size_t token = count; token < size_t(vocabulary_size); ++token) {
      logits[token] = -std::numeric_limits<float>::infinity();
    }
    return allowed;
  }

  // While a lazy grammar waits, llama.cpp's accept collects the text and starts the grammar at
  // a trigger, feeding it the text from the trigger on (it throws when the grammar refuses it).
  void accept(Token token) override { llama_grammar_accept_impl(*grammar_, token); }

  // Whether every way on begins with one of a few characters (mask() then checks only the
  // tokens that begin with them), or with nothing at all.
  bool starts_narrow() { return grammar_->stacks.empty() || first_characters(); }
  size_t token_count() const { return vocabulary_->kind.size(); }

 private:
  bool mid_character() const { return grammar_->partial_utf8.n_remain != 0; }

  bool allows_end() const {
    return std::any_of(grammar_->stacks.begin(), grammar_->stacks.end(),
                       [](const llama_grammar_stack& stack) { return stack.empty(); });
  }

  void add_candidate(Token token) {
    const size_t t = size_t(token);
    candidates_.push_back({t, vocabulary_->code_points.data() + vocabulary_->start[t],
                           vocabulary_->partial[t], token});
  }

  // The candidates every stack rejects (llama.cpp's llama_grammar_reject_candidates).
  llama_grammar_candidates rejects() const {
    const llama_grammar_stacks& stacks = grammar_->stacks;
    if (stacks.empty()) return candidates_;
    auto rejected = llama_grammar_reject_candidates_for_stack(grammar_->rules, stacks.front(),
                                                              candidates_);
    for (size_t i = 1; i < stacks.size() && !rejected.empty(); ++i) {
      rejected = llama_grammar_reject_candidates_for_stack(grammar_->rules, stacks[i], rejected);
    }
    return rejected;
  }

  // The code point ranges a token's first character must fall in for any stack to go on, into
  // ranges_; false when a stack accepts more than ranges can say cheaply (a negated class as in
  // a JSON string, any character, a token rule): then every token is a candidate.
  bool first_characters() {
    ranges_.clear();
    for (const llama_grammar_stack& stack : grammar_->stacks) {
      if (stack.empty()) continue;  // complete: allows only the end of generation
      const llama_grammar_element* pos = stack.back();
      if (pos->type != LLAMA_GRETYPE_CHAR) return false;
      do {
        if (pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER) {
          ranges_.emplace_back(pos->value, pos[1].value);
          pos += 2;
        } else {
          ranges_.emplace_back(pos->value, pos->value);
          pos += 1;
        }
      } while (pos->type == LLAMA_GRETYPE_CHAR_ALT);
    }
    return true;
  }

  int mask_with_llama_apply(float* logits, size_t count) {
    data_.resize(count);
    for (size_t i = 0; i < count; ++i) data_[i] = {Token(i), logits[i], 0.0f};
    llama_token_data_array all{data_.data(), data_.size(), -1, false};
    llama_grammar_apply_impl(*grammar_, &all);
    int allowed = 0;
    for (size_t i = 0; i < count; ++i) {
      if (std::isinf(data_[i].logit) && data_[i].logit < 0) {
        logits[i] = -std::numeric_limits<float>::infinity();
      } else {
        ++allowed;
      }
    }
    return allowed;
  }

  Grammar grammar_;
  std::shared_ptr<const DecodedVocabulary> vocabulary_;
  llama_grammar_candidates candidates_;
  std::vector<uint8_t> allowed_;
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
  std::vector<llama_token_data> data_;
};

// The first repetition `{m,n}` of the GBNF text whose minimum is above its maximum, as written
// ("" when none). llama.cpp's parser expands `x{m,n}` into n - m optional copies, counted
// unsigned: with m > n it allocates rules until the process is killed. A schema gets there too
// (minItems above maxItems, minLength above maxLength), so every grammar is checked before it.
std::string inverted_repetition(std::string_view gbnf) {
  const auto number = [&](size_t& i) {
    while (i < gbnf.size() && (gbnf[i] == ' ' || gbnf[i] == '\t')) ++i;
    const size_t start = i;
    uint64_t value = 0;
    for (; i < gbnf.size() && std::isdigit(static_cast<unsigned char>(gbnf[i])); ++i) {
      value = std::min<uint64_t>(value * 10 + uint64_t(gbnf[i] - '0'), UINT32_MAX);
    }
    while (i < gbnf.size() && (gbnf[i] == ' ' || gbnf[i] == '\t')) ++i;
    return i == start ? std::optional<uint64_t>() : std::optional<uint64_t>(value);
  };
  for (size_t i = 0; i < gbnf.size(); ++i) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {  // a literal or a character class: skip it, escapes and all
      const char end = c == '"' ? '"' : ']';
      for (++i; i < gbnf.size() && gbnf[i] != end; ++i) {
        if (gbnf[i] == '\\') ++i;
      }
    } else if (c == '#') {  // a comment, to the end of its line
      while (i < gbnf.size() && gbnf[i] != '\n') ++i;
    } else if (c == '<') {  // a token reference: <[id]> or <text>
      while (i < gbnf.size() && gbnf[i] != '>') ++i;
    } else if (c == '{') {
      const size_t start = i;
      size_t j = i + 1;
      const auto low = number(j);
      if (!low || j >= gbnf.size() || gbnf[j] != ',') continue;
      ++j;
      const auto high = number(j);
      if (high && *high < *low && j < gbnf.size() && gbnf[j] == '}') {
        return std::string(gbnf.substr(start, j + 1 - start));
      }
    }
  }
  return {};
}

// Whether a fresh grammar rejects every token of the vocabulary as its first. Costs a logit
// vector the vocabulary's size, so it is asked only of grammars that start narrow.
bool start_allows_no_token(GrammarConstraint& start) {
  std::vector<float> logits(start.token_count(), 0.0f);
  return start.mask(logits.data(), int(logits.size())) == 0;
}

#ifdef BRISK_HAVE_LLAMA_COMMON
// llama.cpp's converter names what it cannot do in its exception; its parser of the schema's
// JSON, the position of a syntax error.
std::string schema_to_gbnf(const std::string& schema, std::string* error) {
  try {
    return json_schema_to_grammar(common_json::parse(schema));
  } catch (const std::exception& e) {
    *error = std::string("the JSON schema cannot be used: ") + e.what();
    return {};
  }
}
#endif

}  // namespace

// A parsed grammar at its start; requests clone it.
struct GrammarCompiler::Compiled {
  Grammar prototype{nullptr, llama_grammar_free_impl};
};

GrammarCompiler::GrammarCompiler(const llama_vocab* vocab, size_t capacity)
    : vocab_(vocab), capacity_(capacity == 0 ? 1 : capacity) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<TokenConstraint> GrammarCompiler::compile(const GrammarRequest& request,
                                                          std::string* error) {
  auto compiled = find_or_compile(request, error);
  if (!compiled) return nullptr;
  Grammar copy(llama_grammar_clone_impl(*compiled->prototype), llama_grammar_free_impl);
  return std::make_shared<GrammarConstraint>(std::move(copy), decoded_);
}

std::shared_ptr<const GrammarCompiler::Compiled> GrammarCompiler::find_or_compile(
    const GrammarRequest& request, std::string* error) {
  std::string key = (request.kind == GrammarRequest::Kind::gbnf ? "g:" : "j:") + request.text;
  for (const std::string& pattern : request.trigger_patterns) key += "\n\x01" + pattern;
  for (const Token token : request.trigger_tokens) key += "\n\x02" + std::to_string(token);
  {
    std::lock_guard lock(mutex_);
    auto it = compiled_.find(key);
    if (it != compiled_.end()) {
      recency_.splice(recency_.begin(), recency_, it->second.second);
      ++hits_;
      return it->second.first;
    }
    ++misses_;
  }
  // Compiled outside the lock: a large schema must not hold up requests with cached ones.
  std::string gbnf = request.text;
  if (request.kind == GrammarRequest::Kind::json_schema) {
#ifdef BRISK_HAVE_LLAMA_COMMON
    gbnf = schema_to_gbnf(request.text, error);
    if (gbnf.empty()) return nullptr;
#else
    *error = "JSON schemas need llama.cpp's common library, which this build lacks";
    return nullptr;
#endif
  }
  if (const std::string bad = inverted_repetition(gbnf); !bad.empty()) {
    *error = request.kind == GrammarRequest::Kind::gbnf
                 ? "the grammar repeats " + bad + ": its minimum is above its maximum"
                 : "the JSON schema's bounds are inverted: a minimum (minItems, minLength, "
                   "minProperties) is above its maximum, which makes the repetition " + bad;
    return nullptr;
  }
  Grammar prototype(nullptr, llama_grammar_free_impl);
  try {
    std::vector<const char*> patterns;
    for (const std::string& pattern : request.trigger_patterns) patterns.push_back(pattern.c_str());
    prototype.reset(llama_grammar_init_impl(vocab_, gbnf.c_str(), "root", request.lazy(),
                                            patterns.data(), patterns.size(),
                                            request.trigger_tokens.data(),
                                            request.trigger_tokens.size()));
  } catch (const std::exception& e) {
    *error = std::string("the grammar is not valid: ") + e.what();
    return nullptr;
  }
  if (!prototype) {
    // llama.cpp's parser logs the reason (the server log has it) and returns nothing.
    *error = request.kind == GrammarRequest::Kind::gbnf
                 ? "the grammar is not valid GBNF (llama.cpp's grammar syntax) or has no 'root' "
                   "rule"
                 : "llama.cpp could not parse the grammar made from this JSON schema";
    return nullptr;
  }
  std::call_once(decoded_once_,
                 [this] { decoded_ = std::make_shared<const DecodedVocabulary>(vocab_); });
  if (!request.lazy()) {
    // A grammar that allows no first token (a schema whose bounds leave no value, such as an
    // integer above 5 and below 3) would fail the request at its first token: refused here.
    // Only where its start is a few characters (then only the tokens beginning with them are
    // checked); one that starts with a broad class (a string's, any character) allows
    // something, and checking the whole vocabulary cost ~70 ms for Gemma 3's 262,144 tokens.
    GrammarConstraint start(Grammar(llama_grammar_clone_impl(*prototype), llama_grammar_free_impl),
                            decoded_);
    if (start.starts_narrow() && start_allows_no_token(start)) {
      *error = request.kind == GrammarRequest::Kind::gbnf
                   ? "the grammar allows no output: no token can begin it"
                   : "the JSON schema admits no value that a token can begin (are its bounds, "
                     "enums or types contradictory?)";
      return nullptr;
    }
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->prototype = std::move(prototype);

  std::lock_guard lock(mutex_);
  auto it = compiled_.find(key);
  if (it != compiled_.end()) return it->second.first;  // another thread compiled it meanwhile
  recency_.push_front(key);
  compiled_.emplace(std::move(key), std::make_pair(compiled, recency_.begin()));
  while (compiled_.size() > capacity_) {
    compiled_.erase(recency_.back());
    recency_.pop_back();
  }
  return compiled;
}

#else  // an installed llama.cpp: no grammar engine to build on

struct DecodedVocabulary {};
struct GrammarCompiler::Compiled {};

GrammarCompiler::GrammarCompiler(const llama_vocab* vocab, size_t capacity)
    : vocab_(vocab), capacity_(capacity) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<TokenConstraint> GrammarCompiler::compile(const GrammarRequest&,
                                                          std::string* error) {
  std::lock_guard lock(mutex_);
  ++misses_;
  *error = "output formats need llama.cpp's grammar engine from its source build; this brisk was "
           "built on an installed llama.cpp";
  return nullptr;
}

#endif

size_t GrammarCompiler::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

size_t GrammarCompiler::misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

}  // namespace brisk
