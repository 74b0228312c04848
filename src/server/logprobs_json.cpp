#include "server/logprobs_json.h"

namespace brisk {
namespace {

using nlohmann::json;

json utf8_bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char byte : piece) bytes.push_back(byte);
  return bytes;
}

}  // namespace

void LogprobsJson::append(const std::vector<GeneratedTokenLogprobs>& tokens) {
  pending_.insert(pending_.end(), tokens.begin(), tokens.end());
}

// A token's text may end inside a UTF-8 character; `bytes` keeps it exact, and the `token`
// string gets U+FFFD there when the JSON is written (dump_json).
json LogprobsJson::chat_entry(Token token, float logprob) const {
  const std::string piece = engine_.token_piece(token);
  return {{"token", piece}, {"logprob", logprob}, {"bytes", utf8_bytes(piece)}};
}

json LogprobsJson::take() {
  json result;
  if (kind_ == CompletionKind::chat) {
    json content = json::array();
    for (const GeneratedTokenLogprobs& generated : pending_) {
      json entry = chat_entry(generated.token, generated.logprob);
      json top = json::array();
      for (const TokenLogprob& alternative : generated.top) {
        top.push_back(chat_entry(alternative.token, alternative.logprob));
      }
      entry["top_logprobs"] = std::move(top);
      content.push_back(std::move(entry));
    }
    result = {{"content", std::move(content)}, {"refusal", nullptr}};
  } else {
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
         text_offset = json::array();
    for (const GeneratedTokenLogprobs& generated : pending_) {
      const std::string piece = engine_.token_piece(generated.token);
      tokens.push_back(piece);
      token_logprobs.push_back(generated.logprob);
      json top = json::object();
      for (const TokenLogprob& alternative : generated.top) {
        top[engine_.token_piece(alternative.token)] = alternative.logprob;
      }
      top_logprobs.push_back(std::move(top));
      text_offset.push_back(text_offset_);
      text_offset_ += piece.size();
    }
    result = {{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(text_offset)}};
  }
  pending_.clear();
  return result;
}

}  // namespace brisk
