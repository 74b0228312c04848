#pragma once

#include <optional>

#include "plan/performance_model.h"
#include "plan/queueing_model.h"

namespace brisk::plan {

// Predictions by brisk serve's own scheduler (sched/serve_simulation.h), its steps priced by
// what `brisk plan calibrate` measured for the model on this device (Efficiency::MeasuredSteps),
// for the same loads as the roofline simulation in queueing_model.h. Each scheduler option is
// brisk serve's for the deployment: --max-seqs (the closed loop's users or the burst's requests
// when the deployment names none; 16, serve's default, for Poisson arrivals), the step budget
// and chunking flags, the prefix cache on, and a --ctx-size that holds every running request.
LoadPrediction served_burst(const Deployment& deployment, const Efficiency::MeasuredSteps& steps,
                            int input_tokens, int output_tokens, int requests, int cached_tokens);
LoadPrediction served_closed_loop(const Deployment& deployment,
                                  const Efficiency::MeasuredSteps& steps, int input_tokens,
                                  int output_tokens, int concurrency, int cached_tokens);
// Saturated when the rate is at or above what the server completes with every sequence busy
// (a closed loop of --max-seqs users, simulated the same way).
LoadPrediction served_open_loop(const Deployment& deployment,
                                const Efficiency::MeasuredSteps& steps, int input_tokens,
                                int output_tokens, double rate_per_s,
                                const std::optional<ArrivalSample>& sample, int cached_tokens);

}  // namespace brisk::plan
