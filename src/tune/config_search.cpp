#include "tune/config_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

namespace brisk::tune {

namespace {

// Student's t at 97.5% for 1..6 degrees of freedom; the normal quantile beyond.
double t_quantile_975(size_t degrees) {
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447};
  return degrees >= 1 && degrees <= 6 ? kTable[degrees - 1] : 1.96;
}

class Search {
 public:
  Search(const std::vector<Knob>& knobs, const PredictFn& predict, const MeasureFn& measure,
         Budget& budget, const SearchOptions& options, const EventFn& on_event)
      : knobs_(knobs),
        predict_(predict),
        measure_(measure),
        budget_(budget),
        options_(options),
        on_event_(on_event) {}

  SearchResult run(const Setting& baseline) {
    const bool grid = predict_ && std::any_of(knobs_.begin(), knobs_.end(),
                                              [](const Knob& knob) { return knob.predicted; });
    if (grid) result_.grid = predict_grid(knobs_, baseline, predict_, options_.refusal);
    measure_baseline(baseline);
    bool in_budget = true;
    if (grid) in_budget = challenge_with_grid();
    for (const Knob& knob : knobs_) {
      if (!in_budget) break;
      if (!grid || !knob.predicted) in_budget = challenge_with(knob);
    }
    confirm();
    result_.best = best_measured();
    return std::move(result_);
  }

  SearchResult run_each(const Setting& baseline, const std::vector<Setting>& settings) {
    measure_baseline(baseline);
    for (const Setting& setting : settings) {
      if (considered(setting)) continue;
      if (!fits(0)) {  // measuring every setting comes before confirming any
        result_.stopped = "budget";
        break;
      }
      const double base_rps = result_.candidates.front().goodput_rps();
      GoodputSearchOptions full;
      if (std::isfinite(base_rps) && base_rps > 0) {
        full.start_rate = base_rps;
        full.growth = 1.25;
      }
      full.refine_steps = 2;
      consider(setting, "verify");
      measure(result_.candidates.size() - 1, full);
    }
    confirm();
    result_.best = best_measured();
    return std::move(result_);
  }

 private:
  void measure_baseline(const Setting& baseline) {
    GoodputSearchOptions first;
    first.growth = 2;
    first.refine_steps = 3;
    first.max_runs = 12;
    Candidate& base = consider(baseline, "baseline");
    if (base.predicted_rps && *base.predicted_rps > 0) {
      first.start_rate = *base.predicted_rps;
      first.max_backoff = 64;  // an uncalibrated prediction can be off by an order of magnitude
    }
    measure(0, first);
  }

  // `predicted`: the setting's prediction where the grid has it already.
  Candidate& consider(const Setting& setting, const std::string& stage,
                      std::optional<double> predicted = std::nullopt) {
    Candidate candidate;
    candidate.setting = setting;
    candidate.stage = stage;
    candidate.predicted_rps = predicted;
    if (!predicted && predict_) candidate.predicted_rps = predict_(setting);
    result_.candidates.push_back(std::move(candidate));
    return result_.candidates.back();
  }

  bool considered(const Setting& setting) const {
    return std::any_of(result_.candidates.begin(), result_.candidates.end(),
                       [&](const Candidate& candidate) { return candidate.setting == setting; });
  }

  void measure(size_t index, const GoodputSearchOptions& options) {
    if (on_event_) on_event_(result_.candidates[index].stage, result_.candidates[index].setting);
    const double started_s = budget_.elapsed_s();
    Goodput goodput = measure_(result_.candidates[index].setting, options, result_.candidates[index]);
    goodput.seconds = budget_.elapsed_s() - started_s;
    measured_s_ += goodput.seconds;
    trials_ += static_cast<double>(std::max<size_t>(1, goodput.trials.size()));
    result_.candidates[index].measurements.push_back(std::move(goodput));
  }

  // Whether another measurement fits the budget, keeping `reserve_s` for later stages. A
  // challenger that loses takes one rate trial and a winner a few more, so the estimate is two
  // trials at the mean trial time so far (a server's start included).
  bool fits(double reserve_s) const {
    const double estimate_s = trials_ > 0 ? 2 * measured_s_ / trials_ : 0;
    return !budget_.spent() && budget_.left_s() - reserve_s >= estimate_s;
  }

  // Measures the grid's best configurations, skipping each that only adds changes to one
  // already chosen without moving the prediction (within 1%: knobs that do not matter there).
  // False when the budget ends the search.
  bool challenge_with_grid() {
    const Setting baseline = result_.candidates.front().setting;  // candidates grow below
    std::vector<const GridPoint*> chosen;
    for (const GridPoint& point : result_.grid->ranked) {
      if (static_cast<int>(chosen.size()) >= options_.measure_top) break;
      if (point.setting == baseline) continue;
      const bool adds_nothing = std::any_of(chosen.begin(), chosen.end(), [&](const GridPoint* c) {
        return std::abs(c->predicted_rps - point.predicted_rps) <= 0.01 * c->predicted_rps &&
               extends(point.setting, c->setting, baseline);
      });
      if (adds_nothing) continue;
      chosen.push_back(&point);
      if (!challenge(point.setting, "grid", point.predicted_rps)) return false;
    }
    return true;
  }

  // Whether `setting` keeps every change `base` makes to `baseline` and makes more.
  static bool extends(const Setting& setting, const Setting& base, const Setting& baseline) {
    for (const auto& [name, label] : base) {
      if (label != baseline.at(name) && setting.at(name) != label) return false;
    }
    return setting != base;
  }

  // Challenges the best configuration so far with each other value of `knob`. False when the
  // budget ends the search.
  bool challenge_with(const Knob& knob) {
    for (const KnobValue& value : knob.values) {
      Setting setting = result_.candidates[best_].setting;
      setting[knob.name] = value.label;
      if (considered(setting)) continue;
      if (const auto refused = options_.refusal ? options_.refusal(setting) : std::nullopt) {
        consider(setting, "pruned").note = *refused;
        continue;
      }
      if (!challenge(setting, "search")) return false;
    }
    return true;
  }

  // Measures `setting` against the best so far: it starts at the best's goodput times
  // 1 + margin and becomes the best if it meets the SLO there. False when the budget ends the
  // search before it.
  bool challenge(const Setting& setting, const std::string& stage,
                 std::optional<double> predicted = std::nullopt) {
    // Time is kept for the confirmation only once there is a winner to confirm.
    if (!fits(has_challenger_goodput() ? options_.confirm_share * budget_.total_s() : 0)) {
      result_.stopped = "budget";
      return false;
    }
    const Candidate& incumbent = result_.candidates[best_];
    const double to_beat = incumbent.measured() ? incumbent.measurements.front().rate : 0;
    if (std::isinf(to_beat)) {
      result_.stopped =
          "the baseline meets the SLO even with every request at once: nothing to beat (send "
          "more: --requests-per-run, longer prompts or answers, or a stricter --slo)";
      return false;
    }
    GoodputSearchOptions challenge;
    if (to_beat > 0) {
      challenge.start_rate = to_beat * (1 + options_.margin);
      challenge.give_up_at_or_below = challenge.start_rate;
      challenge.growth = 1.25;
      challenge.refine_steps = 1;
    } else {  // nothing met the SLO yet: any rate that meets it wins, if it is not too slow
      challenge.start_rate = lowest_rate_tried();
      challenge.growth = 2;
      challenge.max_backoff = 4;
    }
    consider(setting, stage, predicted);
    const size_t index = result_.candidates.size() - 1;
    measure(index, challenge);
    if (result_.candidates[index].measurements.front().rate > to_beat) best_ = index;
    return true;
  }

  bool has_challenger_goodput() const {
    return std::any_of(result_.candidates.begin() + 1, result_.candidates.end(),
                       [](const Candidate& candidate) { return candidate.goodput_rps() > 0; });
  }

  double lowest_rate_tried() const {
    double lowest = 1;
    for (const Candidate& candidate : result_.candidates) {
      for (const Goodput& goodput : candidate.measurements) {
        for (const bench::RateTrial& trial : goodput.trials) lowest = std::min(lowest, trial.rate);
      }
    }
    return lowest;
  }

  // Re-measures the baseline and the best few, interleaved, while the budget lasts (the
  // baseline alone when nothing beat it).
  void confirm() {
    std::vector<size_t> chosen;
    for (size_t i = 1; i < result_.candidates.size(); ++i) {
      if (result_.candidates[i].measured() && result_.candidates[i].goodput_rps() > 0) {
        chosen.push_back(i);
      }
    }
    std::stable_sort(chosen.begin(), chosen.end(), [&](size_t a, size_t b) {
      return result_.candidates[a].goodput_rps() > result_.candidates[b].goodput_rps();
    });
    if (chosen.size() > static_cast<size_t>(options_.confirm_top)) {
      chosen.resize(options_.confirm_top);
    }
    // A baseline that no challenger beat is the winner, and is re-measured as one; one that met
    // nothing has no goodput to confirm.
    if (options_.confirm_top <= 0 ||
        (chosen.empty() && result_.candidates.front().goodput_rps() <= 0)) {
      return;
    }
    chosen.insert(chosen.begin(), 0);
    int measurements_left = options_.confirm_repeats * static_cast<int>(chosen.size());
    for (int repeat = 0; repeat < options_.confirm_repeats; ++repeat) {
      for (const size_t index : chosen) {
        if (!fits(0)) {
          if (result_.stopped.empty()) result_.stopped = "budget";
          return;
        }
        const Candidate& candidate = result_.candidates[index];
        if (std::isinf(candidate.goodput_rps())) continue;
        GoodputSearchOptions again;
        again.start_rate = candidate.goodput_rps() > 0 ? candidate.goodput_rps() : lowest_rate_tried();
        again.growth = 1.25;
        again.refine_steps = 2;
        again.max_runs = fair_share_of_runs(measurements_left--, again.max_runs);
        result_.candidates[index].stage += "+confirm";
        measure(index, again);
      }
    }
  }

  // Rate trials for one of the `measurements_left` confirmations: an equal share of what the
  // budget still holds, at the mean trial time so far (at least 2, at most `most`). Unshared,
  // the baseline, re-measured first after one lucky trial, backed off through 8 trials and
  // left no time for the winner's repeat (BENCHMARKS.md, brisk tune run 4).
  int fair_share_of_runs(int measurements_left, int most) const {
    if (trials_ <= 0 || measured_s_ <= 0) return most;
    const double trial_s = measured_s_ / trials_;
    const double share = budget_.left_s() / trial_s / std::max(1, measurements_left);
    return std::clamp(static_cast<int>(share), 2, most);
  }

  size_t best_measured() const {
    size_t best = 0;
    for (size_t i = 1; i < result_.candidates.size(); ++i) {
      if (result_.candidates[i].measured() &&
          result_.candidates[i].goodput_rps() > result_.candidates[best].goodput_rps()) {
        best = i;
      }
    }
    return best;
  }

  const std::vector<Knob>& knobs_;
  const PredictFn& predict_;
  const MeasureFn& measure_;
  Budget& budget_;
  const SearchOptions& options_;
  const EventFn& on_event_;
  SearchResult result_;
  size_t best_ = 0;
  double measured_s_ = 0;  // time spent measuring so far
  double trials_ = 0;      // rate trials run so far (a server that failed to start counts one)
};

}  // namespace

Budget::Budget(double seconds, std::function<double()> now)
    : total_s_(seconds), now_(std::move(now)), start_s_(now_()) {}

double Candidate::goodput_rps() const {
  if (measurements.empty()) return 0;
  double sum = 0;
  for (const Goodput& goodput : measurements) sum += goodput.rate;
  return sum / static_cast<double>(measurements.size());
}

double Candidate::goodput_ci95_rps() const {
  const size_t n = measurements.size();
  if (n < 2) return 0;
  const double mean = goodput_rps();
  double squares = 0;
  for (const Goodput& goodput : measurements) squares += (goodput.rate - mean) * (goodput.rate - mean);
  return t_quantile_975(n - 1) * std::sqrt(squares / static_cast<double>(n - 1)) /
         std::sqrt(static_cast<double>(n));
}

GridPrediction predict_grid(const std::vector<Knob>& knobs, const Setting& baseline,
                            const PredictFn& predict, const SearchOptions::Refusal& refusal) {
  GridPrediction grid;
  const auto started = std::chrono::steady_clock::now();
  std::vector<const Knob*> predicted;
  for (const Knob& knob : knobs) {
    if (knob.predicted && !knob.values.empty()) predicted.push_back(&knob);
  }
  std::vector<size_t> odometer(predicted.size(), 0);
  while (true) {
    GridPoint point;
    point.setting = baseline;
    for (size_t i = 0; i < predicted.size(); ++i) {
      point.setting[predicted[i]->name] = predicted[i]->values[odometer[i]].label;
    }
    for (const auto& [name, label] : point.setting) {
      const auto base = baseline.find(name);
      if (base == baseline.end() || base->second != label) ++point.changes;
    }
    if (refusal && refusal(point.setting)) {
      ++grid.refused;
    } else {
      grid.ranked.push_back(std::move(point));
    }
    size_t digit = 0;
    while (digit < odometer.size() && ++odometer[digit] == predicted[digit]->values.size()) {
      odometer[digit++] = 0;
    }
    if (digit == odometer.size()) break;
  }
  // Each prediction is a simulation of its own: on every core at once.
  std::atomic<size_t> next{0};
  auto predict_rest = [&] {
    for (size_t i = next++; i < grid.ranked.size(); i = next++) {
      grid.ranked[i].predicted_rps = predict(grid.ranked[i].setting).value_or(0);
    }
  };
  std::vector<std::thread> workers;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < cores && i < grid.ranked.size(); ++i) workers.emplace_back(predict_rest);
  predict_rest();
  for (std::thread& worker : workers) worker.join();
  // Predictions within 1% of each other rank alike (a step of the log at base 1.01), and the
  // configuration that changes fewest knobs goes first among them.
  auto level = [](double rps) {
    return rps > 0 ? std::floor(std::log(rps) / std::log(1.01)) : -1e300;
  };
  std::stable_sort(grid.ranked.begin(), grid.ranked.end(),
                   [&](const GridPoint& a, const GridPoint& b) {
                     const double x = level(a.predicted_rps);
                     const double y = level(b.predicted_rps);
                     if (x != y) return x > y;
                     return a.changes < b.changes;
                   });
  grid.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return grid;
}

SearchResult search_configurations(const std::vector<Knob>& knobs, const Setting& baseline,
                                   const PredictFn& predict, const MeasureFn& measure,
                                   Budget& budget, const SearchOptions& options,
                                   const EventFn& on_event) {
  return Search(knobs, predict, measure, budget, options, on_event).run(baseline);
}

SearchResult measure_each(const std::vector<Setting>& settings, const Setting& baseline,
                          const PredictFn& predict, const MeasureFn& measure, Budget& budget,
                          const SearchOptions& options, const EventFn& on_event) {
  static const std::vector<Knob> kNoKnobs;
  return Search(kNoKnobs, predict, measure, budget, options, on_event).run_each(baseline, settings);
}

}  // namespace brisk::tune
