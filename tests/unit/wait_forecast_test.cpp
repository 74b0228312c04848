// Admission's forecast of a newcomer's wait (sched/wait_forecast.h): brisk serve's own scheduler
// run from the live state on the learned costs.
#include "sched/wait_forecast.h"

#include <gtest/gtest.h>

#include <mutex>

#include "fake_clock.h"
#include "fake_model_runner.h"
#include "scheduler_run.h"
#include "sched/engine_loop.h"

namespace brisk {
namespace {

using testing::FakeClock;
using testing::FakeModelRunner;

StepCostTable test_table() {
  StepCostTable table;
  table.decode_ms_by_batch = {{1, 10.0}, {2, 20.0}, {4, 30.0}};
  table.prefill_ms_per_token = 1.0;
  return table;
}

WaitForecastOptions test_options(int max_seqs) {
  WaitForecastOptions options;
  options.scheduler = testing::options(max_seqs, 256);
  options.scheduler.max_step_ms = 0;  // whole steps: the arithmetic below
  options.scheduler.prefix_cache.enabled = false;
  options.kv_cells = 4096;
  return options;
}

LiveLoad load_of(std::vector<ForecastRequest> running, int max_seqs) {
  LiveLoad load;
  load.costs = test_table();
  load.costs_settled = true;
  load.free_slots = max_seqs - static_cast<int>(running.size());
  load.running = std::move(running);
  return load;
}

double wait_of(const WaitForecastOptions& options, const LiveLoad& load,
               const std::vector<ForecastRequest>& submitted, const Newcomer& newcomer,
               double horizon_ms) {
  return forecast_waits(options, load, submitted, newcomer, horizon_ms).newcomer_ms;
}

ForecastRequest decoding(int output_tokens) {
  ForecastRequest request;
  request.output_tokens = output_tokens;
  request.held_cells = 50;
  return request;
}

// Two sequences, both running: the newcomer's prompt starts the step after the first one ends.
// The two decode 5 steps of 20 ms; its 10-token prompt then runs beside the other's decode,
// 10 + 10 ms, which is what it costs alone: a wait of 100 ms.
TEST(WaitForecast, ANewcomerWaitsForASequenceToComeFree) {
  const LiveLoad load = load_of({decoding(5), decoding(20)}, 2);
  Newcomer newcomer;
  newcomer.prompt_tokens = 10;
  EXPECT_NEAR(wait_of(test_options(2), load, {}, newcomer, 10'000), 100, 1e-6);
  EXPECT_NEAR(wait_of(test_options(3), load_of({decoding(5), decoding(20)}, 3), {},
                               newcomer, 10'000),
              10, 1e-6)
      << "a free sequence: its prompt rides the next step, 10 ms dearer for the two decodes";
  // The requests submitted and not yet handed over are ahead of it too: one of 10 tokens that
  // runs 30 takes the first free sequence, and the newcomer the second (at 400 ms).
  ForecastRequest submitted;
  submitted.prompt_tokens = 10;
  submitted.output_tokens = 30;
  EXPECT_NEAR(wait_of(test_options(2), load, {submitted}, newcomer, 10'000), 400, 1e-6);
}

// A running request that named no max_tokens, with nothing finished yet: it is taken to run as
// long as the newcomer asks for (a burst's requests look alike), or one token when the newcomer
// names none either (a lower bound).
TEST(WaitForecast, AnUnknownLengthRunsAsLongAsTheNewcomerAsks) {
  const LiveLoad load = load_of({decoding(0), decoding(20)}, 2);
  Newcomer newcomer;
  newcomer.prompt_tokens = 10;
  newcomer.max_tokens = 5;
  EXPECT_NEAR(wait_of(test_options(2), load, {}, newcomer, 10'000), 100, 1e-6);
  newcomer.max_tokens = 0;
  EXPECT_NEAR(wait_of(test_options(2), load, {}, newcomer, 10'000), 20, 1e-6);
}

// Each row pays for the cells the running requests already hold.
TEST(WaitForecast, TheCellsHeldAreAttendedUntilTheirRequestsEnd) {
  LiveLoad load = load_of({decoding(5), decoding(20)}, 2);
  load.costs.row_cell_ms = 0.01;
  Newcomer newcomer;
  newcomer.prompt_tokens = 10;
  // Five steps of 2 rows over 100 held cells (2 ms each) and, as each token is computed, their
  // own cells: 10 ms more than at no cell.
  const double wait = wait_of(test_options(2), load, {}, newcomer, 10'000);
  EXPECT_GT(wait, 110);
  load.running[0].held_cells = load.running[1].held_cells = 0;
  EXPECT_LT(wait_of(test_options(2), load, {}, newcomer, 10'000), wait);
}

// Past the horizon the simulation stops, and the wait is extrapolated from the share of the
// requests ahead that were served: a queue that would take ~10 s is not simulated to its end.
TEST(WaitForecast, BeyondTheHorizonItExtrapolates) {
  const LiveLoad load = load_of({decoding(100), decoding(100)}, 2);
  std::vector<ForecastRequest> submitted(18, ForecastRequest{10, 0, 100, 0, 0});
  Newcomer newcomer;
  newcomer.prompt_tokens = 10;
  const double full = wait_of(test_options(2), load, submitted, newcomer, 1e9);
  EXPECT_NEAR(full, 10 * 100 * 20 + 10 * 2, 200) << "ten rounds of 100 steps";
  const double cut = wait_of(test_options(2), load, submitted, newcomer, 3000);
  EXPECT_GT(cut, 3000);
  EXPECT_NEAR(cut, full, full * 0.2);
  LiveLoad unknown = load;
  unknown.costs_settled = false;
  EXPECT_EQ(wait_of(test_options(2), unknown, submitted, newcomer, 3000), 0)
      << "nothing to price with";
}

// Short prompts go before long ones (--long-prefill-tokens): while a long prompt is prefilled,
// a short newcomer takes the free sequence before a long prompt that waited, and holds it for
// its 50 tokens. The forecast says what every request ahead would wait with the newcomer among
// them, so that admission can refuse one that would push another past the limit.
TEST(WaitForecast, SaysWhatTheRequestsAheadWouldWaitWithTheNewcomer) {
  WaitForecastOptions options = test_options(2);
  options.scheduler.long_prefill_tokens = 100;
  ForecastRequest prefilling{300, 0, 200, 0, 500};  // runs 200 tokens once its prompt is in
  const LiveLoad load = load_of({prefilling}, 2);
  const ForecastRequest waited{300, 0, 5, 0, 1000};  // a long prompt, waiting a second already
  Newcomer newcomer;
  newcomer.prompt_tokens = 20;
  newcomer.max_tokens = 50;
  const WaitForecast without = forecast_waits(options, load, {waited}, Newcomer{}, 1e6);
  const WaitForecast with = forecast_waits(options, load, {waited}, newcomer, 1e6);
  ASSERT_EQ(with.ahead_ms.size(), 2u);
  EXPECT_LT(with.newcomer_ms, 50) << "it goes first";
  EXPECT_NEAR(with.ahead_ms[0], without.ahead_ms[0], 25) << "the prefilling one barely slows";
  EXPECT_GT(with.ahead_ms[1], without.ahead_ms[1] + 49 * 10)
      << "the long one waits for the newcomer's 50 tokens";
  EXPECT_GT(without.ahead_ms[1], 1000) << "counted from its arrival";
  ForecastRequest served = prefilling;
  served.served = true;
  EXPECT_EQ(forecast_waits(options, load_of({served}, 2), {}, newcomer, 1e6).ahead_ms[0], -1);
}

// The forecast is the server: an engine loop on the fake runner, its steps priced by the same
// table on a fake clock, takes a newcomer in the middle of a run; the wait forecast at its
// submission is the wait it gets (its first token, less its prompt alone). Fails the day the
// live state published, or the simulation started from it, drifts from the scheduler.
TEST(WaitForecast, IsTheWaitTheServerGives) {
  const StepCostTable table = test_table();
  StepCosts price = StepCosts::from_table(table, 0, 256);
  FakeClock clock;
  FakeModelRunner runner(4096, -1, 97, 4);
  runner.clock = &clock;
  runner.step_price_ms = [&](int decodes, int prompt_tokens, int cells) {
    price.set_attended_cells(cells);
    return price.step_ms(decodes, prompt_tokens);
  };
  SchedulerOptions options = test_options(2).scheduler;
  options.clock = clock.function();
  options.max_queue_delay_ms = 60'000;
  options.warm_up = true;  // the costs known from the start, as brisk serve's
  ServingMetrics metrics;
  EngineLoop loop(runner, options, metrics);

  std::mutex mutex;
  int finished = 0;
  double newcomer_first_token_ms = -1;
  std::condition_variable done;
  const auto make = [&](int prompt, int output, bool newcomer) {
    auto request = std::make_shared<Request>();
    request->prompt_tokens.assign(static_cast<size_t>(prompt), static_cast<Token>(5 + finished));
    for (size_t k = 0; k < request->prompt_tokens.size(); ++k) request->prompt_tokens[k] += k % 7;
    request->max_tokens = output;
    request->max_tokens_named = true;
    request->ignore_eos = true;
    request->sampling = testing::greedy();
    request->arrival = clock.now();
    const TimePoint submitted_at = clock.now();
    request->on_update = [&, newcomer, submitted_at](GenerationUpdate&& update) {
      std::lock_guard lock(mutex);
      if (newcomer && newcomer_first_token_ms < 0 && update.completion_tokens > 0) {
        newcomer_first_token_ms = ms_between(submitted_at, clock.now());
      }
      if (update.finished()) {
        ++finished;
        done.notify_all();
      }
    };
    return request;
  };
  // Three requests at once on two sequences; the newcomer comes before the 6th decode, when
  // the first two are decoding and the third waits. The warm-up's steps come first.
  loop.start();
  const int warm_up_decodes = runner.decodes();
  double forecast = -1;
  runner.before_decode = [&](int n) {
    if (n != warm_up_decodes + 6) return;
    EXPECT_EQ(loop.submit(make(20, 3, true), &forecast), SubmitStatus::accepted);
  };
  // Handed over together, whenever the engine thread wakes.
  std::vector<std::shared_ptr<Request>> first;
  first.push_back(make(30, 12, false));
  first.push_back(make(50, 8, false));
  first.push_back(make(40, 10, false));
  ASSERT_EQ(loop.submit_all(std::move(first)), SubmitStatus::accepted);
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(30), [&] { return finished == 4; }));
  }
  ASSERT_GE(forecast, 0);
  ASSERT_GT(newcomer_first_token_ms, 0);
  const double own_ms = price.at_attended_cells(0).step_ms(0, 20);
  EXPECT_NEAR(forecast, newcomer_first_token_ms - own_ms, 1e-6);
  EXPECT_GT(forecast, 100) << "it waited for a sequence";
}

}  // namespace
}  // namespace brisk
