#include "doctor/what_if.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <fmt/format.h>

#include "doctor/rules.h"
#include "plan/calibration.h"
#include "plan/capacity_planner.h"
#include "plan/model_profile.h"
#include "plan/precision.h"
#include "plan/queueing_model.h"

namespace brisk::doctor {

namespace {

// The serve flags the simulation models, applied to `deployment`; the first it does not model
// is returned (empty: all applied). `--prefix-cache on` is the prefix probe's own case.
std::string apply_serve_flags(const std::vector<std::string>& flags, plan::Deployment& deployment) {
  for (size_t i = 0; i + 1 < flags.size(); i += 2) {
    const std::string& flag = flags[i];
    const int value = std::atoi(flags[i + 1].c_str());
    if (flag == "--max-seqs") {
      deployment.max_sequences = value;
    } else if (flag == "--max-batched-tokens") {
      deployment.step_token_budget = value;
    } else if (flag == "--target-itl-ms") {
      deployment.chunking.target_step_ms = value;
    } else if (flag == "--long-prefill-tokens") {
      deployment.chunking.long_prefill_tokens = value;
    } else if (flag != "--prefix-cache") {
      return flag;
    }
  }
  return flags.size() % 2 == 0 ? "" : flags.back();
}

std::string closed_loop_load(int concurrency, int input_tokens, int output_tokens) {
  return fmt::format("{} concurrent, {}-token prompts, {}-token answers", concurrency, input_tokens,
                     output_tokens);
}

// p99 TTFT of the top of the ramp, with the number of requests the server ran at once as the
// evidence shows it (`running_before`) and as the prescription sets it.
std::optional<PredictedEffect> ramp_ttft(const Evidence& evidence, const WhatIfModel& model,
                                         const plan::Deployment& prescribed, int running_before) {
  const ProbePoint* top = ramp_top(evidence);
  if (!top) return std::nullopt;
  const int input = std::max(1, static_cast<int>(std::lround(top->prompt_tokens_mean > 0
                                                                 ? top->prompt_tokens_mean
                                                                 : evidence.workload.short_input_tokens)));
  const int output = std::max(1, evidence.workload.short_output_tokens);
  plan::Deployment before = model.deployment;
  before.max_sequences = std::max(1, running_before);
  PredictedEffect effect;
  effect.metric = "p99 TTFT";
  effect.before = plan::predict_closed_loop(before, input, output, top->concurrency).ttft_ms.p99;
  effect.after = plan::predict_closed_loop(prescribed, input, output, top->concurrency).ttft_ms.p99;
  effect.measured = top->ttft_ms.count > 0 ? top->ttft_ms.p99 : -1;
  effect.load = closed_loop_load(top->concurrency, input, output);
  return effect;
}

// The longest step a `prompt_tokens` prompt puts between the tokens of `decoding` streams whose
// context is `context`: chunk by chunk, each as the deployment cuts it.
double longest_gap_ms(const plan::Deployment& deployment, double decoding, double context,
                      int prompt_tokens) {
  double done = 0;
  double longest = 0;
  while (done < prompt_tokens) {
    double room = std::max(1.0, deployment.step_token_budget - decoding);
    room = deployment.timed_prefill_tokens(decoding, context, done, room);
    const double take = std::max(1.0, std::min(room, prompt_tokens - done));
    longest = std::max(longest, deployment.step(decoding, context, take, done).total_ms);
    done += take;
  }
  return longest;
}

// Short streams' longest token gap while one long prompt is prefilled: whole, in one step (what
// the stall shows), against the prescribed chunking.
std::optional<PredictedEffect> long_prompt_gap(const Evidence& evidence, const WhatIfModel& model,
                                               const plan::Deployment& prescribed) {
  const ProbePoint& shorts = evidence.mixed_short;
  const ProbePoint& longs = evidence.long_baseline;
  const int prompt = static_cast<int>(std::lround(longs.prompt_tokens_mean > 0
                                                      ? longs.prompt_tokens_mean
                                                      : evidence.workload.long_input_tokens));
  if (prompt < 1 || !shorts.measured()) return std::nullopt;
  const double decoding = std::max(1, shorts.concurrency);
  const double context = evidence.workload.short_input_tokens +
                         evidence.workload.mixed_short_output_tokens / 2.0;
  plan::Deployment whole = model.deployment;
  whole.chunking.target_step_ms = 0;
  whole.chunking.long_prefill_tokens = 0;
  whole.step_token_budget = std::max(whole.step_token_budget, prompt + static_cast<int>(decoding));
  PredictedEffect effect;
  effect.metric = "short streams' longest token gap";
  effect.before = longest_gap_ms(whole, decoding, context, prompt);
  effect.after = longest_gap_ms(prescribed, decoding, context, prompt);
  effect.measured = shorts.max_itl_ms > 0 ? shorts.max_itl_ms : -1;
  effect.load = fmt::format("{} short streams decoding while a {}-token prompt arrives",
                            shorts.concurrency, prompt);
  return effect;
}

// TTFT p50 of the repeated-prefix probe, every prompt computed against its shared part cached.
std::optional<PredictedEffect> prefix_ttft(const Evidence& evidence, const WhatIfModel& model) {
  const ProbePoint& repeated = evidence.prefix;
  if (!repeated.measured() || repeated.prompt_tokens_mean < 1) return std::nullopt;
  const int input = static_cast<int>(std::lround(repeated.prompt_tokens_mean));
  const int output = std::max(1, evidence.workload.long_output_tokens);
  const int cached =
      std::clamp(static_cast<int>(evidence.prefix_shared_fraction * input), 0, input - 1);
  PredictedEffect effect;
  effect.metric = "TTFT p50";
  effect.before =
      plan::predict_closed_loop(model.deployment, input, output, repeated.concurrency).ttft_ms.p50;
  effect.after = plan::predict_closed_loop(model.deployment, input, output, repeated.concurrency,
                                           cached)
                     .ttft_ms.p50;
  effect.measured = repeated.ttft_ms.count > 0 ? repeated.ttft_ms.p50 : -1;
  effect.load = closed_loop_load(repeated.concurrency, input, output) +
                fmt::format(", {:.0f}% of each prompt shared", evidence.prefix_shared_fraction * 100);
  return effect;
}

std::optional<PredictedEffect> predict(const Evidence& evidence, const WhatIfModel& model,
                                       const Finding& finding, std::string& why_not) {
  plan::Deployment prescribed = model.deployment;
  const std::string unmodelled = apply_serve_flags(finding.serve_flags, prescribed);
  if (!unmodelled.empty()) {
    why_not = "brisk plan does not model " + unmodelled;
    return std::nullopt;
  }
  std::optional<PredictedEffect> effect;
  if (finding.id == "no_batching") {
    // One request at a time (the gauge says at most one ran, or the latencies say so).
    effect = ramp_ttft(evidence, model, prescribed, 1);
  } else if (finding.id == "queueing") {
    effect = ramp_ttft(evidence, model, prescribed,
                       static_cast<int>(evidence.metrics.running_max.value_or(0)));
  } else if (finding.id == "head_of_line_blocking") {
    effect = long_prompt_gap(evidence, model, prescribed);
  } else if (finding.id == "prefix_not_cached") {
    effect = prefix_ttft(evidence, model);
  } else {
    why_not = "no simulated load for " + finding.id;
    return std::nullopt;
  }
  if (!effect) why_not = "the probe did not measure the load it happens at";
  return effect;
}

}  // namespace

std::optional<WhatIfModel> what_if_model(const std::string& model, const std::string& device_id,
                                         std::string& why_not) {
  std::string error;
  auto catalog = plan::HardwareCatalog::load("", &error);
  if (!catalog) {
    why_not = "no hardware catalog: " + error;
    return std::nullopt;
  }
  const plan::DeviceSpec* device = catalog->find(device_id);
  if (!device) {
    why_not = device_id.empty() ? "no device: pass --device (e.g. cpu-2vcpu)"
                                : "unknown device '" + device_id + "'";
    return std::nullopt;
  }
  auto profile = plan::resolve_model_profile(model, &error);
  if (!profile) {
    why_not = "model '" + model + "' not resolved (" + error + "); pass --model-file";
    return std::nullopt;
  }
  plan::PlanRequest request;
  request.precision =
      profile->stored_precision ? *profile->stored_precision : *plan::parse_precision("bf16");
  request.model = std::move(*profile);
  request.calibrated = plan::load_calibrations(plan::calibration_file());
  WhatIfModel what_if;
  what_if.catalog = std::make_shared<const plan::HardwareCatalog>(std::move(*catalog));
  what_if.deployment = plan::deployment_for(request, *what_if.catalog->find(device_id), 1);
  const auto calibrated = request.calibrated.find(device_id);
  what_if.origin = "brisk plan, " + device_id + ", " +
                   (calibrated != request.calibrated.end()
                        ? calibrated->second.origin
                        : what_if.deployment.efficiency.origin +
                              " (uncalibrated: run brisk plan calibrate)");
  return what_if;
}

void predict_effects(const Evidence& evidence, const std::optional<WhatIfModel>& model,
                     const std::string& why_not, std::vector<Finding>& findings) {
  for (Finding& finding : findings) {
    finding.predicted_effect.reset();
    finding.predicted_effect_unavailable.clear();
    if (finding.serve_flags.empty()) continue;
    if (!model) {
      finding.predicted_effect_unavailable = why_not;
      continue;
    }
    std::string reason;
    finding.predicted_effect = predict(evidence, *model, finding, reason);
    if (finding.predicted_effect) {
      finding.predicted_effect->origin = model->origin;
    } else {
      finding.predicted_effect_unavailable = reason;
    }
  }
}

std::string describe_predicted_effect(const PredictedEffect& effect) {
  const double percent = effect.change() * 100;
  std::string text = fmt::format("{} {}{:.0f}% ({:.0f} → {:.0f} {} at {}", effect.metric,
                                 percent < 0 ? "−" : "+", std::fabs(percent), effect.before,
                                 effect.after, effect.unit, effect.load);
  if (effect.measured >= 0) {
    text += fmt::format("; measured now {:.0f} {}", effect.measured, effect.unit);
  }
  return text + "; " + effect.origin + ")";
}

}  // namespace brisk::doctor
