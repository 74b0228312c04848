#pragma once

#include <algorithm>

#include "quant/quant_result.h"

namespace brisk::quant {

// The concurrency-1 figures of SpeedFigures, summed over one model's greedy generations, in
// process or through a server, and turned into means the same way for both.
class SequentialSpeed {
 public:
  // A generation that succeeded: its first token after `ttft_ms`, its end after `e2e_ms`,
  // `tokens` generated in all (the first one's time is prefill, not decode).
  void add(double ttft_ms, double e2e_ms, int tokens) {
    ++succeeded_;
    ttft_sum_ms_ += ttft_ms;
    e2e_sum_ms_ += e2e_ms;
    decode_ms_ += e2e_ms - ttft_ms;
    decode_tokens_ += std::max(0, tokens - 1);
  }
  void add_failure() { ++failed_; }

  // Adds the attempts and failures to `speed` and sets its means and decode rate.
  void write_to(SpeedFigures* speed) const {
    speed->requests += succeeded_ + failed_;
    speed->errors += failed_;
    if (succeeded_ > 0) {
      speed->ttft_ms_mean = ttft_sum_ms_ / succeeded_;
      speed->e2e_ms_mean = e2e_sum_ms_ / succeeded_;
    }
    speed->decode_tokens_per_s = decode_ms_ > 0 ? decode_tokens_ / (decode_ms_ / 1000.0) : 0;
  }

 private:
  int succeeded_ = 0;
  int failed_ = 0;
  double ttft_sum_ms_ = 0;
  double e2e_sum_ms_ = 0;
  double decode_ms_ = 0;
  int decode_tokens_ = 0;
};

}  // namespace brisk::quant
