#include "sched/serve_simulation.h"

#include <algorithm>
#include <limits>

namespace brisk {

namespace {

// Sequence ids as brisk serve gives the engine: the running ones, and in one buffer as many
// again (at most 256 in all) for the prefix cache's finished requests.
int sequence_ids_for(const ServeSimulationOptions& options) {
  const int running = std::max(1, options.scheduler.max_seqs);
  const bool cache_ids = options.scheduler.prefix_cache.enabled && !options.buffer_per_sequence;
  return running + (cache_ids ? std::min(running, 256 - running) : 0);
}

SchedulerOptions on_clock(SchedulerOptions options, VirtualClock& clock) {
  options.clock = [&clock] { return clock.now(); };
  options.sampling_threads = 1;
  options.warm_up = false;  // run by the simulation itself, before its origin
  options.prefix_cache.host_bytes = 0;
  options.quiet = true;
  return options;
}

// A token no other request's prompt has at that place: request `index`'s prompts share nothing
// past their common prefix. Far above PricedModelRunner's vocabulary, which only its own picks
// come from.
Token distinct_token(size_t index) { return static_cast<Token>(1000 + index % 2'000'000'000); }

}  // namespace

ServeSimulation::ServeSimulation(const ServeSimulationOptions& options)
    : options_(options),
      runner_(options.kv_cells, sequence_ids_for(options), options.buffer_per_sequence,
              StepCosts::from_table(options.price, options.scheduler.max_step_ms,
                                    options.scheduler.max_batched_tokens),
              clock_),
      scheduler_(runner_, on_clock(options.scheduler, clock_), metrics_) {
  if (options.warm_up) {
    scheduler_.warm_up();
  } else if (options.starts_knowing_price) {
    scheduler_.adopt_step_costs(options.price);
  }
  origin_ = clock_.now();
  runner_.record_steps(true);
}

size_t ServeSimulation::arrive(SimulatedRequest request) {
  request.prompt_tokens = std::max(1, request.prompt_tokens);
  request.shared_prefix_tokens = std::clamp(request.shared_prefix_tokens, 0, request.prompt_tokens - 1);
  request.output_tokens = std::max(1, request.output_tokens);
  request.held_cells = std::max(0, request.held_cells);
  cells_outside_ += request.held_cells;
  runner_.set_cells_outside(cells_outside_);
  requests_.push_back(request);
  future_.push_back(requests_.size() - 1);
  return requests_.size() - 1;
}

std::shared_ptr<Request> ServeSimulation::make_request(size_t index) {
  const SimulatedRequest& simulated = requests_[index];
  auto request = std::make_shared<Request>();
  request->id = index;
  request->prompt_tokens.resize(static_cast<size_t>(simulated.prompt_tokens));
  for (int i = 0; i < simulated.prompt_tokens; ++i) {
    // The shared prefix alike in every request, then one token of its own, then filler.
    request->prompt_tokens[static_cast<size_t>(i)] =
        i < simulated.shared_prefix_tokens    ? static_cast<Token>(2 + i % 1000)
        : i == simulated.shared_prefix_tokens ? distinct_token(index)
                                              : static_cast<Token>(3);
  }
  request->max_tokens = simulated.output_tokens;
  request->max_tokens_named = true;
  request->ignore_eos = true;
  request->priority = simulated.priority;
  request->sampling.temperature = 0;
  request->arrival = origin_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double, std::milli>(simulated.arrival_ms));
  request->on_update = [this, index](GenerationUpdate&& update) {
    SimulatedRequest& simulated = requests_[index];
    if (simulated.first_token_ms < 0 && update.completion_tokens > 0) {
      simulated.first_token_ms = elapsed_ms();
    }
    if (!update.finished()) return;
    simulated.end_ms = elapsed_ms();
    simulated.finish_reason = update.finish_reason;
    simulated.cached_prompt_tokens = update.timings.cached_prompt_tokens;
    cells_outside_ -= simulated.held_cells;
    runner_.set_cells_outside(cells_outside_);
    ended_.push_back(index);
  };
  return request;
}

// What arrived by now reaches the scheduler before its next step, as the engine loop hands
// the submitted requests over.
void ServeSimulation::hand_over_arrivals() {
  // The clock moves in whole nanoseconds: an arrival it was moved to may sit a fraction after.
  constexpr double kClockGrainMs = 1e-5;
  while (!future_.empty() &&
         requests_[future_.front()].arrival_ms <= elapsed_ms() + kClockGrainMs) {
    scheduler_.enqueue(make_request(future_.front()));
    future_.pop_front();
  }
}

bool ServeSimulation::run(const std::function<void(size_t)>& on_end) {
  return run_steps(on_end, nullptr, std::numeric_limits<double>::infinity());
}

bool ServeSimulation::run_until(const std::function<bool()>& done, double until_ms) {
  run_steps(nullptr, done, until_ms);
  return done();
}

bool ServeSimulation::run_steps(const std::function<void(size_t)>& on_end,
                                const std::function<bool()>& done, double until_ms) {
  for (;;) {
    if ((done && done()) || elapsed_ms() > until_ms) return true;
    hand_over_arrivals();
    if (scheduler_.idle()) {
      if (future_.empty()) return true;
      // Idle until the next arrival, which then reaches the scheduler.
      clock_.advance_ms(std::max(0.0, requests_[future_.front()].arrival_ms - elapsed_ms()));
      scheduler_.enqueue(make_request(future_.front()));
      future_.pop_front();
      continue;
    }
    const size_t steps_before = runner_.steps().size();
    scheduler_.step();
    const bool stepped = runner_.steps().size() != steps_before;
    std::vector<size_t> ended;
    ended.swap(ended_);
    if (on_end) {
      for (const size_t index : ended) on_end(index);
    }
    if (!stepped && ended.empty()) {
      // Nothing could run: only an arrival can change that.
      if (future_.empty()) return false;
      clock_.advance_ms(std::max(0.0, requests_[future_.front()].arrival_ms - elapsed_ms()));
    }
  }
}

}  // namespace brisk
