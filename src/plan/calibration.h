#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/performance_model.h"

namespace brisk::plan {

// One timed engine step: `decode_batch` sequences at `context` tokens each, or a prompt chunk.
struct StepSample {
  std::string model;
  double decode_batch = 0;
  double context = 0;
  double prefill_tokens = 0;
  double measured_ms = 0;
  double fitted_ms = 0;
};

struct CalibrationOptions {
  std::vector<std::string> model_paths;  // GGUF files; two of different size separate overhead
  std::string device_id;                 // the catalog entry this machine is
  int gpu_layers = 0;
  int threads = 0;
  // Small batches closely: that is where a CPU's step time bends (Efficiency::decode_batch_scale).
  std::vector<int> decode_batches = {1, 2, 4, 8, 16};
  int context_tokens = 256;
  int prefill_tokens = 512;
  int repeats = 5;
};

struct Calibration {
  std::string device_id;
  std::string date;  // ISO 8601, UTC
  Efficiency efficiency;
  std::vector<StepSample> samples;
  double median_abs_error = 0;  // of the roofline fit, before the per-batch correction
};

// Times decode steps and prompt chunks of each model through brisk's engine, then fits the
// device's achieved bandwidth and compute fractions (and per-step overhead, when two models of
// different size are given) so that Deployment::step reproduces the measured times.
std::optional<Calibration> calibrate(const CalibrationOptions& options, const DeviceSpec& device,
                                     std::string* error);

// $BRISK_HOME/calibration.json, one entry per device id.
std::filesystem::path calibration_file();
std::map<std::string, Efficiency> load_calibrations(const std::filesystem::path& file);
bool store_calibration(const std::filesystem::path& file, const Calibration& calibration,
                       std::string* error);

// What a running brisk serve's GET /debug/scheduler says its steps cost, as learned from the
// steps it ran (its warm-up, then every step under its real load: its own threads and its
// clients' share of the machine included): measured.step_costs, and limits'
// min_alone_chunk_tokens for where attention runs. nullopt with `error` otherwise.
std::optional<Efficiency::MeasuredSteps> measured_steps_from_scheduler(
    const nlohmann::json& scheduler, std::string* error);
// Stores `steps` as `model`'s measured steps on `device` in `file`, beside what the file holds
// for the device (one not calibrated yet gets the default efficiencies for the roofline).
bool store_measured_steps(const std::filesystem::path& file, const DeviceSpec& device,
                          const std::string& model, const Efficiency::MeasuredSteps& steps,
                          std::string* error);

}  // namespace brisk::plan
