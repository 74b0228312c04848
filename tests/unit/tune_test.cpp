#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "tune/command_line.h"
#include "tune/config_search.h"
#include "tune/goodput_search.h"
#include "tune/prescriptions.h"
#include "tune/serve_knobs.h"
#include "tune/server_template.h"
#include "tune/tune_report.h"

namespace brisk::tune {
namespace {

bench::Slo ttft_slo() {
  std::string error;
  return *bench::parse_slo("ttft_p99=1s", error);
}

// One run of a server that serves up to `capacity` requests/s within the SLO, and no more.
bench::RunStatistics run_against(double capacity, double rate) {
  bench::RunStatistics stats;
  stats.ok = 10;
  stats.ttft_ms.count = 10;
  stats.ttft_ms.p99 = rate <= capacity ? 200 : 5000;
  stats.request_throughput = std::min(rate, 2 * capacity);  // a burst: twice the capacity
  return stats;
}

TEST(TuneCommandLine, SplitsAsAShellWouldAndRefusesAnUnclosedQuote) {
  std::string error;
  const auto words = split_command_line(R"(serve -m 'a b.gguf' --x "c \"d\"" e\ f)", error);
  ASSERT_TRUE(words) << error;
  EXPECT_EQ(*words,
            (std::vector<std::string>{"serve", "-m", "a b.gguf", "--x", "c \"d\"", "e f"}));
  EXPECT_FALSE(split_command_line("serve 'open", error));
  EXPECT_NE(error.find("unclosed single quote"), std::string::npos) << error;
}

TEST(TuneServerTemplate, FindsThePlaceholdersAndRendersACandidate) {
  std::string error;
  const auto server = parse_server_template(
      "llama-server -m {model} --host {host} --port={port} -np {slots} -b {batch} -ub {batch}",
      error);
  ASSERT_TRUE(server) << error;
  EXPECT_EQ(server->placeholders, (std::vector<std::string>{"slots", "batch"}));
  const auto knobs = parse_grid({"slots=4,1,8", "batch=256..2048"}, *server, error);
  ASSERT_TRUE(knobs) << error;
  ASSERT_EQ(knobs->size(), 2u);
  EXPECT_EQ((*knobs)[0].baseline, "4");  // the first value listed
  std::vector<std::string> batches;
  for (const KnobValue& value : (*knobs)[1].values) batches.push_back(value.label);
  EXPECT_EQ(batches, (std::vector<std::string>{"256", "512", "1024", "2048"}));
  const auto argv = render_command(*server, {{"slots", "8"}, {"batch", "512"}},
                                   {{"port", "9001"}, {"host", "127.0.0.1"}, {"model", "m.gguf"}});
  EXPECT_EQ(argv, (std::vector<std::string>{"llama-server", "-m", "m.gguf", "--host", "127.0.0.1",
                                            "--port=9001", "-np", "8", "-b", "512", "-ub",
                                            "512"}));
  const auto stepped = parse_grid({"slots=2..8:3", "batch=64"}, *server, error);
  ASSERT_TRUE(stepped) << error;
  EXPECT_EQ((*stepped)[0].values.size(), 3u);  // 2, 5, 8
}

TEST(TuneServerTemplate, BadTemplatesAndGridsSayWhatToChange) {
  struct Case {
    std::string command;
    std::vector<std::string> grid;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"llama-server -np {slots}", {"slots=1"}, "has no {port}"},
      {"srv --port {port} -np {slots", {}, "'{' without '}'"},
      {"srv --port {port} -np slots}", {}, "'}' without '{'"},
      {"srv --port {port} -np {sl.ots}", {}, "not a placeholder"},
      {"", {}, "empty"},
      {"srv --port {port} -np {slots}", {}, "{slots} has no values"},
      {"srv --port {port} -np {slots}", {"slots=1", "batch=2"}, "has no {batch}"},
      {"srv --port {port} -np {slots}", {"slots=8..2"}, "not a range"},
      {"srv --port {port} -np {slots}", {"slots=0..8"}, "not a range"},
      {"srv --port {port} -np {slots}", {"slots=1,,2"}, "an empty value"},
      {"srv --port {port} -np {slots}", {"slots"}, "NAME=V1,V2"},
  };
  for (const Case& test : cases) {
    std::string error;
    const auto server = parse_server_template(test.command, error);
    if (server) parse_grid(test.grid, *server, error);
    EXPECT_NE(error.find(test.expected), std::string::npos)
        << test.command << " → " << (error.empty() ? "(accepted)" : error);
  }
}

TEST(TuneServeKnobs, BaseFlagsSetTheBaselinesAndLeaveTheRest) {
  const ServeKnobs serve = brisk_serve_knobs(
      {"--model", "smollm2-135m", "--max-seqs", "6", "--no-kv-unified", "--ctx-size", "8192"}, 2);
  EXPECT_EQ(serve.fixed_args,
            (std::vector<std::string>{"--model", "smollm2-135m", "--ctx-size", "8192"}));
  const Setting baseline = baseline_setting(serve.knobs);
  EXPECT_EQ(baseline.at("max-seqs"), "6");
  EXPECT_EQ(baseline.at("kv-layout"), "per-sequence");
  EXPECT_EQ(baseline.at("max-batched-tokens"), "512");  // brisk serve's default
  const auto& max_seqs = *std::find_if(serve.knobs.begin(), serve.knobs.end(),
                                       [](const Knob& knob) { return knob.name == "max-seqs"; });
  EXPECT_TRUE(max_seqs.find("6"));  // the base value is among the values tried
  const std::vector<std::string> args = setting_args(serve.knobs, baseline);
  EXPECT_NE(std::find(args.begin(), args.end(), "--no-kv-unified"), args.end());
  EXPECT_EQ(std::count(args.begin(), args.end(), "--max-seqs"), 1);
}

TEST(TuneServeKnobs, TheKvTypeIsOneKnobForKAndVUnlessTheyDiffer) {
  const ServeKnobs alike = brisk_serve_knobs(
      {"--cache-type-k", "q8_0", "--cache-type-v=q8_0", "--ctx-size", "8192"}, 2);
  EXPECT_EQ(alike.fixed_args, (std::vector<std::string>{"--ctx-size", "8192"}));
  EXPECT_EQ(baseline_setting(alike.knobs).at("kv-type"), "q8_0");
  Setting f16 = baseline_setting(alike.knobs);
  f16["kv-type"] = "f16";
  const std::vector<std::string> args = setting_args(alike.knobs, f16);
  const auto k = std::find(args.begin(), args.end(), "--cache-type-k");
  ASSERT_NE(k, args.end());
  EXPECT_EQ(*(k + 1), "f16");
  EXPECT_NE(std::find(args.begin(), args.end(), "--cache-type-v"), args.end());
  // Different K and V types are the user's choice: passed as given, not searched.
  const ServeKnobs differ =
      brisk_serve_knobs({"--cache-type-k", "q8_0", "--cache-type-v", "f16"}, 2);
  EXPECT_EQ(differ.fixed_args,
            (std::vector<std::string>{"--cache-type-k", "q8_0", "--cache-type-v", "f16"}));
  EXPECT_EQ(baseline_setting(differ.knobs).count("kv-type"), 0u);
}

TEST(TuneGoodputSearch, BracketsAndRefinesTheRateWhereTheSloStartsToMiss) {
  const Goodput found = search_goodput(ttft_slo(), {.start_rate = 1, .growth = 2, .refine_steps = 3},
                                       [](double rate) { return run_against(5.0, rate); });
  EXPECT_LE(found.rate, 5.0);
  EXPECT_GT(found.rate, 5.0 / std::pow(2.0, 1.0 / 8) - 1e-9);  // 3 geometric halvings of 2x
  EXPECT_GT(found.missed_at, 5.0);
  EXPECT_FALSE(found.gave_up);
  // Down from above, too.
  // Down from far above: a run 5x over the limit steps down two factors at once.
  std::vector<double> rates;
  const Goodput from_above = search_goodput(
      ttft_slo(), {.start_rate = 40, .growth = 2, .refine_steps = 2}, [&](double rate) {
        rates.push_back(rate);
        return run_against(5.0, rate);
      });
  EXPECT_EQ(rates, (std::vector<double>{40, 10, 2.5, 5, std::sqrt(50.0)}));
  EXPECT_DOUBLE_EQ(from_above.rate, 5.0);
}

// A configuration that refuses or rejects part of the load (429s, prompts too long for its
// per-sequence share) must not meet the SLO on the latency of the requests it did serve.
TEST(TuneGoodputSearch, FailedRequestsMissTheSlo) {
  const Goodput found = search_goodput(ttft_slo(), {.start_rate = 1, .growth = 2, .refine_steps = 3},
                                       [](double rate) {
                                         bench::RunStatistics stats = run_against(5.0, rate);
                                         if (rate > 2) {  // fast, but a third of them refused
                                           stats.failed = stats.ok / 2 + 1;
                                         }
                                         return stats;
                                       });
  EXPECT_LE(found.rate, 2.0);
  ASSERT_FALSE(found.trials.empty());
  bool named = false;
  for (const bench::RateTrial& trial : found.trials) {
    for (const std::string& miss : trial.misses) named |= miss.find("requests failed") != miss.npos;
  }
  EXPECT_TRUE(named);
  // One failure in 200 is under 1%: the P99 still stands for the rest.
  bench::RunStatistics few = run_against(5.0, 1);
  few.ok = 199;
  few.failed = 1;
  EXPECT_TRUE(trial_misses(ttft_slo(), few).empty());
}

// A trial of `count` requests scheduled every 100 ms from t0, none answered yet.
std::vector<bench::RequestRecord> scheduled_trial(TimePoint t0, int count) {
  std::vector<bench::RequestRecord> records(count + 2);
  records[0].warmup = records[1].warmup = true;
  for (int i = 0; i < count; ++i) {
    records[2 + i].index = 2 + i;
    records[2 + i].scheduled = t0 + std::chrono::milliseconds(100 * i);
  }
  return records;
}

TEST(TuneGoodputSearch, ATrialIsAbandonedOnceItsMissIsCertain) {
  std::string error;
  const auto slo = bench::parse_slo("ttft_p99=150ms,tpot_p99=20ms", error);
  ASSERT_TRUE(slo);
  const TimePoint t0 = Clock::now();
  const auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  auto records = scheduled_trial(t0, 8);
  // p99 of 8 interpolates from the 7th value up: two requests over 150 ms make it certain.
  EXPECT_EQ(trial_cannot_meet(*slo, records, at(160)), "");  // one waiting past 150 ms
  EXPECT_EQ(trial_cannot_meet(*slo, records, at(260)),
            "2 of 8 requests already over ttft_p99 150 ms");  // the second, scheduled at 100
  // Answered in time, they count for nothing; one late first token is one miss.
  records[2].content_chunks = {at(50)};
  records[3].content_chunks = {at(300)};
  EXPECT_EQ(trial_cannot_meet(*slo, records, at(260)), "");
  EXPECT_EQ(trial_cannot_meet(*slo, records, at(360)),
            "2 of 8 requests already over ttft_p99 150 ms");  // the third waited from 200
  // Requests not yet due are no evidence either way.
  EXPECT_EQ(trial_cannot_meet(*slo, scheduled_trial(at(1000), 8), at(900)), "");
  // TPOT is judged on finished requests: 4 tokens over 90 ms is 30 ms a token.
  auto slow_tokens = scheduled_trial(t0, 8);
  for (int i : {2, 3}) {
    slow_tokens[i].content_chunks = {slow_tokens[i].scheduled + std::chrono::milliseconds(10)};
    slow_tokens[i].end = slow_tokens[i].content_chunks[0] + std::chrono::milliseconds(90);
    slow_tokens[i].completion_tokens = 4;
  }
  EXPECT_EQ(trial_cannot_meet(*slo, slow_tokens, at(120)),
            "2 of 8 requests already over tpot_p99 20 ms");
  // One failure of 8 is more than 1%.
  auto failed = scheduled_trial(t0, 8);
  failed[4].end = at(200);
  failed[4].fail(bench::RequestError::http_429, "queue full");
  EXPECT_EQ(trial_cannot_meet(*slo, failed, at(210)), "1 of 8 requests failed (http_429: queue full)");
  // A p50 limit needs half of them over it.
  const auto median = bench::parse_slo("e2e_p50=150ms", error);
  EXPECT_EQ(trial_cannot_meet(*median, scheduled_trial(t0, 8), at(360)), "");  // 3 over
  EXPECT_EQ(trial_cannot_meet(*median, scheduled_trial(t0, 8), at(560)),
            "5 of 8 requests already over e2e_p50 150 ms");
}

TEST(TuneGoodputSearch, AnAbandonedTrialMissesAndSaysWhy) {
  bench::RunStatistics stats;
  stats.ok = 30;
  stats.abandoned = "2 of 32 requests already over ttft_p99 8000 ms";
  std::string error;
  const auto slo = bench::parse_slo("ttft_p99=8s", error);
  EXPECT_EQ(trial_misses(*slo, stats),
            std::vector<std::string>{"abandoned: 2 of 32 requests already over ttft_p99 8000 ms"});
}

TEST(TuneGoodputSearch, WithoutAStartRateABurstMeasuresTheCapacityFirst) {
  std::vector<double> rates;
  const Goodput found = search_goodput(ttft_slo(), {.refine_steps = 2}, [&](double rate) {
    rates.push_back(rate);
    return run_against(5.0, rate);
  });
  ASSERT_GE(rates.size(), 3u);
  EXPECT_TRUE(std::isinf(rates[0]));
  EXPECT_DOUBLE_EQ(rates[1], 5.0);  // half of what the burst achieved
  EXPECT_DOUBLE_EQ(found.rate, 5.0);
}

TEST(TuneGoodputSearch, AChallengerThatMissesTheRateToBeatTakesOneRun) {
  int runs = 0;
  const Goodput found = search_goodput(
      ttft_slo(), {.start_rate = 6, .growth = 1.25, .give_up_at_or_below = 6},
      [&](double rate) {
        ++runs;
        return run_against(5.0, rate);
      });
  EXPECT_TRUE(found.gave_up);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(found.rate, 0);
}

// A server whose goodput is known per setting: slots=8 and batch=1024 is the optimum, and each
// knob matters on its own.
double true_goodput(const Setting& setting) {
  const std::map<std::string, double> slots = {{"1", 1}, {"4", 3}, {"8", 4}, {"16", 2}};
  const std::map<std::string, double> batch = {{"256", 0.5}, {"512", 1}, {"1024", 1.5}};
  return slots.at(setting.at("slots")) * batch.at(setting.at("batch"));
}

std::vector<Knob> fake_knobs() {
  auto knob = [](std::string name, std::vector<std::string> labels, std::string baseline) {
    Knob made;
    made.name = std::move(name);
    made.baseline = std::move(baseline);
    for (const std::string& label : labels) made.values.push_back({label, {}});
    made.effect = "the fake's " + made.name;
    return made;
  };
  return {knob("slots", {"1", "4", "8", "16"}, "1"), knob("batch", {"256", "512", "1024"}, "512")};
}

struct FakeClock {
  double now_s = 0;
  double seconds_per_run = 10;
};

// Measures as tune_run does: each run takes the clock forward, none starts past the budget.
MeasureFn fake_measure(FakeClock& clock, int& runs, const Budget& budget) {
  return [&clock, &runs, &budget](const Setting& setting, const GoodputSearchOptions& options,
                                  Candidate& candidate) {
    candidate.command = "fake " + setting.at("slots") + " " + setting.at("batch");
    return search_goodput(
        ttft_slo(), options,
        [&](double rate) {
          ++runs;
          clock.now_s += clock.seconds_per_run;
          return run_against(true_goodput(setting), rate);
        },
        [&] { return budget.spent(); });
  };
}

TEST(TuneSearch, FindsTheTrueOptimumOfAServerWithKnownGoodput) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  const std::vector<Knob> knobs = fake_knobs();
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), {},
                                                    fake_measure(clock, runs, budget), budget, {});
  const Candidate& best = result.candidates[result.best];
  EXPECT_EQ(best.setting.at("slots"), "8");
  EXPECT_EQ(best.setting.at("batch"), "1024");
  EXPECT_NEAR(best.goodput_rps(), 6.0, 6.0 * 0.1);
  EXPECT_TRUE(result.stopped.empty());
  EXPECT_EQ(result.candidates.front().stage.rfind("baseline", 0), 0u);
  EXPECT_GT(result.candidates.front().measurements.size(), 1u);  // re-measured to confirm
  // Every other value of every knob was tried against the best so far: 3 + 2 challengers.
  EXPECT_EQ(result.candidates.size(), 6u);
}

// A baseline no challenger beats is the winner, and is re-measured before the report as a
// winner is.
TEST(TuneSearch, ABaselineNothingBeatsIsReMeasured) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  std::vector<Knob> knobs = fake_knobs();
  knobs[0].baseline = "8";
  knobs[1].baseline = "1024";  // the optimum
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), {},
                                                    fake_measure(clock, runs, budget), budget, {});
  ASSERT_EQ(result.best, 0u);
  EXPECT_EQ(result.candidates.front().measurements.size(), 2u);
  EXPECT_NE(result.candidates.front().stage.find("+confirm"), std::string::npos);
  for (size_t i = 1; i < result.candidates.size(); ++i) {
    EXPECT_EQ(result.candidates[i].measurements.size(), 1u);  // the losers are not
  }
}

TEST(TuneSearch, TheBudgetStopsItAndTheBestMeasuredSoFarWins) {
  FakeClock clock;
  int runs = 0;
  Budget budget(150, [&] { return clock.now_s; });
  const std::vector<Knob> knobs = fake_knobs();
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), {},
                                                    fake_measure(clock, runs, budget), budget, {});
  EXPECT_EQ(result.stopped, "budget");
  // Runs start only while the budget lasts; the one running when it ends may finish.
  EXPECT_LE(clock.now_s, 150 + clock.seconds_per_run);
  EXPECT_LT(result.candidates.size(), 6u);
  EXPECT_GE(result.candidates[result.best].goodput_rps(),
            result.candidates.front().goodput_rps());
}

// The confirmation shares what is left of the budget: a baseline whose first measurement was
// lucky (a queue that happened to drain) backs off through many trials when re-measured, and
// unshared it once took all the time kept for the confirmation, leaving the winner unconfirmed.
TEST(TuneSearch, TheConfirmationSharesTheBudgetLeftBetweenBaselineAndWinner) {
  FakeClock clock;
  int runs = 0;
  Budget budget(200, [&] { return clock.now_s; });  // tight: the confirmation is short of time
  const std::vector<Knob> knobs = fake_knobs();
  const Setting baseline = baseline_setting(knobs);
  int baseline_measurements = 0;
  const MeasureFn measure = [&](const Setting& setting, const GoodputSearchOptions& options,
                                Candidate& candidate) {
    const bool lucky = setting == baseline && baseline_measurements++ == 0;
    const double goodput = setting == baseline && !lucky ? 0.05 : true_goodput(setting);
    candidate.command = "fake";
    return search_goodput(
        ttft_slo(), options,
        [&](double rate) {
          ++runs;
          clock.now_s += clock.seconds_per_run;
          return run_against(goodput, rate);
        },
        [&] { return budget.spent(); });
  };
  SearchOptions options;
  options.confirm_top = 1;
  const SearchResult result =
      search_configurations(knobs, baseline, {}, measure, budget, options);
  ASSERT_NE(result.best, 0u);
  EXPECT_EQ(result.candidates.front().measurements.size(), 2u);  // the baseline re-measured
  EXPECT_EQ(result.candidates[result.best].measurements.size(), 2u)
      << "the winner was not re-measured: " << result.candidates[result.best].stage;
}

// With every knob predicted, the whole grid is predicted and only its best few are measured:
// the search measures the baseline and the grid's top two, and the best of them wins.
TEST(TuneSearch, TheWholeGridIsPredictedAndOnlyItsBestAreMeasured) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  std::vector<Knob> knobs = fake_knobs();
  for (Knob& knob : knobs) knob.predicted = true;
  std::atomic<int> predictions{0};  // the grid predicts on every core at once
  const PredictFn predict = [&](const Setting& setting) -> std::optional<double> {
    ++predictions;
    return true_goodput(setting);
  };
  SearchOptions options;
  options.measure_top = 2;
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), predict,
                                                    fake_measure(clock, runs, budget), budget,
                                                    options);
  ASSERT_TRUE(result.grid);
  ASSERT_EQ(result.grid->ranked.size(), 12u);  // 4 slots x 3 batches, combinations included
  EXPECT_GE(predictions, 12);
  EXPECT_EQ(result.grid->ranked[0].setting, (Setting{{"slots", "8"}, {"batch", "1024"}}));
  EXPECT_EQ(result.grid->ranked[0].changes, 2);
  ASSERT_EQ(result.candidates.size(), 3u) << "the baseline and the grid's best two, no more";
  EXPECT_EQ(result.candidates[1].stage.rfind("grid", 0), 0u);
  EXPECT_EQ(result.candidates[1].setting, result.grid->ranked[0].setting);
  EXPECT_EQ(result.candidates[result.best].setting.at("slots"), "8");
  EXPECT_EQ(result.candidates[result.best].setting.at("batch"), "1024");
  EXPECT_NEAR(result.candidates[result.best].goodput_rps(), 6.0, 0.6);
  // The report shows the grid's best beside what was measured of them, and the search's figure
  // beside the re-measurement's.
  TuneReport report;
  report.knobs = knobs;
  report.search = result;
  const nlohmann::json json = report_json(report);
  EXPECT_EQ(json["grid"]["configurations"], 12);
  EXPECT_EQ(json["grid"]["best"][0]["change"], "slots=8 batch=1024");
  EXPECT_GT(json["grid"]["best"][0]["goodput_rps"].get<double>(), 5);
  EXPECT_TRUE(json["grid"]["best"][2]["goodput_rps"].is_null());  // not measured
  const std::string markdown = report_markdown(report);
  EXPECT_NE(markdown.find("12 configurations predicted"), std::string::npos) << markdown;
  const Candidate& best = result.candidates[result.best];
  ASSERT_EQ(best.measurements.size(), 2u);  // the search's and the confirmation's
  EXPECT_NE(markdown.find(fmt::format("| {:.3g} | {:.3g} | ", best.measurements[0].rate,
                                      best.measurements[1].rate)),
            std::string::npos)
      << markdown;
}

// A configuration that only adds a change the prediction does not move to one measured already
// is skipped (the simulation says the knob does not matter there); the knobs it does not see
// are then challenged one at a time from the grid's winner.
TEST(TuneSearch, TheGridMeasuresDistinctPredictionsThenTheKnobsItCannotSee) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  std::vector<Knob> knobs = fake_knobs();
  knobs[0].predicted = true;  // slots: predicted; batch: not
  Knob alike = knobs[1];
  alike.name = "alike";
  alike.predicted = true;  // predicted, but the prediction does not move with it
  knobs.push_back(alike);
  const PredictFn predict = [](const Setting& setting) -> std::optional<double> {
    return true_goodput(setting);
  };
  const MeasureFn inner = fake_measure(clock, runs, budget);
  std::vector<Setting> measured;
  const MeasureFn measure = [&](const Setting& setting, const GoodputSearchOptions& options,
                                Candidate& candidate) {
    measured.push_back(setting);
    return inner(setting, options, candidate);
  };
  SearchOptions options;
  options.measure_top = 3;
  options.confirm_top = 0;
  const SearchResult result =
      search_configurations(knobs, baseline_setting(knobs), predict, measure, budget, options);
  ASSERT_TRUE(result.grid);
  EXPECT_EQ(result.grid->ranked.size(), 12u);  // slots x alike; batch stays at the baseline
  ASSERT_GE(measured.size(), 4u);
  // The grid's three: slots 8, 4 and 16, each with alike at its baseline value.
  EXPECT_EQ(measured[1], (Setting{{"slots", "8"}, {"batch", "512"}, {"alike", "512"}}));
  EXPECT_EQ(measured[2].at("slots"), "4");
  EXPECT_EQ(measured[3].at("slots"), "16");
  for (size_t i = 1; i <= 3; ++i) EXPECT_EQ(measured[i].at("alike"), "512");
  // Then batch, unseen, challenges the winner (slots 8).
  ASSERT_EQ(measured.size(), 6u);
  EXPECT_EQ(measured[4].at("slots"), "8");
  EXPECT_NE(measured[4].at("batch"), "512");
  EXPECT_EQ(result.candidates[result.best].setting.at("batch"), "1024");
}

// A simulation that predicts every configuration alike cannot rank them: the grid's measured
// best are then single changes from the baseline, each a different knob's or value's, not one
// configuration and its twins.
TEST(TuneSearch, AFlatPredictionMeasuresSingleChangesFromTheBaseline) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  std::vector<Knob> knobs = fake_knobs();
  for (Knob& knob : knobs) knob.predicted = true;
  const PredictFn predict = [](const Setting&) -> std::optional<double> { return 2.0; };
  SearchOptions options;
  options.measure_top = 3;
  options.confirm_top = 0;
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), predict,
                                                    fake_measure(clock, runs, budget), budget,
                                                    options);
  ASSERT_EQ(result.candidates.size(), 4u);
  std::set<Setting> measured;
  for (size_t i = 1; i < result.candidates.size(); ++i) {
    const Setting& setting = result.candidates[i].setting;
    const int changes = (setting.at("slots") != "1") + (setting.at("batch") != "512");
    EXPECT_EQ(changes, 1) << describe_change(knobs, baseline_setting(knobs), setting);
    measured.insert(setting);
  }
  EXPECT_EQ(measured.size(), 3u);
}

TEST(TuneSearch, ATrialHoldsTheRequestsTheSlosPercentileNeeds) {
  std::string error;
  auto resolution = [&](const char* text) {
    return requests_to_resolve(*bench::parse_slo(text, error));
  };
  EXPECT_EQ(resolution("ttft_p99=2s,tpot_p95=100ms").requests, 100);
  EXPECT_EQ(resolution("ttft_p99=2s,tpot_p95=100ms").limit, "ttft_p99");
  EXPECT_EQ(resolution("tpot_p95=100ms").requests, 20);
  EXPECT_EQ(resolution("e2e_p90=1s,ttft_p50=1s").requests, 10);
  EXPECT_EQ(resolution("ttft_max=1s,e2e_mean=2s").requests, 1);
  EXPECT_TRUE(resolution("ttft_max=1s").limit.empty());
}

// A configuration that cannot serve the workload (brisk serve would refuse its longest request)
// is pruned with the reason, never measured.
TEST(TuneSearch, AConfigurationThatRefusesTheWorkloadIsNotMeasured) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  const std::vector<Knob> knobs = fake_knobs();
  SearchOptions options;
  options.refusal = [](const Setting& setting) -> std::optional<std::string> {
    if (setting.at("slots") == "8") return "too small a share";
    return std::nullopt;
  };
  const SearchResult result = search_configurations(knobs, baseline_setting(knobs), {},
                                                    fake_measure(clock, runs, budget), budget,
                                                    options);
  const auto eight = std::find_if(result.candidates.begin(), result.candidates.end(),
                                  [](const Candidate& c) { return c.setting.at("slots") == "8"; });
  ASSERT_NE(eight, result.candidates.end());
  EXPECT_EQ(eight->stage, "pruned");
  EXPECT_EQ(eight->note, "too small a share");
  EXPECT_FALSE(eight->measured());
  EXPECT_EQ(result.candidates[result.best].setting.at("slots"), "4");  // the best of the rest
}

// With a buffer per sequence a request is limited to --ctx-size / --max-seqs cells: a
// per-sequence candidate gets the context its longest request needs instead of refusing it.
TEST(TuneServeKnobs, APerSequenceCandidateGetsTheContextItsLongestRequestNeeds) {
  ServeKnobs serve = brisk_serve_knobs({"--model", "m", "--ctx-size", "4096"}, 2);
  serve.longest_request_tokens = 1000;
  Setting setting = baseline_setting(serve.knobs);
  EXPECT_FALSE(per_sequence_context(serve, setting));  // one buffer: a request may use all of it
  setting["kv-layout"] = "per-sequence";
  setting["max-seqs"] = "4";
  EXPECT_FALSE(per_sequence_context(serve, setting));  // 1024 cells each hold 1000
  serve.longest_request_tokens = 1025;
  EXPECT_EQ(per_sequence_context(serve, setting), 4352);  // 4 × 1025, rounded up to 256
  ServeKnobs defaults = brisk_serve_knobs({"--model", "m"}, 2);  // --ctx-size 8192
  defaults.longest_request_tokens = 800;
  setting["max-seqs"] = "16";
  EXPECT_EQ(per_sequence_context(defaults, setting), 12800);  // tune's run 3 pruned this one
  defaults.longest_request_tokens = 0;  // a dataset: unknown
  EXPECT_FALSE(per_sequence_context(defaults, setting));
}

TEST(TuneServeKnobs, AnEmbeddingModelsKnobsAreItsBatchersAndATooSmallBatchIsNotMeasured) {
  ServeKnobs serve = embedding_serve_knobs(
      {"--model", "all-minilm-l6-v2", "--batch-window-ms", "2", "--max-queued-inputs", "100"}, 2);
  EXPECT_EQ(serve.fixed_args, (std::vector<std::string>{"--model", "all-minilm-l6-v2",
                                                        "--max-queued-inputs", "100"}));
  const Setting baseline = baseline_setting(serve.knobs);
  EXPECT_EQ(baseline.at("batch-window-ms"), "2");
  EXPECT_EQ(baseline.at("max-batch-inputs"), "64");  // brisk serve's defaults
  EXPECT_EQ(baseline.at("max-batch-tokens"), "0");
  EXPECT_EQ(baseline.count("max-seqs"), 0u);  // the completion engine's flags: refused there
  const std::vector<std::string> args = setting_args(serve.knobs, baseline);
  EXPECT_NE(std::find(args.begin(), args.end(), "--batch-window-ms"), args.end());
  EXPECT_EQ(std::find(args.begin(), args.end(), "--max-seqs"), args.end());

  // A batch smaller than the longest input: brisk serve would refuse that input, so the
  // candidate is pruned with the reason, never measured.
  serve.longest_request_tokens = 300;
  Setting small = baseline;
  small["max-batch-tokens"] = "256";
  const auto refused = batch_tokens_refusal(serve, small);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("below the workload's longest input (300 tokens)"), std::string::npos)
      << *refused;
  EXPECT_FALSE(batch_tokens_refusal(serve, baseline));  // 0: the model's own context
  small["max-batch-tokens"] = "1024";
  EXPECT_FALSE(batch_tokens_refusal(serve, small));

  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  SearchOptions options;
  options.refusal = [&](const Setting& setting) { return batch_tokens_refusal(serve, setting); };
  std::vector<Setting> measured;
  const MeasureFn measure = [&](const Setting& setting, const GoodputSearchOptions&, Candidate&) {
    measured.push_back(setting);
    clock.now_s += 10;
    Goodput goodput;
    goodput.rate = 1;
    goodput.missed_at = 1.2;
    return goodput;
  };
  const SearchResult result =
      search_configurations(serve.knobs, baseline, {}, measure, budget, options);
  for (const Setting& setting : measured) EXPECT_NE(setting.at("max-batch-tokens"), "256");
  const auto pruned = std::find_if(
      result.candidates.begin(), result.candidates.end(),
      [](const Candidate& candidate) { return candidate.setting.at("max-batch-tokens") == "256"; });
  ASSERT_NE(pruned, result.candidates.end());
  EXPECT_EQ(pruned->stage, "pruned");
  EXPECT_NE(pruned->note.find("longest input"), std::string::npos);
}

TEST(TuneReport, HoldsBaselineBestEveryCandidateAndWhyItWins) {
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  TuneReport report;
  report.server = "fake";
  report.model = "m";
  report.slo = "ttft_p99=1s";
  report.knobs = fake_knobs();
  report.search = search_configurations(report.knobs, baseline_setting(report.knobs), {},
                                        fake_measure(clock, runs, budget), budget, {});
  const nlohmann::json json = report_json(report);
  for (const char* key : {"server", "model", "slo", "budget_s", "elapsed_s", "stopped", "knobs",
                          "baseline", "best", "improvement", "why", "candidates"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  for (const char* key : {"setting", "change", "stage", "predicted_goodput_rps", "goodput_rps",
                          "goodput_ci95_rps", "measurements", "command", "peak_memory_bytes"}) {
    EXPECT_TRUE(json["best"].contains(key)) << key;
  }
  EXPECT_EQ(json["best"]["command"], "fake 8 1024");
  EXPECT_EQ(json["baseline"]["change"], "(baseline)");
  EXPECT_GT(json["improvement"].get<double>(), 2);
  EXPECT_EQ(json["candidates"].size(), report.search.candidates.size());
  EXPECT_EQ(json["candidates"][0]["command"], "fake 8 1024");  // ranked, best first
  const std::string why = json["why"].dump();
  EXPECT_NE(why.find("slots 8 (was 1)"), std::string::npos) << why;
  EXPECT_NE(why.find("the baseline missed ttft_p99"), std::string::npos) << why;
  EXPECT_NE(ranked_table(report).find("| 1 | slots=8 batch=1024 |"), std::string::npos)
      << ranked_table(report);
  EXPECT_NE(ranked_table(report).find("TTFT p99 ms"), std::string::npos);
  // An embeddings tune: its answers have no first token, so E2E and inputs/s are shown.
  report.endpoint = "embeddings";
  EXPECT_EQ(report_json(report)["endpoint"], "embeddings");
  EXPECT_NE(ranked_table(report).find("| E2E p99 ms | inputs/s |"), std::string::npos)
      << ranked_table(report);
  EXPECT_EQ(ranked_table(report).find("TTFT"), std::string::npos);
  EXPECT_NE(report_json(report)["why"].dump().find("E2E p99"), std::string::npos)
      << report_json(report)["why"].dump();
}

TEST(TunePrescriptions, ReadsTheDoctorsServeFlagsAndMeasuresEachInFull) {
  const auto dir = std::filesystem::temp_directory_path() / "brisk-tune-verify-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "report.json") << R"({"findings": [
      {"id": "no_batching", "serve_flags": ["--max-seqs", "16"]},
      {"id": "network_overhead", "serve_flags": []},
      {"id": "head_of_line_blocking", "serve_flags": ["--target-itl-ms", "150", "--no-kv-unified"]}]})";
  std::string error;
  const auto prescriptions = read_prescriptions(dir.string(), error);  // the directory works
  ASSERT_TRUE(prescriptions) << error;
  ASSERT_EQ(prescriptions->size(), 2u);  // a finding without flags is no prescription
  EXPECT_EQ((*prescriptions)[1].finding, "head_of_line_blocking");
  EXPECT_EQ(flags_as_setting((*prescriptions)[1].serve_flags),
            (Setting{{"target-itl-ms", "150"}, {"no-kv-unified", ""}}));
  const Knob knob = prescription_knob(*prescriptions);
  EXPECT_EQ(knob.baseline, "current");
  EXPECT_EQ(knob.find("no_batching")->args, (std::vector<std::string>{"--max-seqs", "16"}));

  std::ofstream(dir / "other.json") << R"({"runs": []})";
  EXPECT_FALSE(read_prescriptions((dir / "other.json").string(), error));
  EXPECT_NE(error.find("not a brisk doctor report.json"), std::string::npos) << error;

  // Every prescription is measured in full, even one that loses to the current setup.
  FakeClock clock;
  int runs = 0;
  Budget budget(1e6, [&] { return clock.now_s; });
  const std::map<std::string, double> goodput = {
      {"current", 2}, {"no_batching", 5}, {"head_of_line_blocking", 1}};
  const MeasureFn measure = [&](const Setting& setting, const GoodputSearchOptions& options,
                                Candidate&) {
    return search_goodput(ttft_slo(), options, [&](double rate) {
      clock.now_s += 10;
      return run_against(goodput.at(setting.at("prescription")), rate);
    });
  };
  const SearchResult result =
      measure_each({{{"prescription", "no_batching"}}, {{"prescription", "head_of_line_blocking"}}},
                   {{"prescription", "current"}}, {}, measure, budget, {});
  ASSERT_EQ(result.candidates.size(), 3u);
  EXPECT_EQ(result.candidates[result.best].setting.at("prescription"), "no_batching");
  EXPECT_NEAR(result.candidates[2].goodput_rps(), 1.0, 0.15);  // found, not given up
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace brisk::tune
