#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/goodput_search.h"
#include "tune/knob.h"

namespace brisk::tune {

// Wall-clock budget of a whole tune: a hard cap every stage asks before it starts a run.
class Budget {
 public:
  // `now` returns seconds on any steady clock (a fake one in tests).
  Budget(double seconds, std::function<double()> now);
  double total_s() const { return total_s_; }
  double elapsed_s() const { return now_() - start_s_; }
  double left_s() const { return total_s_ - elapsed_s(); }
  bool spent() const { return left_s() <= 0; }

 private:
  double total_s_;
  std::function<double()> now_;
  double start_s_;
};

// One configuration the search considered.
struct Candidate {
  Setting setting;
  std::optional<double> predicted_rps;  // brisk plan's goodput, where it models the knobs
  std::vector<Goodput> measurements;    // the search's, then the confirmation's repeats
  std::string stage;                    // baseline, search or pruned
  std::string note;                     // why it was pruned, or why it failed to run
  std::string command;
  double peak_memory_bytes = 0;  // the server's peak resident memory, when known

  bool measured() const { return !measurements.empty(); }
  // Mean of the measured goodputs; a measurement that gave up counts as its missed rate's
  // lower neighbour, so it is never taken for a win.
  double goodput_rps() const;
  // Half-width of the 95% confidence interval of goodput_rps() (Student's t over the repeats);
  // 0 with one measurement.
  double goodput_ci95_rps() const;
};

struct SearchOptions {
  // A challenger must meet the SLO at the best goodput so far times (1 + margin) to win: less is
  // within the noise of one run.
  double margin = 0.08;
  // The simulated grid's best configurations measured besides the baseline (one that only adds
  // changes to a configuration measured already, without moving the prediction by 1%, is
  // skipped: the simulation says the knobs it adds do not matter there).
  int measure_top = 4;
  int confirm_top = 2;      // configurations re-measured besides the baseline
  int confirm_repeats = 1;  // re-measurements of each, interleaved
  double confirm_share = 0.3;  // of the budget kept for the confirmation
  // Why a configuration cannot serve the workload at all (pruned unmeasured, with that note);
  // nullopt when it can. None: every configuration can.
  using Refusal = std::function<std::optional<std::string>(const Setting&)>;
  Refusal refusal;
};

// What to do with a configuration: start its server, search its goodput, stop the server.
using MeasureFn = std::function<Goodput(const Setting&, const GoodputSearchOptions&,
                                        Candidate& candidate)>;
using PredictFn = std::function<std::optional<double>(const Setting&)>;
// Progress: the stage and the candidate about to be measured.
using EventFn = std::function<void(const std::string& stage, const Setting&)>;

// One configuration of the simulated grid and its predicted goodput.
struct GridPoint {
  Setting setting;
  double predicted_rps = 0;
  int changes = 0;  // knobs set away from the baseline
};

// The simulated grid: every combination of the predicted knobs' values (the other knobs at the
// baseline's), each predicted, best first.
struct GridPrediction {
  std::vector<GridPoint> ranked;  // best first; within 1% of each other, fewest changes first
  size_t refused = 0;             // combinations the refusal turned away, not predicted
  double seconds = 0;             // wall time of the predictions
};

// Predicts every combination of the values of `knobs` marked predicted (the rest at
// `baseline`'s values), on every core at once (`predict` is called from several threads); a
// configuration `refusal` turns away is left out.
GridPrediction predict_grid(const std::vector<Knob>& knobs, const Setting& baseline,
                            const PredictFn& predict, const SearchOptions::Refusal& refusal);

struct SearchResult {
  std::vector<Candidate> candidates;  // in the order they were considered; [0] is the baseline
  size_t best = 0;
  std::string stopped;  // "budget", or empty when every knob was searched
  std::optional<GridPrediction> grid;  // when the prediction saw a knob
};

// Measures the baseline; then, where the prediction sees knobs, predicts the whole grid of
// their values (predict_grid) and measures its `measure_top` best configurations, each as a
// challenger of the best so far; then, one knob at a time, challenges the best with each other
// value of each knob the prediction does not see (every knob without a prediction). A
// challenger starts at the best goodput times 1 + margin and is kept when it meets the SLO
// there. Finally it re-measures the best few and the baseline, interleaved, each in a fresh
// server, and picks the best mean.
SearchResult search_configurations(const std::vector<Knob>& knobs, const Setting& baseline,
                                   const PredictFn& predict, const MeasureFn& measure,
                                   Budget& budget, const SearchOptions& options,
                                   const EventFn& on_event = {});

// Measures the baseline, then each of `settings` in full (no challenge: every goodput is found),
// then re-measures them as search_configurations does (brisk tune --verify).
SearchResult measure_each(const std::vector<Setting>& settings, const Setting& baseline,
                          const PredictFn& predict, const MeasureFn& measure, Budget& budget,
                          const SearchOptions& options, const EventFn& on_event = {});

}  // namespace brisk::tune
