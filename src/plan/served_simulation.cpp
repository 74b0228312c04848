#include "plan/served_simulation.h"

#include <algorithm>
#include <vector>

#include "engine/attention_calls.h"
#include "sched/serve_simulation.h"

namespace brisk::plan {

namespace {

// brisk serve's default --max-seqs, what a Poisson load runs at when the deployment names none.
constexpr int kServeDefaultMaxSeqs = 16;
// brisk serve's default --ctx-size.
constexpr int kServeDefaultContext = 8192;
// Sequence ids llama.cpp keeps apart, the running ones and the prefix cache's together.
constexpr int kMaxRunningSequences = 128;
// Seeded Poisson arrivals of a long-run prediction, fewer than the roofline simulation's 1,500:
// the real scheduler costs more per simulated step (a plan stays near a second).
constexpr int kOpenLoopRequests = 600;

// brisk serve's options for the deployment (serve_command.cpp's load_generative_model): its
// flags, and where attention runs on the CPU ggml's tiled-attention floor for a lone chunk.
ServeSimulationOptions serve_options(const Deployment& deployment,
                                     const Efficiency::MeasuredSteps& steps, int max_seqs,
                                     int sequence_tokens) {
  ServeSimulationOptions options;
  SchedulerOptions& scheduler = options.scheduler;
  scheduler.max_seqs = std::clamp(max_seqs, 1, kMaxRunningSequences);
  scheduler.max_batched_tokens = std::max(deployment.step_token_budget, scheduler.max_seqs + 1);
  scheduler.max_step_ms = deployment.chunking.target_step_ms;
  scheduler.long_prefill_tokens = deployment.chunking.long_prefill_tokens;
  scheduler.max_long_prefills = deployment.chunking.max_long_prefills;
  scheduler.prefix_cache.enabled = true;
  scheduler.max_queue_delay_ms = 0;  // admission refuses nothing here: the load is the load
  if (!steps.attention_on_gpu) scheduler.min_alone_chunk_tokens = kTiledAttentionRows;
  options.kv_cells = std::max(kServeDefaultContext, scheduler.max_seqs * sequence_tokens);
  options.price = steps.table;
  return options;
}

int max_seqs_for(const Deployment& deployment, int fallback) {
  return deployment.max_sequences > 0 ? deployment.max_sequences : fallback;
}

SimulatedRequest request_of(double arrival_ms, int input_tokens, int output_tokens,
                            int cached_tokens, int user, bool measured) {
  SimulatedRequest request;
  request.arrival_ms = arrival_ms;
  request.prompt_tokens = std::max(1, input_tokens);
  request.shared_prefix_tokens = std::clamp(cached_tokens, 0, request.prompt_tokens - 1);
  request.output_tokens = std::max(1, output_tokens);
  request.user = user;
  request.measured = measured;
  return request;
}

// The measured requests' latencies, and what the steps say of the engine's load.
LoadPrediction summarize(const ServeSimulation& simulation) {
  std::vector<double> ttft_ms, tpot_ms, e2e_ms;
  for (const SimulatedRequest& request : simulation.requests()) {
    if (!request.measured || request.end_ms < 0) continue;
    ttft_ms.push_back(request.first_token_ms - request.arrival_ms);
    e2e_ms.push_back(request.end_ms - request.arrival_ms);
    tpot_ms.push_back(request.output_tokens > 1 ? (request.end_ms - request.first_token_ms) /
                                                      (request.output_tokens - 1)
                                                : 0);
  }
  LoadPrediction prediction;
  prediction.ttft_ms = percentiles_of(ttft_ms);
  prediction.tpot_ms = percentiles_of(tpot_ms);
  prediction.e2e_ms = percentiles_of(e2e_ms).mean;
  double busy_ms = 0;
  double decode_batch_ms = 0;
  double prompt_step_ms = 0;
  for (const PricedStep& step : simulation.steps()) {
    busy_ms += step.ms;
    decode_batch_ms += step.decodes * step.ms;
    if (step.prompt_tokens > 0) prompt_step_ms += step.ms;
  }
  prediction.decode_batch = busy_ms > 0 ? decode_batch_ms / busy_ms : 0;
  prediction.prefill_share = busy_ms > 0 ? prompt_step_ms / busy_ms : 0;
  return prediction;
}

// Every user sends `cycles` requests, each as its last one ends; only those after the first
// wave and before the last are measured (the steady state).
void run_closed_loop(ServeSimulation& simulation, int input_tokens, int output_tokens, int users,
                     int cached_tokens, int cycles) {
  std::vector<int> sent(static_cast<size_t>(users), 1);
  for (int user = 0; user < users; ++user) {
    simulation.arrive(request_of(burst_arrival_ms(user), input_tokens, output_tokens,
                                 cached_tokens, user, cycles <= 2));
  }
  double last_end_ms = -1;
  int rank = 0;  // among the requests that ended in the same step
  simulation.run([&](size_t index) {
    const SimulatedRequest ended = simulation.requests()[index];
    rank = ended.end_ms == last_end_ms ? rank + 1 : 0;
    last_end_ms = ended.end_ms;
    int& count = sent[static_cast<size_t>(ended.user)];
    if (count == cycles) return;
    ++count;
    simulation.arrive(request_of(ended.end_ms + burst_arrival_ms(rank + 1), input_tokens,
                                 output_tokens, cached_tokens, ended.user,
                                 count > 1 && count < cycles));
  });
}

}  // namespace

LoadPrediction served_burst(const Deployment& deployment, const Efficiency::MeasuredSteps& steps,
                            int input_tokens, int output_tokens, int requests, int cached_tokens) {
  const int count = std::max(1, requests);
  ServeSimulation simulation(serve_options(deployment, steps, max_seqs_for(deployment, count),
                                           input_tokens + output_tokens));
  for (int index = 0; index < count; ++index) {
    simulation.arrive(request_of(burst_arrival_ms(index), input_tokens, output_tokens,
                                 cached_tokens, index, true));
  }
  simulation.run();
  LoadPrediction prediction = summarize(simulation);
  prediction.in_flight = prediction.in_flight_p99 = count;
  prediction.request_throughput = count / (simulation.now_ms() / 1000);
  prediction.output_token_throughput = prediction.request_throughput * output_tokens;
  return prediction;
}

LoadPrediction served_closed_loop(const Deployment& deployment,
                                  const Efficiency::MeasuredSteps& steps, int input_tokens,
                                  int output_tokens, int concurrency, int cached_tokens) {
  constexpr int kCycles = 6;
  const int users = std::max(1, concurrency);
  ServeSimulation simulation(serve_options(deployment, steps, max_seqs_for(deployment, users),
                                           input_tokens + output_tokens));
  run_closed_loop(simulation, input_tokens, output_tokens, users, cached_tokens, kCycles);
  LoadPrediction prediction = summarize(simulation);
  prediction.in_flight = prediction.in_flight_p99 = users;
  prediction.request_throughput = prediction.e2e_ms > 0 ? users / (prediction.e2e_ms / 1000) : 0;
  prediction.output_token_throughput = prediction.request_throughput * output_tokens;
  return prediction;
}

LoadPrediction served_open_loop(const Deployment& deployment,
                                const Efficiency::MeasuredSteps& steps, int input_tokens,
                                int output_tokens, double rate_per_s,
                                const std::optional<ArrivalSample>& sample, int cached_tokens) {
  const ServeSimulationOptions options =
      serve_options(deployment, steps, max_seqs_for(deployment, kServeDefaultMaxSeqs),
                    input_tokens + output_tokens);
  // What the server completes with every sequence busy and a request always waiting.
  constexpr int kCapacityCycles = 4;
  const int full = options.scheduler.max_seqs;
  ServeSimulation busy_server(options);
  run_closed_loop(busy_server, input_tokens, output_tokens, full + 1, cached_tokens,
                  kCapacityCycles);
  const LoadPrediction busy = summarize(busy_server);
  const double capacity_per_s = busy.e2e_ms > 0 ? (full + 1) / (busy.e2e_ms / 1000) : 0;
  if (capacity_per_s <= 0 || rate_per_s >= capacity_per_s) {
    LoadPrediction saturated;
    saturated.saturated = true;
    return saturated;
  }
  ServeSimulation simulation(options);
  int index = 0;
  for (const auto& [arrival_ms, measured] :
       open_loop_arrivals(rate_per_s, sample, kOpenLoopRequests)) {
    simulation.arrive(
        request_of(arrival_ms, input_tokens, output_tokens, cached_tokens, index++, measured));
  }
  simulation.run();
  LoadPrediction prediction = summarize(simulation);
  prediction.request_throughput = rate_per_s;
  prediction.output_token_throughput = rate_per_s * output_tokens;
  prediction.in_flight = rate_per_s * prediction.e2e_ms / 1000;
  prediction.in_flight_p99 = poisson_quantile(prediction.in_flight, 0.99);
  return prediction;
}

}  // namespace brisk::plan
