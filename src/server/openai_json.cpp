#include "server/openai_json.h"

#include <cmath>

namespace brisk {
namespace {

double round_ms(double ms) { return std::round(ms * 1000.0) / 1000.0; }

}  // namespace

nlohmann::json usage_json(const RequestTimings& timings) {
  return {{"prompt_tokens", timings.prompt_tokens},
          {"completion_tokens", timings.completion_tokens},
          {"total_tokens", timings.prompt_tokens + timings.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", timings.cached_prompt_tokens}}}};
}

nlohmann::json timings_json(const RequestTimings& timings) {
  return {{"queue_ms", round_ms(timings.queue_ms)},
          {"prefill_ms", round_ms(timings.prefill_ms)},
          {"ttft_ms", round_ms(timings.ttft_ms)},
          {"decode_ms", round_ms(timings.decode_ms)},
          {"e2e_ms", round_ms(timings.e2e_ms)},
          {"prompt_tokens", timings.prompt_tokens},
          {"cached_prompt_tokens", timings.cached_prompt_tokens},
          {"completion_tokens", timings.completion_tokens}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace brisk
