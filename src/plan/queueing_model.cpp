#include "plan/queueing_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/percentile.h"

namespace brisk::plan {

double Percentiles::at(const std::string& stat) const {
  if (stat == "p50") return p50;
  if (stat == "p95") return p95;
  if (stat == "p99") return p99;
  return mean;
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

// Waiting time of an M/D/1 queue at utilisation rho with service time s: mean rho s/(2(1-rho)),
// tail approximated as P(W > t) = rho exp(-rho t / mean), which keeps that mean.
double md1_wait_mean(double rho, double service_ms) {
  return rho <= 0 ? 0 : rho * service_ms / (2 * (1 - rho));
}

double md1_wait_quantile(double rho, double service_ms, double q) {
  if (rho <= 0 || rho <= 1 - q) return 0;
  return md1_wait_mean(rho, service_ms) / rho * std::log(rho / (1 - q));
}

// Everything that follows from a throughput and the decode batch a request sees.
// `others_per_s` is the arrival rate of the other requests a tagged one shares the engine with:
// the whole rate for Poisson arrivals, (C-1)/C of it for C closed-loop users.
LoadPrediction evaluate(const Deployment& deployment, int input_tokens, int output_tokens,
                        double requests_per_s, double others_per_s, double decode_batch_seen,
                        double wait_cap_ms) {
  LoadPrediction prediction;
  const double decode_context = input_tokens + output_tokens / 2.0;
  const double step_ms = deployment.step(decode_batch_seen, decode_context).total_ms;
  const double prompt_extra_ms =
      deployment.prefill_extra_ms(input_tokens, decode_batch_seen, decode_context);
  const int chunks = deployment.prefill_chunks(input_tokens, decode_batch_seen);
  prediction.prefill_share = others_per_s * prompt_extra_ms / 1000;
  if (prediction.prefill_share >= 1) {
    prediction.saturated = true;
    return prediction;
  }
  const double tpot_mean_ms = step_ms / (1 - prediction.prefill_share);
  const int decode_steps = std::max(1, output_tokens - 1);

  // Prompt chunks of other requests that land inside this request's decode (Poisson).
  const double chunk_extra_ms = prompt_extra_ms / chunks;
  const double interleaved_mean = others_per_s * decode_steps * tpot_mean_ms / 1000 * chunks;
  auto tpot_at = [&](double q) {
    return step_ms + poisson_quantile(interleaved_mean, q) * chunk_extra_ms / decode_steps;
  };
  prediction.tpot_ms = {tpot_mean_ms, tpot_at(0.5), tpot_at(0.95), tpot_at(0.99)};

  // The prompt itself: its chunks ride on decode steps; before it, other prompts queue (M/D/1).
  const double prompt_service_ms = chunks * step_ms + prompt_extra_ms;
  const double prompt_rho = others_per_s * prompt_service_ms / 1000;
  if (prompt_rho >= 1 && wait_cap_ms <= 0) {
    prediction.saturated = true;
    return prediction;
  }
  const double rho = std::min(prompt_rho, 0.999);
  auto capped = [&](double wait_ms) {
    return wait_cap_ms > 0 ? std::min(wait_ms, wait_cap_ms) : wait_ms;
  };
  // A prompt that arrives while a step runs waits for its end (uniform residual); the engine is
  // busy with others with probability 1 - exp(-others in flight).
  const double busy = 1 - std::exp(-(decode_batch_seen - 1));
  auto residual_ms = [&](double q) { return busy > 1 - q ? step_ms * (1 - (1 - q) / busy) : 0.0; };
  auto ttft_at = [&](double q) {
    return prompt_service_ms + residual_ms(q) +
           capped(md1_wait_quantile(rho, prompt_service_ms, q));
  };
  prediction.ttft_ms = {
      prompt_service_ms + busy * step_ms / 2 + capped(md1_wait_mean(rho, prompt_service_ms)),
      ttft_at(0.5), ttft_at(0.95), ttft_at(0.99)};

  prediction.e2e_ms = prediction.ttft_ms.mean + decode_steps * tpot_mean_ms;
  prediction.request_throughput = requests_per_s;
  prediction.output_token_throughput = requests_per_s * output_tokens;
  return prediction;
}

}  // namespace

LoadPrediction predict_closed_loop(const Deployment& deployment, int input_tokens,
                                   int output_tokens, int concurrency) {
  const double users = std::max(1, concurrency);
  // Start as if every user decoded all the time, then iterate throughput to its fixed point.
  double decode_fraction = 1.0;
  LoadPrediction first = evaluate(deployment, input_tokens, output_tokens, 0, 0, users, 0);
  double throughput = users / (first.e2e_ms / 1000);
  // No prompt waits longer than for every other user's prompt.
  const double cap_ms = (users - 1) * first.ttft_ms.mean + 1e-9;
  LoadPrediction prediction;
  for (int iteration = 0; iteration < 200; ++iteration) {
    const double batch_seen = 1 + (users - 1) * decode_fraction;
    const double others_per_s = throughput * (users - 1) / users;
    prediction = evaluate(deployment, input_tokens, output_tokens, throughput, others_per_s,
                          batch_seen, cap_ms);
    if (prediction.saturated) {  // prompts alone fill the engine: slow down and retry
      throughput *= 0.8;
      continue;
    }
    const double next_throughput = users / (prediction.e2e_ms / 1000);
    const double decode_ms = std::max(1, output_tokens - 1) * prediction.tpot_ms.mean;
    decode_fraction = decode_ms / prediction.e2e_ms;
    if (std::abs(next_throughput - throughput) < 1e-6 * throughput) break;
    throughput = 0.5 * throughput + 0.5 * next_throughput;
  }
  prediction.decode_batch = users * decode_fraction;
  prediction.in_flight = users;
  prediction.in_flight_p99 = users;
  return prediction;
}

LoadPrediction predict_open_loop(const Deployment& deployment, int input_tokens, int output_tokens,
                                 double rate_per_s) {
  double decode_batch = 0;
  LoadPrediction prediction;
  for (int iteration = 0; iteration < 200; ++iteration) {
    prediction = evaluate(deployment, input_tokens, output_tokens, rate_per_s, rate_per_s,
                          1 + decode_batch, /*wait_cap_ms=*/0);
    if (prediction.saturated) return prediction;
    // Little's law on the decode stage.
    const double next_batch =
        rate_per_s * std::max(1, output_tokens - 1) * prediction.tpot_ms.mean / 1000;
    if (next_batch > 1e5) {
      prediction.saturated = true;
      return prediction;
    }
    if (std::abs(next_batch - decode_batch) < 1e-6 * (1 + decode_batch)) break;
    decode_batch = 0.5 * decode_batch + 0.5 * next_batch;
  }
  prediction.decode_batch = decode_batch;
  prediction.in_flight = rate_per_s * prediction.e2e_ms / 1000;
  prediction.in_flight_p99 = poisson_quantile(prediction.in_flight, 0.99);
  return prediction;
}

namespace {

// The burst's simulated requests, summarized as brisk bench summarizes measured ones (it was
// nearest-rank, so a prediction and a measurement of the same burst used two definitions).
Percentiles percentiles_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (const double value : values) sum += value;
  return {sum / values.size(), percentile_linear(values, 50), percentile_linear(values, 95),
          percentile_linear(values, 99)};
}

}  // namespace

LoadPrediction predict_burst(const Deployment& deployment, int input_tokens, int output_tokens,
                             int requests) {
  const int count = std::max(1, requests);
  std::vector<double> first_token_ms(count, 0);
  std::vector<int> tokens_out(count, 0);  // tokens each request has received
  double now_ms = 0;
  int prefilled = 0;    // requests whose prompt is done
  int prompt_done = 0;  // tokens of the current prompt already prefilled
  while (prefilled < count) {
    // Decode first: every prefilled request still generating gets one token this step.
    int decoding = 0;
    for (int index = 0; index < prefilled; ++index) decoding += tokens_out[index] < output_tokens;
    double room = std::max(1, deployment.step_token_budget - decoding);
    double prompt_tokens = 0;
    const int first_in_step = prefilled;
    std::vector<int> finished_prompts;
    while (room > 0 && prefilled < count) {
      const double take = std::min<double>(room, input_tokens - prompt_done);
      prompt_tokens += take;
      room -= take;
      prompt_done += static_cast<int>(take);
      if (prompt_done == input_tokens) {
        finished_prompts.push_back(prefilled++);
        prompt_done = 0;
      }
    }
    now_ms +=
        deployment
            .step(decoding, input_tokens + output_tokens / 2.0, prompt_tokens, input_tokens / 2.0)
            .total_ms;
    for (int index = 0; index < first_in_step; ++index) {
      if (tokens_out[index] < output_tokens) ++tokens_out[index];
    }
    for (const int index : finished_prompts) {
      first_token_ms[index] = now_ms;
      tokens_out[index] = 1;  // the prompt's step samples its first token
    }
  }
  const double step_ms = deployment.step(count, input_tokens + output_tokens / 2.0).total_ms;
  std::vector<double> tpot_ms(count);
  std::vector<double> e2e_ms(count);
  for (int index = 0; index < count; ++index) {
    e2e_ms[index] = now_ms + (output_tokens - tokens_out[index]) * step_ms;
    tpot_ms[index] =
        output_tokens > 1 ? (e2e_ms[index] - first_token_ms[index]) / (output_tokens - 1) : 0;
  }
  LoadPrediction prediction;
  prediction.ttft_ms = percentiles_of(first_token_ms);
  prediction.tpot_ms = percentiles_of(tpot_ms);
  prediction.e2e_ms = percentiles_of(e2e_ms).mean;
  prediction.decode_batch = count;
  prediction.in_flight = prediction.in_flight_p99 = count;
  const double makespan_ms = *std::max_element(e2e_ms.begin(), e2e_ms.end());
  prediction.request_throughput = count / (makespan_ms / 1000);
  prediction.output_token_throughput = prediction.request_throughput * output_tokens;
  return prediction;
}

}  // namespace brisk::plan
