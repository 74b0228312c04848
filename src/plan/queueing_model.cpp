#include "plan/queueing_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <vector>

#include "common/arrival_schedule.h"
#include "common/percentile.h"
#include "plan/served_simulation.h"

namespace brisk::plan {

double Percentiles::at(const std::string& stat) const {
  if (stat == "p50") return p50;
  if (stat == "p95") return p95;
  if (stat == "p99") return p99;
  return mean;
}

Percentiles percentiles_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (const double value : values) sum += value;
  return {sum / values.size(), percentile_linear(values, 50), percentile_linear(values, 95),
          percentile_linear(values, 99)};
}

// The engine starts a step as soon as it has work, so a burst's first step carries the first
// prompt alone (seen in every measured burst on the test VM: the first request's TTFT is one
// prompt's, the next ones wait for that step). In a closed loop this sets the waves for good:
// users that share a step stay together.
double burst_arrival_ms(int index) { return 1e-3 * index; }

std::vector<std::pair<double, bool>> open_loop_arrivals(double rate_per_s,
                                                        const std::optional<ArrivalSample>& sample,
                                                        int requests) {
  std::vector<std::pair<double, bool>> arrivals;
  if (sample) {
    // What one bench run sends: its own schedule, its own seed, every request measured.
    const ArrivalPattern pattern{ArrivalProcess::poisson, rate_per_s, 1.0};
    for (const double offset_s : arrival_offsets_s(pattern, sample->requests, sample->seed)) {
      arrivals.emplace_back(offset_s * 1000, true);
    }
    return arrivals;
  }
  // Seeded Poisson arrivals (a portable generator and transform, so every machine predicts
  // the same), the first tenth left out as the run's warm-up.
  const int warmup = requests / 10;
  std::mt19937_64 random(1);
  double arrival_ms = 0;
  for (int index = 0; index < requests; ++index) {
    const double uniform = static_cast<double>(random() >> 11) * 0x1.0p-53;
    arrival_ms += -std::log1p(-uniform) / rate_per_s * 1000;
    arrivals.emplace_back(arrival_ms, index >= warmup);
  }
  return arrivals;
}

double poisson_quantile(double mean, double q) {
  if (mean <= 0) return 0;
  if (mean > 500) {  // normal approximation; the exact sum underflows
    const double z = q >= 0.99 ? 2.326 : q >= 0.95 ? 1.645 : q >= 0.5 ? 0.0 : -1.0;
    return std::ceil(mean + z * std::sqrt(mean));
  }
  double term = std::exp(-mean);
  double cumulative = term;
  int k = 0;
  while (cumulative < q && k < 100000) {
    ++k;
    term *= mean / k;
    cumulative += term;
  }
  return k;
}

namespace {

// Whether Poisson arrivals at `rate_per_s` outrun the replica, in closed form: prompts take a
// share rho = rate x prefill_extra of engine time (decode steps stretch to step / (1 - rho)),
// the prompts' own queue fills, or, by Little's law, the decode batch grows without bound.
bool open_loop_saturates(const Deployment& deployment, int input_tokens, int output_tokens,
                         double rate_per_s, int cached_tokens) {
  const double decode_context = input_tokens + output_tokens / 2.0;
  const int decode_steps = std::max(1, output_tokens - 1);
  const int prefill_tokens =
      input_tokens - std::clamp(cached_tokens, 0, std::max(0, input_tokens - 1));
  double decode_batch = 0;
  for (int iteration = 0; iteration < 200; ++iteration) {
    const double batch_seen = 1 + decode_batch;
    const double step_ms = deployment.step(batch_seen, decode_context).total_ms;
    const double prompt_extra_ms =
        deployment.prefill_extra_ms(input_tokens, batch_seen, decode_context, cached_tokens);
    const double prefill_share = rate_per_s * prompt_extra_ms / 1000;
    if (prefill_share >= 1) return true;
    // A prompt's chunks ride on decode steps; the prompts queue for them.
    const int chunks = deployment.prefill_chunks(prefill_tokens, batch_seen);
    const double prompt_service_ms = chunks * step_ms + prompt_extra_ms;
    if (rate_per_s * prompt_service_ms / 1000 >= 1) return true;
    const double tpot_mean_ms = step_ms / (1 - prefill_share);
    const double next_batch = rate_per_s * decode_steps * tpot_mean_ms / 1000;
    if (next_batch > 1e5) return true;
    if (std::abs(next_batch - decode_batch) < 1e-6 * (1 + decode_batch)) return false;
    decode_batch = 0.5 * decode_batch + 0.5 * next_batch;
  }
  return false;
}

struct SimulatedRequest {
  double arrival_ms = 0;
  double first_token_ms = 0;
  double end_ms = 0;
  int user = 0;
  long first_step = 0;  // the step that finished its prompt and sampled its first token
  bool measured = false;
};

// brisk serve's scheduler, step by step, each step costed by Deployment::step: a step decodes one
// token for every request that has its first token and still generates, then fills the rest of
// its token budget with prompt chunks, first come first served (a prompt may span steps; at
// most Deployment::max_sequences requests run, the rest queue), cut
// to the step target while requests decode (Deployment::timed_prefill_tokens), a long prompt's
// also while nothing decodes (Deployment::alone_long_chunk_tokens); the
// step that finishes a prompt samples its first token. A request that arrives while a step runs
// waits for the next one. With fixed lengths every request finishes output_tokens - 1 steps
// after its first token, so the decoding requests finish in the order they started, and a step
// costs O(1) besides its prompt chunks: a burst of 4096 users is simulated in milliseconds.
// A prompt's first `cached_tokens` come from the prefix cache: its prefill starts after them.
class EngineSimulation {
 public:
  EngineSimulation(const Deployment& deployment, int input_tokens, int output_tokens,
                   int cached_tokens)
      : deployment_(deployment),
        input_tokens_(std::max(1, input_tokens)),
        output_tokens_(std::max(1, output_tokens)),
        cached_tokens_(std::clamp(cached_tokens, 0, input_tokens_ - 1)),
        head_done_(cached_tokens_) {}

  // A request of `user` arriving at `arrival_ms`; arrivals come in time order.
  void arrive(double arrival_ms, int user, bool measured) {
    SimulatedRequest request;
    request.arrival_ms = arrival_ms;
    request.user = user;
    request.measured = measured;
    requests_.push_back(request);
    future_.push_back(requests_.size() - 1);
  }

  // Runs until no request is left; `on_end(request)` may call arrive() (a closed-loop user's next
  // request, which arrives as the last one ends and so misses the step starting then).
  template <typename OnEnd>
  void run(OnEnd on_end) {
    constexpr long kMaxSteps = 50'000'000;
    for (long step = 0; step < kMaxSteps; ++step) {
      while (!future_.empty() && requests_[future_.front()].arrival_ms <= now_ms_) {
        waiting_.push_back(future_.front());
        future_.pop_front();
      }
      if (decoding_.empty() && waiting_.empty()) {
        if (future_.empty()) return;
        now_ms_ = std::max(now_ms_, requests_[future_.front()].arrival_ms);  // idle until then
        --step;
        continue;
      }
      const double decoding = static_cast<double>(decoding_.size());
      // Request i holds input_tokens + (step - first_step_i) tokens when this step starts.
      const double decode_context =
          decoding > 0 ? input_tokens_ + step - first_step_sum_ / decoding : 0;
      std::vector<PromptChunk> prompts;
      std::vector<size_t> prefilled;
      double room = std::max(1.0, deployment_.step_token_budget - decoding);
      // brisk serve's step target: long prompts are always cut to it (and one at a time, by
      // default), short ones unless more wait than one step carries (a burst keeps the budget).
      const bool long_prompts = deployment_.chunking.is_long_prompt(input_tokens_ - cached_tokens_);
      const double backlog =
          static_cast<double>(waiting_.size()) * (input_tokens_ - cached_tokens_) -
          (head_done_ - cached_tokens_);
      if (!waiting_.empty() && (long_prompts || backlog <= room)) {
        room = decoding > 0 || !long_prompts
                   ? deployment_.timed_prefill_tokens(decoding, decode_context, head_done_, room)
                   : deployment_.alone_long_chunk_tokens(head_done_, room);
      }
      const size_t max_prompts =
          long_prompts ? static_cast<size_t>(std::max(1, deployment_.chunking.max_long_prefills))
                       : waiting_.size();
      // --max-seqs: a prompt starts only while fewer requests run (the front of the queue,
      // once started, runs: it is counted among them from its first chunk on).
      const size_t cap = deployment_.max_sequences > 0
                             ? static_cast<size_t>(deployment_.max_sequences)
                             : std::numeric_limits<size_t>::max();
      while (room > 0 && !waiting_.empty() && prompts.size() < max_prompts &&
             decoding_.size() + prefilled.size() < cap) {
        const double take = std::min<double>(room, input_tokens_ - head_done_);
        prompts.push_back({take, static_cast<double>(head_done_)});
        room -= take;
        head_done_ += static_cast<int>(take);
        if (head_done_ == input_tokens_) {
          prefilled.push_back(waiting_.front());
          waiting_.pop_front();
          head_done_ = cached_tokens_;
        }
      }
      const double step_ms = deployment_.step(decoding, decode_context, prompts).total_ms;
      now_ms_ += step_ms;
      busy_ms_ += step_ms;
      decode_batch_ms_ += decoding * step_ms;
      if (!prompts.empty()) {
        prefill_ms_ +=
            decoding > 0 ? step_ms - deployment_.step(decoding, decode_context).total_ms : step_ms;
      }
      // This step gave the oldest decoding requests their last token.
      while (!decoding_.empty() &&
             requests_[decoding_.front()].first_step + output_tokens_ - 1 <= step) {
        const size_t index = decoding_.front();
        decoding_.pop_front();
        first_step_sum_ -= static_cast<double>(requests_[index].first_step);
        end(index, on_end);
      }
      for (const size_t index : prefilled) {
        SimulatedRequest& request = requests_[index];
        request.first_token_ms = now_ms_;
        request.first_step = step;
        if (output_tokens_ == 1) {
          end(index, on_end);
        } else {
          decoding_.push_back(index);
          first_step_sum_ += static_cast<double>(step);
        }
      }
    }
  }

  const std::vector<SimulatedRequest>& requests() const { return requests_; }
  double now_ms() const { return now_ms_; }
  // Mean sequences decoding per step, weighted by step time.
  double mean_decode_batch() const { return busy_ms_ > 0 ? decode_batch_ms_ / busy_ms_ : 0; }
  // Fraction of engine time the prompt chunks added.
  double prefill_share() const { return busy_ms_ > 0 ? prefill_ms_ / busy_ms_ : 0; }

 private:
  template <typename OnEnd>
  void end(size_t index, OnEnd& on_end) {
    requests_[index].end_ms = now_ms_;
    on_end(requests_[index]);
  }

  const Deployment& deployment_;
  const int input_tokens_;
  const int output_tokens_;
  const int cached_tokens_;
  std::vector<SimulatedRequest> requests_;
  std::deque<size_t> future_;    // not yet arrived, in arrival order
  std::deque<size_t> waiting_;   // arrived, prompt not finished; the front may be partly done
  std::deque<size_t> decoding_;  // in the order of their first token, so of their last
  int head_done_;  // prompt tokens of waiting_.front() in the cache (cached or prefilled)
  double first_step_sum_ = 0;  // over decoding_
  double now_ms_ = 0;
  double busy_ms_ = 0;
  double decode_batch_ms_ = 0;
  double prefill_ms_ = 0;
};

// Latency percentiles over the simulation's measured requests.
LoadPrediction summarize(const EngineSimulation& simulation, int output_tokens) {
  std::vector<double> ttft_ms, tpot_ms, e2e_ms;
  for (const SimulatedRequest& request : simulation.requests()) {
    if (!request.measured) continue;
    ttft_ms.push_back(request.first_token_ms - request.arrival_ms);
    e2e_ms.push_back(request.end_ms - request.arrival_ms);
    tpot_ms.push_back(
        output_tokens > 1 ? (request.end_ms - request.first_token_ms) / (output_tokens - 1) : 0);
  }
  LoadPrediction prediction;
  prediction.ttft_ms = percentiles_of(ttft_ms);
  prediction.tpot_ms = percentiles_of(tpot_ms);
  prediction.e2e_ms = percentiles_of(e2e_ms).mean;
  prediction.decode_batch = simulation.mean_decode_batch();
  prediction.prefill_share = simulation.prefill_share();
  return prediction;
}

}  // namespace

LoadPrediction predict_burst(const Deployment& deployment, int input_tokens, int output_tokens,
                             int requests, int cached_tokens) {
  if (const auto* steps = deployment.measured_steps()) {
    return served_burst(deployment, *steps, input_tokens, output_tokens, requests, cached_tokens);
  }
  const int count = std::max(1, requests);
  EngineSimulation simulation(deployment, input_tokens, output_tokens, cached_tokens);
  for (int user = 0; user < count; ++user) {
    simulation.arrive(burst_arrival_ms(user), user, /*measured=*/true);
  }
  simulation.run([](const SimulatedRequest&) {});
  LoadPrediction prediction = summarize(simulation, output_tokens);
  prediction.in_flight = prediction.in_flight_p99 = count;
  prediction.request_throughput = count / (simulation.now_ms() / 1000);
  prediction.output_token_throughput = prediction.request_throughput * output_tokens;
  return prediction;
}

LoadPrediction predict_open_loop(const Deployment& deployment, int input_tokens, int output_tokens,
                                 double rate_per_s, const std::optional<ArrivalSample>& sample,
                                 int cached_tokens) {
  if (const auto* steps = deployment.measured_steps()) {
    return served_open_loop(deployment, *steps, input_tokens, output_tokens, rate_per_s, sample,
                            cached_tokens);
  }
  if (open_loop_saturates(deployment, input_tokens, output_tokens, rate_per_s, cached_tokens)) {
    LoadPrediction saturated;
    saturated.saturated = true;
    return saturated;
  }
  EngineSimulation simulation(deployment, input_tokens, output_tokens, cached_tokens);
  int index = 0;
  for (const auto& [arrival_ms, measured] : open_loop_arrivals(rate_per_s, sample)) {
    simulation.arrive(arrival_ms, index++, measured);
  }
  simulation.run([](const SimulatedRequest&) {});
  LoadPrediction prediction = summarize(simulation, output_tokens);
  prediction.request_throughput = rate_per_s;
  prediction.output_token_throughput = rate_per_s * output_tokens;
  prediction.in_flight = rate_per_s * prediction.e2e_ms / 1000;
  prediction.in_flight_p99 = poisson_quantile(prediction.in_flight, 0.99);
  return prediction;
}

LoadPrediction predict_closed_loop(const Deployment& deployment, int input_tokens,
                                   int output_tokens, int concurrency, int cached_tokens) {
  if (const auto* steps = deployment.measured_steps()) {
    return served_closed_loop(deployment, *steps, input_tokens, output_tokens, concurrency,
                              cached_tokens);
  }
  // Every user sends kCycles requests, each as its last one ends. The first wave is a burst and
  // the last ends while others stop, so only the requests in between are the steady state; with
  // fixed lengths that state is periodic (users that started together stay together), which a
  // random-phase queueing formula misses by 2x on a CPU, where one prompt costs many decode
  // steps (BENCHMARKS.md).
  constexpr int kCycles = 6;
  const int users = std::max(1, concurrency);
  EngineSimulation simulation(deployment, input_tokens, output_tokens, cached_tokens);
  std::vector<int> sent(users, 1);
  for (int user = 0; user < users; ++user) {
    simulation.arrive(burst_arrival_ms(user), user, /*measured=*/false);
  }
  double last_end_ms = -1;
  int rank = 0;  // among the requests that ended in the same step
  simulation.run([&](const SimulatedRequest& ended) {
    rank = ended.end_ms == last_end_ms ? rank + 1 : 0;
    last_end_ms = ended.end_ms;
    int& count = sent[ended.user];
    if (count == kCycles) return;
    ++count;
    // The user's next request reaches the server just after the answer left it; answers that
    // end in one step leave one after another, so their users' next requests arrive in turn,
    // and an idle engine starts its next step with the first alone (burst_arrival_ms).
    simulation.arrive(ended.end_ms + burst_arrival_ms(rank + 1), ended.user,
                      /*measured=*/count > 1 && count < kCycles);
  });
  LoadPrediction prediction = summarize(simulation, output_tokens);
  prediction.in_flight = prediction.in_flight_p99 = users;
  // Little's law with no think time: users / time per request.
  prediction.request_throughput = prediction.e2e_ms > 0 ? users / (prediction.e2e_ms / 1000) : 0;
  prediction.output_token_throughput = prediction.request_throughput * output_tokens;
  return prediction;
}

std::optional<PredictionSpread> predict_open_loop_spread(const Deployment& deployment,
                                                         int input_tokens, int output_tokens,
                                                         double rate_per_s, int requests,
                                                         uint64_t first_seed, int runs,
                                                         int cached_tokens) {
  PredictionSpread spread;
  spread.runs = std::max(1, runs);
  spread.requests = std::max(1, requests);
  std::vector<LoadPrediction> kept;  // the runs the replica keeps up with
  for (int run = 0; run < spread.runs; ++run) {
    const ArrivalSample sample{first_seed + static_cast<uint64_t>(run), spread.requests};
    LoadPrediction one = predict_open_loop(deployment, input_tokens, output_tokens, rate_per_s,
                                           sample, cached_tokens);
    if (one.saturated) {
      ++spread.saturated_runs;
    } else {
      kept.push_back(std::move(one));
    }
  }
  if (kept.empty()) return std::nullopt;
  // One figure (a metric's percentile) across the kept runs: its 10th to 90th percentile.
  auto range = [&](Percentiles LoadPrediction::*metric, double Percentiles::*stat) {
    std::vector<double> values;
    for (const LoadPrediction& one : kept) values.push_back((one.*metric).*stat);
    std::sort(values.begin(), values.end());
    return Interval{percentile_linear(values, 10), percentile_linear(values, 90)};
  };
  auto of = [&](Percentiles LoadPrediction::*metric) {
    return PredictionSpread::Of{range(metric, &Percentiles::p50), range(metric, &Percentiles::p95),
                                range(metric, &Percentiles::p99)};
  };
  spread.ttft_ms = of(&LoadPrediction::ttft_ms);
  spread.tpot_ms = of(&LoadPrediction::tpot_ms);
  return spread;
}

}  // namespace brisk::plan
