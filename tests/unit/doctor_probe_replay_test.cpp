// brisk doctor's "long among short" probe (doctor/probe_plan.cpp) replayed on the scheduler with
// the fake runner and the fake clock, at several machine speeds, and judged by the doctor's own
// head_of_line_blocking rule. On a real server the same probe passed or failed by millisecond
// races (CI, 2026-12-02: short requests stalled 1,654 ms beside a 1,032 ms prefill); here every
// run is the same.

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "doctor/rules.h"
#include "fake_clock.h"
#include "fake_model_runner.h"
#include "sched/engine_loop.h"

namespace brisk {
namespace {

using testing::FakeClock;
using testing::FakeModelRunner;

// The probe's shapes (doctor::ProbeOptions' defaults).
constexpr int kShortPromptTokens = 32;
constexpr int kShortOutputTokens = 32;
constexpr int kLongPromptTokens = 320;
constexpr int kLongOutputTokens = 8;
constexpr int kClients = 4;

struct MixedProbeReplay {
  double long_alone_ttft_ms = 0;           // the doctor's long baseline
  std::vector<double> later_short_ttft_ms;  // short requests sent after the first round
  double short_max_itl_ms = 0;              // the longest gap in any short stream
  int requests_finished = 0;
};

// One request's timeline on the fake clock.
struct Timeline {
  TimePoint arrival;
  std::vector<TimePoint> tokens;
  bool finished = false;
};

// The doctor's sequence against brisk serve's scheduler defaults: a warm-up, one long prompt
// alone, then `kClients` closed-loop clients send 2 * kClients requests, every kClients-th one
// long. A client sends its next request as soon as its last one ends, and over HTTP it reaches
// the server after the engine has started its next step: here it is submitted on the engine
// thread just before that step's decode.
MixedProbeReplay replay_mixed_probe(std::chrono::microseconds step_delay,
                                    std::chrono::microseconds token_delay) {
  FakeModelRunner runner(16384);
  runner.step_delay = step_delay;
  runner.token_delay = token_delay;
  SchedulerOptions options;  // brisk serve's defaults
  FakeClock clock;
  runner.clock = &clock;
  options.clock = clock.function();
  ServingMetrics metrics;
  EngineLoop loop(runner, options, metrics);

  std::mutex mutex;
  std::condition_variable all_done;
  std::vector<Timeline> timelines;
  std::vector<int> pending;  // requests to submit before the next decode
  int finished = 0;
  const int total = 2 + 2 * kClients;  // warm-up, long alone, the mixed probe
  int next_mixed = 0;                  // the mixed probe's next request index

  std::function<void(int)> submit;
  auto is_long = [](int index) { return index == 1 || (index >= 2 && (index - 2) % kClients == 0); };
  int in_flight = 0;
  // What follows request `index`'s end (mutex held): the next stage at once, or the client's
  // next request, which reaches the server after the next step began (at once if none will).
  auto after = [&](int index, std::vector<int>& submit_now) {
    --in_flight;
    if (index < 2) {
      submit_now.push_back(index + 1);
      if (index == 1) {
        for (int i = 1; i < kClients; ++i) submit_now.push_back(index + 1 + i);
        next_mixed = kClients;
      }
      return;
    }
    if (next_mixed < 2 * kClients) pending.push_back(2 + next_mixed++);
    if (in_flight == 0) {  // no next step: the engine waits for them
      submit_now.insert(submit_now.end(), pending.begin(), pending.end());
      pending.clear();
    }
  };
  submit = [&](int index) {
    auto request = std::make_shared<Request>();
    request->id = static_cast<uint64_t>(index);
    const bool long_prompt = is_long(index);
    const int warm_up_tokens = 16;
    request->prompt_tokens.assign(
        static_cast<size_t>(long_prompt ? kLongPromptTokens : kShortPromptTokens), 5 + index);
    request->max_tokens =
        index == 0 ? warm_up_tokens : long_prompt ? kLongOutputTokens : kShortOutputTokens;
    request->sampling.temperature = 0;
    request->ignore_eos = true;
    request->arrival = clock.now();
    {
      std::lock_guard lock(mutex);
      if (timelines.size() <= static_cast<size_t>(index)) timelines.resize(index + 1);
      timelines[static_cast<size_t>(index)].arrival = request->arrival;
      ++in_flight;
    }
    request->on_update = [&, index](GenerationUpdate&& update) {
      std::vector<int> submit_now;
      {
        std::lock_guard lock(mutex);
        Timeline& timeline = timelines[static_cast<size_t>(index)];
        for (int i = static_cast<int>(timeline.tokens.size()); i < update.completion_tokens; ++i) {
          timeline.tokens.push_back(clock.now());
        }
        if (!update.finished()) return;
        timeline.finished = true;
        after(index, submit_now);
        if (++finished == total) all_done.notify_all();
      }
      for (int next : submit_now) submit(next);
    };
    EXPECT_EQ(loop.submit(std::move(request)), SubmitStatus::accepted);
  };
  runner.before_decode = [&](int) {
    std::vector<int> now;
    {
      std::lock_guard lock(mutex);
      now.swap(pending);
    }
    for (int index : now) submit(index);
  };
  submit(0);  // the warm-up: the doctor's earlier stages measured the step costs
  loop.start();
  {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(all_done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == total; }));
  }
  loop.shutdown(std::chrono::seconds(10));

  MixedProbeReplay replay;
  std::lock_guard lock(mutex);
  replay.requests_finished = finished;
  auto ms = [](TimePoint from, TimePoint to) { return ms_between(from, to); };
  const Timeline& alone = timelines[1];
  if (!alone.tokens.empty()) replay.long_alone_ttft_ms = ms(alone.arrival, alone.tokens[0]);
  for (size_t index = 2; index < timelines.size(); ++index) {
    const Timeline& timeline = timelines[index];
    if (is_long(static_cast<int>(index)) || timeline.tokens.empty()) continue;
    if (index - 2 >= static_cast<size_t>(kClients)) {
      replay.later_short_ttft_ms.push_back(ms(timeline.arrival, timeline.tokens[0]));
    }
    for (size_t t = 1; t < timeline.tokens.size(); ++t) {
      replay.short_max_itl_ms =
          std::max(replay.short_max_itl_ms, ms(timeline.tokens[t - 1], timeline.tokens[t]));
    }
  }
  return replay;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0 : (n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2);
}

// The machine's speed moves where the second long prompt's prefill falls against the first
// round's short streams ending: each speed here is one outcome of that race. At every one, the
// short requests' stall stays under the doctor's threshold: no head_of_line_blocking on brisk
// serve's defaults.
TEST(DoctorMixedProbeReplay, ShortRequestsNeverStallForMostOfALongPrefill) {
  for (const int step_us : {15000, 25000, 40000}) {
    for (const int token_us : {1500, 2200, 3200, 4500}) {
      SCOPED_TRACE(::testing::Message() << "step " << step_us << " us + " << token_us
                                        << " us a token");
      const MixedProbeReplay replay = replay_mixed_probe(std::chrono::microseconds(step_us),
                                                         std::chrono::microseconds(token_us));
      ASSERT_EQ(replay.requests_finished, 2 + 2 * kClients);
      ASSERT_EQ(replay.later_short_ttft_ms.size(), static_cast<size_t>(kClients - 1));
      const double stall_ms = std::max(replay.short_max_itl_ms, median(replay.later_short_ttft_ms));
      EXPECT_LT(stall_ms, doctor::threshold::kStallShareOfLongPrefill * replay.long_alone_ttft_ms)
          << "short streams' longest gap " << replay.short_max_itl_ms
          << " ms, later short requests' TTFT p50 " << median(replay.later_short_ttft_ms)
          << " ms; the long prompt's prefill alone " << replay.long_alone_ttft_ms << " ms";
    }
  }
}

}  // namespace
}  // namespace brisk
