#include "plan/calibration.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/model_store.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "sched/cost_warmup.h"
#include "sched/step_cost_table_json.h"

namespace brisk::plan {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

struct ModelRun {
  Deployment deployment;
  Efficiency::MeasuredSteps steps;  // as brisk serve's warm-up measures them
  std::vector<StepSample> samples;
  std::vector<double> sample_ns_per_vocab_entry;  // one per decode step timed
};

// Prompt tokens drawn from the middle of the vocabulary (ordinary words, not control tokens).
Token filler_token(int index, int vocabulary) {
  const int low = std::min(1000, vocabulary / 4);
  const int span = std::max(1, std::min(vocabulary, 30000) - low);
  return low + static_cast<Token>((static_cast<int64_t>(index) * 7919) % span);
}

struct TimedStep {
  double total_ms = -1;
  double sample_ms = 0;
};

// Times one decode and, like serving, a pick for every sequence with logits. The sampler is the
// OpenAI default (temperature 1, the whole vocabulary), what a request that sets nothing gets.
TimedStep timed_decode(Engine& engine, std::vector<std::unique_ptr<Sampler>>& samplers,
                       const std::vector<int>& logit_rows, std::string* error) {
  TimedStep timed;
  const auto start = Clock::now();
  if (engine.decode() != DecodeStatus::ok) {
    *error = "llama_decode failed while calibrating (too little memory for the batches?)";
    return timed;
  }
  engine.synchronize();
  const auto sampling = Clock::now();
  for (size_t row = 0; row < logit_rows.size(); ++row) {
    engine.sample(*samplers[row], logit_rows[row]);
  }
  timed.sample_ms = ms_between(sampling, Clock::now());
  timed.total_ms = ms_between(start, Clock::now());
  return timed;
}

// The steps brisk serve's scheduler prices, measured by its own warm-up (sched/cost_warmup.h)
// with every timed batch: the planner's simulation of brisk serve runs on them.
bool measure_serve_steps(Engine& engine, const CalibrationOptions& options, int max_batch,
                         Efficiency::MeasuredSteps& steps, std::string* error) {
  // The chunk brisk serve's warm-up times (StepScheduler::warm_up).
  constexpr int kServeWarmupChunkTokens = 128;
  // Twice over, the faster step of each kind kept (the first run still faults in buffers); of
  // the per-cell slope, measured near its noise (it can come out 0), the larger.
  StepCostTable best;
  for (int run = 0; run < 2; ++run) {
    StepCosts costs(0, std::max(options.prefill_tokens, max_batch));
    if (!warm_up_step_costs(engine, costs, max_batch, kServeWarmupChunkTokens, Clock::now,
                            options.decode_batches)
             .ok) {
      *error = "the serve warm-up's steps failed while calibrating (too little memory?)";
      return false;
    }
    const StepCostTable table = costs.table();
    if (run == 0) {
      best = table;
      continue;
    }
    for (const auto& [batch, ms] : table.decode_ms_by_batch) {
      auto& kept = best.decode_ms_by_batch[batch];
      kept = kept > 0 ? std::min(kept, ms) : ms;
    }
    best.prefill_ms_per_token = std::min(best.prefill_ms_per_token, table.prefill_ms_per_token);
    if (table.small_chunk_prefill_ms_per_token > 0) {
      best.small_chunk_prefill_ms_per_token =
          best.small_chunk_prefill_ms_per_token > 0
              ? std::min(best.small_chunk_prefill_ms_per_token, table.small_chunk_prefill_ms_per_token)
              : table.small_chunk_prefill_ms_per_token;
    }
    best.row_cell_ms = std::max(best.row_cell_ms, table.row_cell_ms);
  }
  steps.table = best;
  steps.attention_on_gpu = engine.attention_on_gpu();
  return true;
}

std::optional<ModelRun> measure_model(const CalibrationOptions& options, const std::string& path,
                                      const DeviceSpec& device, std::string* error) {
  ModelRun run;
  auto profile = profile_from_gguf(path, error);
  if (!profile) return std::nullopt;
  run.deployment.device = &device;
  run.deployment.model = *profile;
  run.deployment.precision = *profile->stored_precision;
  run.deployment.step_token_budget = options.prefill_tokens;

  const int max_batch =
      *std::max_element(options.decode_batches.begin(), options.decode_batches.end());
  EngineOptions engine_options;
  engine_options.model_path = path;
  engine_options.max_seqs = max_batch;
  engine_options.max_batched_tokens = std::max(options.prefill_tokens, max_batch);
  // Room for the timed contexts, and at least brisk serve's default: its warm-up (run below)
  // measures what a row pays per KV cell only when every sequence can hold a copy of the first
  // one's ~330 cells; with less room the calibrated table said 0 where serve measured 0.28 us.
  const EngineOptions serve_defaults;
  engine_options.ctx_size =
      std::max(serve_defaults.ctx_size, max_batch * (options.context_tokens + options.repeats + 4) +
                                            options.prefill_tokens + 64);
  engine_options.threads = options.threads;
  engine_options.gpu_layers = options.gpu_layers;
  auto engine = Engine::load(engine_options, error);
  if (!engine) return std::nullopt;
  const int vocabulary = engine->vocabulary_size();
  std::vector<std::unique_ptr<Sampler>> samplers;
  for (int sequence = 0; sequence < max_batch; ++sequence) {
    samplers.push_back(std::make_unique<Sampler>(SamplingParams{}));
  }

  // Prompt chunks: one sequence, `prefill_tokens` at once (the first run warms up).
  std::vector<double> prefill_ms;
  for (int repeat = 0; repeat <= options.repeats; ++repeat) {
    engine->clear_batch();
    for (int position = 0; position < options.prefill_tokens; ++position) {
      engine->add_to_batch(filler_token(position + repeat, vocabulary), position, 0,
                           position + 1 == options.prefill_tokens);
    }
    const TimedStep timed = timed_decode(*engine, samplers, {options.prefill_tokens - 1}, error);
    engine->release_sequence(0);
    if (timed.total_ms < 0) return std::nullopt;
    if (repeat > 0) prefill_ms.push_back(timed.total_ms);
  }
  run.samples.push_back(
      {path, 0, 0, static_cast<double>(options.prefill_tokens), median(prefill_ms), 0});

  // Decode steps: `batch` sequences holding `context_tokens` each, one new token per sequence.
  for (const int batch : options.decode_batches) {
    // In chunks of the engine's batch: a context longer than one batch was cut to its size.
    const int chunk = engine_options.max_batched_tokens;
    for (int sequence = 0; sequence < batch; ++sequence) {
      for (int start = 0; start < options.context_tokens; start += chunk) {
        engine->clear_batch();
        for (int position = start; position < std::min(options.context_tokens, start + chunk);
             ++position) {
          engine->add_to_batch(filler_token(position * (sequence + 1), vocabulary), position,
                               sequence, false);
        }
        if (engine->decode() != DecodeStatus::ok) {
          *error = "could not fill the KV cache for calibration";
          return std::nullopt;
        }
      }
    }
    std::vector<double> step_ms;
    std::vector<int> rows(static_cast<size_t>(batch));
    for (int repeat = 0; repeat <= options.repeats; ++repeat) {
      engine->clear_batch();
      for (int sequence = 0; sequence < batch; ++sequence) {
        rows[static_cast<size_t>(sequence)] =
            engine->add_to_batch(filler_token(repeat + sequence, vocabulary),
                                 options.context_tokens + repeat, sequence, true);
      }
      const TimedStep timed = timed_decode(*engine, samplers, rows, error);
      if (timed.total_ms < 0) return std::nullopt;
      if (repeat > 0) {
        step_ms.push_back(timed.total_ms);
        run.sample_ns_per_vocab_entry.push_back(timed.sample_ms * 1e6 / (batch * vocabulary));
      }
    }
    for (int sequence = 0; sequence < batch; ++sequence) engine->release_sequence(sequence);
    run.samples.push_back({path, static_cast<double>(batch),
                           options.context_tokens + options.repeats / 2.0, 0, median(step_ms), 0});
  }
  if (!measure_serve_steps(*engine, options, max_batch, run.steps, error)) return std::nullopt;
  return run;
}

double predicted_ms(const Deployment& deployment, const StepSample& sample) {
  if (sample.prefill_tokens > 0) return deployment.step(0, 0, sample.prefill_tokens, 0).total_ms;
  return deployment.step(sample.decode_batch, sample.context).total_ms;
}

double log_error(std::vector<ModelRun>& runs, const Efficiency& efficiency, bool prompts) {
  double error = 0;
  for (ModelRun& run : runs) {
    run.deployment.efficiency = efficiency;
    for (const StepSample& sample : run.samples) {
      if ((sample.prefill_tokens > 0) != prompts) continue;
      const double ratio = std::log(predicted_ms(run.deployment, sample) / sample.measured_ms);
      error += ratio * ratio;
    }
  }
  return error;
}

// Least squares on log(time) over log-spaced grids: bandwidth, decode compute and overhead from
// the decode steps, then prompt compute from the prompt chunks. Robust and fast.
Efficiency fit(std::vector<ModelRun>& runs, const Efficiency& defaults, bool fit_overhead) {
  double fastest_ms = 1e30;
  for (const ModelRun& run : runs) {
    for (const StepSample& sample : run.samples) {
      fastest_ms = std::min(fastest_ms, sample.measured_ms);
    }
  }
  std::vector<double> sample_ns;
  for (const ModelRun& run : runs) {
    sample_ns.insert(sample_ns.end(), run.sample_ns_per_vocab_entry.begin(),
                     run.sample_ns_per_vocab_entry.end());
  }
  Efficiency base = defaults;
  base.sample_ns_per_vocab_entry = median(sample_ns);  // measured, not fitted
  std::vector<double> overheads = {defaults.step_overhead_ms};
  if (fit_overhead) {
    overheads.clear();
    for (int index = 0; index <= 40; ++index) overheads.push_back(fastest_ms * 0.9 * index / 40);
  }
  auto grid = [](int index) { return std::pow(10.0, -3.0 + 3.5 * index / 96.0); };
  Efficiency best = base;
  double best_error = 1e300;
  for (const double overhead : overheads) {
    for (int b = 0; b <= 96; ++b) {
      for (int c = 0; c <= 96; ++c) {
        Efficiency candidate = base;
        candidate.bandwidth = grid(b);
        candidate.compute = grid(c);
        candidate.step_overhead_ms = overhead;
        const double error = log_error(runs, candidate, /*prompts=*/false);
        if (error < best_error) {
          best_error = error;
          best = candidate;
        }
      }
    }
  }
  best_error = 1e300;
  const Efficiency decode_fit = best;
  for (int p = 0; p <= 96; ++p) {
    Efficiency candidate = decode_fit;
    candidate.prefill_compute = grid(p);
    const double error = log_error(runs, candidate, /*prompts=*/true);
    if (error < best_error) {
      best_error = error;
      best = candidate;
    }
  }
  return best;
}

// What calibration.json holds: {"devices": {}} when it is missing or not a JSON object.
nlohmann::json read_calibration_file(const std::filesystem::path& file) {
  nlohmann::json root = {{"devices", nlohmann::json::object()}};
  if (std::ifstream input(file); input) {
    try {
      nlohmann::json parsed = nlohmann::json::parse(input);
      if (parsed.is_object()) root = std::move(parsed);
    } catch (const nlohmann::json::exception&) {
    }
  }
  return root;
}

// The device's entry in calibration.json, null when it has none.
nlohmann::json* device_entry(nlohmann::json& root, const std::string& device_id) {
  const auto devices = root.find("devices");
  if (devices == root.end() || !devices->is_object()) return nullptr;
  const auto entry = devices->find(device_id);
  return entry != devices->end() && entry->is_object() ? &*entry : nullptr;
}

// A model's measured steps as calibration.json stores them.
nlohmann::json measured_steps_json(const Efficiency::MeasuredSteps& steps) {
  nlohmann::json out = step_cost_table_json(steps.table);
  out["attention_on_gpu"] = steps.attention_on_gpu;
  return out;
}

bool write_atomically(const std::filesystem::path& file, const nlohmann::json& root,
                      std::string* error) {
  std::error_code ignored;
  std::filesystem::create_directories(file.parent_path(), ignored);
  const std::filesystem::path temporary = file.string() + ".tmp";
  {
    std::ofstream output(temporary);
    output << root.dump(2) << "\n";
    if (!output) {
      *error = "cannot write " + temporary.string();
      return false;
    }
  }
  std::filesystem::rename(temporary, file, ignored);
  if (ignored) {
    *error = "cannot replace " + file.string() + ": " + ignored.message();
    return false;
  }
  return true;
}

std::string utc_now() {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
}

}  // namespace

std::optional<Calibration> calibrate(const CalibrationOptions& options, const DeviceSpec& device,
                                     std::string* error) {
  if (options.model_paths.empty()) {
    *error = "calibration needs at least one GGUF model (--model)";
    return std::nullopt;
  }
  std::vector<ModelRun> runs;
  for (const std::string& path : options.model_paths) {
    auto run = measure_model(options, path, device, error);
    if (!run) return std::nullopt;
    runs.push_back(std::move(*run));
  }
  Calibration calibration;
  calibration.device_id = device.id;
  calibration.date = utc_now();
  calibration.efficiency =
      fit(runs, Efficiency::defaults_for(device), /*fit_overhead=*/runs.size() > 1);
  std::vector<double> errors;
  for (ModelRun& run : runs) {
    run.deployment.efficiency = calibration.efficiency;
    for (StepSample& sample : run.samples) {
      sample.fitted_ms = predicted_ms(run.deployment, sample);
      errors.push_back(std::abs(sample.fitted_ms / sample.measured_ms - 1));
      calibration.samples.push_back(sample);
    }
  }
  calibration.median_abs_error = median(errors);
  for (const ModelRun& run : runs) {
    calibration.efficiency.measured_steps[run.deployment.model.name] = run.steps;
  }
  // What the roofline cannot follow, kept as measured: the decode step at each timed batch over
  // its fit (the median over the models), which the planner interpolates between batches.
  std::map<double, std::vector<double>> ratios;
  for (const StepSample& sample : calibration.samples) {
    if (sample.prefill_tokens == 0 && sample.fitted_ms > 0) {
      ratios[sample.decode_batch].push_back(sample.measured_ms / sample.fitted_ms);
    }
  }
  for (auto& [batch, values] : ratios) {
    calibration.efficiency.decode_batch_scale.push_back({batch, median(values)});
  }
  std::string scales;
  for (const Efficiency::BatchScale& point : calibration.efficiency.decode_batch_scale) {
    scales += fmt::format("{}{:g}: {:.2f}", scales.empty() ? "" : ", ", point.batch, point.scale);
  }
  calibration.efficiency.origin = fmt::format(
      "calibrated on this machine as {} at {} ({} timed steps of {} model{}, median roofline "
      "fit error {:.0f}%, decode steps then scaled to the measured times by batch ({}){})",
      device.id, calibration.date, calibration.samples.size(), runs.size(),
      runs.size() > 1 ? "s" : "", calibration.median_abs_error * 100, scales,
      runs.size() > 1 ? "" : "; step overhead left at its default: give two models to fit it");
  return calibration;
}

std::filesystem::path calibration_file() {
  return ModelStore::from_environment().models_dir().parent_path() / "calibration.json";
}

std::map<std::string, Efficiency> load_calibrations(const std::filesystem::path& file) {
  std::map<std::string, Efficiency> calibrations;
  std::ifstream input(file);
  if (!input) return calibrations;
  try {
    const nlohmann::json root = nlohmann::json::parse(input);
    for (const auto& [device_id, entry] : root.at("devices").items()) {
      Efficiency efficiency;
      efficiency.bandwidth = entry.at("bandwidth_efficiency").get<double>();
      efficiency.compute = entry.at("compute_efficiency").get<double>();
      efficiency.prefill_compute = entry.at("prefill_compute_efficiency").get<double>();
      efficiency.step_overhead_ms = entry.at("step_overhead_ms").get<double>();
      efficiency.sample_ns_per_vocab_entry = entry.at("sample_ns_per_vocab_entry").get<double>();
      efficiency.origin = entry.at("origin").get<std::string>();
      // Absent in files written before the correction existed: none.
      for (const auto& point : entry.value("decode_batch_scale", nlohmann::json::array())) {
        efficiency.decode_batch_scale.push_back(
            {point.at("batch").get<double>(), point.at("scale").get<double>()});
      }
      const nlohmann::json measured_steps = entry.value("measured_steps", nlohmann::json::object());
      for (const auto& [model, steps] : measured_steps.items()) {
        std::string ignored;
        const auto table = step_cost_table_from_json(steps, &ignored);
        if (!table) continue;  // a damaged entry counts as none; calibrate the model again
        efficiency.measured_steps[model] = {*table, steps.value("attention_on_gpu", false)};
      }
      calibrations[device_id] = efficiency;
    }
  } catch (const nlohmann::json::exception&) {
    calibrations.clear();  // a damaged file counts as none; calibrate again to replace it
  }
  return calibrations;
}

bool store_calibration(const std::filesystem::path& file, const Calibration& calibration,
                       std::string* error) {
  nlohmann::json root = read_calibration_file(file);
  nlohmann::json samples = nlohmann::json::array();
  for (const StepSample& sample : calibration.samples) {
    samples.push_back({{"model", sample.model},
                       {"decode_batch", sample.decode_batch},
                       {"context", sample.context},
                       {"prefill_tokens", sample.prefill_tokens},
                       {"measured_ms", sample.measured_ms},
                       {"fitted_ms", sample.fitted_ms}});
  }
  nlohmann::json scales = nlohmann::json::array();
  for (const Efficiency::BatchScale& point : calibration.efficiency.decode_batch_scale) {
    scales.push_back({{"batch", point.batch}, {"scale", point.scale}});
  }
  // Models measured earlier on this device keep their steps unless measured again.
  nlohmann::json measured_steps = nlohmann::json::object();
  if (const nlohmann::json* earlier = device_entry(root, calibration.device_id)) {
    const nlohmann::json kept = earlier->value("measured_steps", nlohmann::json::object());
    if (kept.is_object()) measured_steps = kept;
  }
  for (const auto& [model, steps] : calibration.efficiency.measured_steps) {
    measured_steps[model] = measured_steps_json(steps);
  }
  root["devices"][calibration.device_id] = {
      {"measured_steps", measured_steps},
      {"decode_batch_scale", scales},
      {"bandwidth_efficiency", calibration.efficiency.bandwidth},
      {"compute_efficiency", calibration.efficiency.compute},
      {"prefill_compute_efficiency", calibration.efficiency.prefill_compute},
      {"step_overhead_ms", calibration.efficiency.step_overhead_ms},
      {"sample_ns_per_vocab_entry", calibration.efficiency.sample_ns_per_vocab_entry},
      {"origin", calibration.efficiency.origin},
      {"date", calibration.date},
      {"median_abs_error", calibration.median_abs_error},
      {"samples", samples}};
  return write_atomically(file, root, error);
}

std::optional<Efficiency::MeasuredSteps> measured_steps_from_scheduler(
    const nlohmann::json& scheduler, std::string* error) {
  if (!scheduler.is_object() || !scheduler.contains("measured") ||
      !scheduler["measured"].is_object() || !scheduler["measured"].contains("step_costs")) {
    *error = "the answer has no measured.step_costs (is it brisk serve's GET /debug/scheduler, "
             "of this version or later?)";
    return std::nullopt;
  }
  auto table = step_cost_table_from_json(scheduler["measured"]["step_costs"], error);
  if (!table) return std::nullopt;
  if (table->empty() || table->prefill_ms_per_token <= 0) {
    *error = "the server has not measured its steps yet (its warm-up was off and it ran no "
             "request): send it a load first";
    return std::nullopt;
  }
  Efficiency::MeasuredSteps steps;
  steps.table = *table;
  const nlohmann::json limits = scheduler.value("limits", nlohmann::json::object());
  steps.attention_on_gpu = limits.is_object() && limits.value("min_alone_chunk_tokens", 0) == 0;
  return steps;
}

bool store_measured_steps(const std::filesystem::path& file, const DeviceSpec& device,
                          const std::string& model, const Efficiency::MeasuredSteps& steps,
                          std::string* error) {
  nlohmann::json root = read_calibration_file(file);
  if (nlohmann::json* entry = device_entry(root, device.id)) {
    if (!entry->contains("measured_steps") || !(*entry)["measured_steps"].is_object()) {
      (*entry)["measured_steps"] = nlohmann::json::object();
    }
    (*entry)["measured_steps"][model] = measured_steps_json(steps);
    return write_atomically(file, root, error);
  }
  Calibration calibration;
  calibration.device_id = device.id;
  calibration.date = utc_now();
  calibration.efficiency = Efficiency::defaults_for(device);
  calibration.efficiency.measured_steps[model] = steps;
  return store_calibration(file, calibration, error);
}

}  // namespace brisk::plan
