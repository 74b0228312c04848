#include "plan/capacity_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace brisk::plan {
namespace {

constexpr int kMaxUsersSearched = 4096;

double predicted(const LoadPrediction& prediction, const SloLimit& limit) {
  if (limit.metric == "e2e") return prediction.e2e_ms;
  const Percentiles& values = limit.metric == "ttft" ? prediction.ttft_ms : prediction.tpot_ms;
  return values.at(limit.stat);
}


// `users` requests in flight: a steady closed loop, or one burst with --burst.
LoadPrediction predict_users(const Deployment& deployment, const Workload& workload, int users) {
  if (workload.burst) {
    return predict_burst(deployment, workload.input_tokens, workload.output_tokens, users,
                         workload.cached_prompt_tokens);
  }
  return predict_closed_loop(deployment, workload.input_tokens, workload.output_tokens, users,
                             workload.cached_prompt_tokens);
}

int sequence_tokens(const Workload& workload) {
  return workload.input_tokens + workload.output_tokens;
}

// The most closed-loop users one replica serves within the SLO and its KV memory; 0 if not one.
int max_users(const PlanRequest& request, const Deployment& deployment, int memory_users) {
  const Workload& workload = request.workload;
  auto ok = [&](int users) {
    return meets(request.slo, predict_users(deployment, workload, users));
  };
  const int cap = std::min(memory_users, kMaxUsersSearched);
  if (cap < 1 || !ok(1)) return 0;
  int good = 1;
  int bad = cap + 1;
  for (int users = 2; users <= cap; users *= 2) {
    if (!ok(users)) {
      bad = users;
      break;
    }
    good = users;
  }
  if (bad == cap + 1 && good < cap && ok(cap)) return cap;
  while (bad - good > 1) {
    const int middle = (good + bad) / 2;
    (ok(middle) ? good : bad) = middle;
  }
  return good;
}

// The highest Poisson rate one replica serves within the SLO and memory (bisection).
double max_rate(const PlanRequest& request, const Deployment& deployment, int memory_users,
                double tolerance = 0) {
  const Workload& workload = request.workload;
  auto ok = [&](double rate) {
    const LoadPrediction prediction =
        predict_open_loop(deployment, workload.input_tokens, workload.output_tokens, rate,
                          std::nullopt, workload.cached_prompt_tokens);
    return !prediction.saturated && prediction.in_flight_p99 <= memory_users &&
           meets(request.slo, prediction);
  };
  double good = 0;
  double bad = 1;
  while (ok(bad) && bad < 1e6) {
    good = bad;
    bad *= 2;
  }
  // brisk serve's own scheduler costs more per simulation than the roofline's: to 1%.
  if (tolerance <= 0) tolerance = deployment.measured_steps() ? 1e-2 : 1e-4;
  for (int step = 0; step < 40 && bad - good > tolerance * bad; ++step) {
    const double middle = (good + bad) / 2;
    (ok(middle) ? good : bad) = middle;
  }
  return good;
}

// Sizes one device type: the fewest devices per replica that hold the model, then enough
// replicas for the target load; more devices per replica when that is cheaper or needed to
// meet the SLO at all.
Candidate size_device(const PlanRequest& request, const DeviceSpec& device) {
  const Workload& workload = request.workload;
  std::optional<Candidate> best;
  std::optional<Candidate> failure;  // the first that does not fit, or the last that misses
  const int largest_group =
      device.is_gpu() ? std::min(device.max_per_node, request.max_devices) : 1;
  for (int devices = 1; devices <= largest_group; devices *= 2) {
    Candidate candidate;
    candidate.deployment = deployment_for(request, device, devices);
    candidate.usd_per_hour = device.usd_per_hour * devices;
    const MemoryBreakdown one =
        memory_for(candidate.deployment, 1, sequence_tokens(workload), request.headroom);
    candidate.fits = one.fits;
    if (!one.fits) {
      candidate.memory = one;
      candidate.problem =
          fmt::format("needs {:.1f} GB per device, {:.1f} GB usable", one.total_gb, one.usable_gb);
      if (!failure) failure = candidate;
      continue;
    }
    candidate.max_concurrency = max_users(request, candidate.deployment, one.max_sequences);
    if (candidate.max_concurrency == 0) {
      std::vector<std::string> misses;
      meets(request.slo, predict_users(candidate.deployment, workload, 1), &misses);
      candidate.problem =
          "even one request misses the SLO: " + fmt::format("{}", fmt::join(misses, ", "));
      candidate.memory = one;
      failure = candidate;
      continue;
    }
    candidate.at_capacity =
        predict_users(candidate.deployment, workload, candidate.max_concurrency);
    double resident_sequences = 0;
    if (workload.rate_per_s > 0) {
      candidate.max_rate_per_s = max_rate(request, candidate.deployment, one.max_sequences);
      candidate.replicas =
          candidate.max_rate_per_s > 0
              ? static_cast<int>(std::ceil(workload.rate_per_s / candidate.max_rate_per_s - 1e-9))
              : 0;
      if (candidate.replicas > 0) {
        candidate.at_target =
            predict_open_loop(candidate.deployment, workload.input_tokens, workload.output_tokens,
                              workload.rate_per_s / candidate.replicas, workload.arrival_sample,
                              workload.cached_prompt_tokens);
        resident_sequences = candidate.at_target.in_flight_p99;
      }
    } else {
      const int users = std::max(1, workload.concurrency);
      candidate.replicas =
          static_cast<int>(std::ceil(static_cast<double>(users) / candidate.max_concurrency));
      const int users_per_replica =
          static_cast<int>(std::ceil(static_cast<double>(users) / candidate.replicas));
      candidate.at_target = predict_users(candidate.deployment, workload, users_per_replica);
      resident_sequences = users_per_replica;
    }
    candidate.memory = memory_for(candidate.deployment, std::max(1.0, resident_sequences),
                                  sequence_tokens(workload), request.headroom);
    candidate.usd_per_hour = device.usd_per_hour * candidate.device_count();
    if (candidate.at_capacity.output_token_throughput > 0) {
      candidate.usd_per_million_output_tokens =
          device.usd_per_hour * devices / (candidate.at_capacity.output_token_throughput * 3600) *
          1e6;
    }
    if (candidate.replicas == 0) {
      candidate.problem = "no rate meets the SLO";
    } else if (candidate.device_count() > request.max_devices) {
      candidate.problem = fmt::format("needs {} devices, more than --max-devices {}",
                                      candidate.device_count(), request.max_devices);
    } else {
      candidate.meets_slo = true;
    }
    const bool better =
        !best || (candidate.meets_slo && !best->meets_slo) ||
        (candidate.meets_slo == best->meets_slo && candidate.usd_per_hour < best->usd_per_hour);
    if (better) best = candidate;
  }
  if (!best) return *failure;
  // The spread of the one group size kept, not of every size tried.
  LoadPrediction& target = best->at_target;
  if (workload.rate_per_s > 0 && best->replicas > 0 && !target.saturated &&
      request.spread_runs > 0) {
    const auto& sample = workload.arrival_sample;
    target.spread = predict_open_loop_spread(
        best->deployment, workload.input_tokens, workload.output_tokens,
        workload.rate_per_s / best->replicas,
        sample ? sample->requests : PlanRequest::kSpreadRequests, sample ? sample->seed : 0,
        request.spread_runs, workload.cached_prompt_tokens);
  }
  return *best;
}

bool ranks_before(const Candidate& a, const Candidate& b) {
  if (a.meets_slo != b.meets_slo) return a.meets_slo;
  if (a.fits != b.fits) return a.fits;
  if (a.meets_slo && a.usd_per_hour != b.usd_per_hour) return a.usd_per_hour < b.usd_per_hour;
  return a.at_target.tpot_ms.mean < b.at_target.tpot_ms.mean;
}

std::vector<std::string> explain_choice(const PlanRequest& request, const Plan& plan) {
  std::vector<std::string> reasons;
  const Candidate& chosen = plan.candidates[*plan.recommended];
  const Deployment& deployment = chosen.deployment;
  const MemoryBreakdown& memory = chosen.memory;
  reasons.push_back(fmt::format(
      "Memory fits: {:.1f} GB of weights + {:.1f} GB of KV cache + {:.1f} GB of activations and "
      "runtime = {:.1f} GB per device, within the {:.1f} GB usable of {:.0f} GB ({:.0f}% kept "
      "free).",
      memory.weights_gb, memory.kv_cache_gb, memory.activations_gb + memory.runtime_gb,
      memory.total_gb, memory.usable_gb, memory.capacity_gb, request.headroom * 100));
  const LoadPrediction& load = chosen.at_target;
  const StepCost step =
      deployment.step(std::max(1.0, load.decode_batch),
                      request.workload.input_tokens + request.workload.output_tokens / 2.0);
  reasons.push_back(fmt::format(
      "Decode is {}-bound: a step of {:.0f} sequence(s) reads {:.2f} GB and does {:.2f} TFLOP per "
      "device, {:.1f} ms; prompts take {:.0f}% of engine time, so TPOT is {:.1f} ms (p95 {:.1f}).",
      step.memory_bound() ? "memory-bandwidth" : "compute", std::max(1.0, load.decode_batch),
      (step.weight_bytes + step.kv_bytes) / 1e9, step.flops / 1e12, step.total_ms,
      load.prefill_share * 100, load.tpot_ms.mean, load.tpot_ms.p95));
  const int cached_tokens = request.workload.cached_prompt_tokens;
  reasons.push_back(fmt::format(
      "TTFT is {:.0f} ms at p95: the {}-token prompt{} takes {:.0f} ms alone, plus queueing "
      "behind other prompts.",
      load.ttft_ms.p95, request.workload.input_tokens,
      cached_tokens > 0 ? fmt::format(" ({} of them from the prefix cache)", cached_tokens) : "",
      deployment.prefill_ms(request.workload.input_tokens, cached_tokens)));
  std::string cheapest =
      fmt::format("{} x {} ({} per replica, {} replica{}) costs ${:.2f}/hour for the target load",
                  chosen.device_count(), deployment.device->id, deployment.devices, chosen.replicas,
                  chosen.replicas > 1 ? "s" : "", chosen.usd_per_hour);
  for (size_t index = 0; index < plan.candidates.size(); ++index) {
    const Candidate& other = plan.candidates[index];
    if (index != *plan.recommended && other.meets_slo) {
      cheapest += fmt::format("; the next, {} x {}, ${:.2f}/hour", other.device_count(),
                              other.deployment.device->id, other.usd_per_hour);
      break;
    }
  }
  reasons.push_back("Cheapest that meets the SLO: " + cheapest + ".");
  reasons.push_back("Efficiencies: " + deployment.efficiency.origin + ".");
  return reasons;
}

}  // namespace

Deployment deployment_for(const PlanRequest& request, const DeviceSpec& device, int devices) {
  Deployment deployment;
  deployment.device = &device;
  deployment.devices = devices;
  deployment.model = request.model;
  deployment.precision = request.precision;
  const auto calibrated = request.calibrated.find(device.id);
  deployment.efficiency = calibrated != request.calibrated.end() ? calibrated->second
                                                                 : Efficiency::defaults_for(device);
  deployment.kv_bytes_per_element = request.kv_bytes_per_element;
  deployment.step_token_budget = request.step_token_budget;
  deployment.chunking = request.chunking;
  deployment.simulate_server = request.simulate_server;
  if (deployment.measured_steps()) {
    deployment.efficiency.origin +=
        "; loads predicted by brisk serve's own scheduler on the steps measured for " +
        request.model.name;
  }
  return deployment;
}

bool meets(const std::vector<SloLimit>& slo, const LoadPrediction& prediction,
           std::vector<std::string>* misses) {
  if (prediction.saturated) {
    if (misses) misses->push_back("saturated");
    return false;
  }
  bool all = true;
  for (const SloLimit& limit : slo) {
    const double value = predicted(prediction, limit);
    if (value > limit.limit_ms) {
      all = false;
      if (misses) {
        misses->push_back(fmt::format("{}_{} {:.1f} ms > {:g} ms", limit.metric, limit.stat, value,
                                      limit.limit_ms));
      }
    }
  }
  return all;
}

double predict_max_rate(const PlanRequest& request, const DeviceSpec& device, int max_sequences,
                        double tolerance) {
  Deployment deployment = deployment_for(request, device, 1);
  const MemoryBreakdown one =
      memory_for(deployment, 1, sequence_tokens(request.workload), request.headroom);
  if (!one.fits) return 0;
  // More than --max-seqs wait in the queue (their TTFT tells); more than memory holds cannot run.
  deployment.max_sequences = max_sequences > 0 ? std::min(max_sequences, one.max_sequences)
                                               : one.max_sequences;
  return max_rate(request, deployment, one.max_sequences, tolerance);
}

std::optional<Plan> make_plan(const PlanRequest& request, const HardwareCatalog& catalog,
                              std::string* error) {
  for (const SloLimit& limit : request.slo) {
    if (limit.metric == "itl" || limit.stat == "p90" || limit.stat == "max") {
      *error = fmt::format(
          "brisk plan predicts ttft and tpot at mean, p50, p95 and p99, and e2e as a mean; "
          "'{}_{}' is not one of them",
          limit.metric, limit.stat);
      return std::nullopt;
    }
    // Its E2E is the mean request's; checking an e2e_p99 limit against it would pass runs
    // whose slow requests miss it.
    if (limit.metric == "e2e" && limit.stat != "mean") {
      *error = fmt::format(
          "brisk plan predicts e2e as a mean only: use e2e_mean (or limit ttft_{} and "
          "tpot_{}, whose sum bounds a request's e2e)",
          limit.stat, limit.stat);
      return std::nullopt;
    }
  }
  if (request.workload.input_tokens < 1 || request.workload.output_tokens < 1) {
    *error = "--isl and --osl must be at least 1";
    return std::nullopt;
  }
  std::vector<const DeviceSpec*> devices;
  if (request.devices.empty()) {
    for (const DeviceSpec& device : catalog.devices()) devices.push_back(&device);
  }
  for (const std::string& id : request.devices) {
    const DeviceSpec* device = catalog.find(id);
    if (device == nullptr) {
      *error = "unknown device '" + id + "'; the catalog has: " + catalog.ids();
      return std::nullopt;
    }
    devices.push_back(device);
  }
  Plan plan;
  for (const DeviceSpec* device : devices) {
    plan.candidates.push_back(size_device(request, *device));
  }
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(), ranks_before);
  if (!plan.candidates.empty() && plan.candidates.front().meets_slo) {
    plan.recommended = 0;
    plan.reasons = explain_choice(request, plan);
  }
  return plan;
}

}  // namespace brisk::plan
