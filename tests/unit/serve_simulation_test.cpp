// brisk serve's scheduler on a virtual clock (sched/serve_simulation.h): the simulation brisk plan
// predicts with is the server's own scheduler, step for step.
#include "sched/serve_simulation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "fake_clock.h"
#include "fake_model_runner.h"
#include "plan/calibration.h"
#include "plan/queueing_model.h"
#include "scheduler_run.h"

namespace brisk {
namespace {

using testing::FakeClock;
using testing::FakeModelRunner;

// What a step costs in these tests: a curve by batch, a prompt token's price and a row's price
// per cell it attends over, as `brisk plan calibrate` stores them.
StepCostTable test_table() {
  StepCostTable table;
  table.decode_ms_by_batch = {{1, 10.0}, {4, 16.0}, {8, 24.0}};
  table.prefill_ms_per_token = 0.5;
  table.row_cell_ms = 0.002;
  return table;
}

SchedulerOptions test_options() {
  SchedulerOptions options = testing::options(4, 128);
  options.max_step_ms = 40;
  options.long_prefill_tokens = 100;
  options.prefix_cache.enabled = true;
  return options;
}

// The same arrivals through the engine loop (its thread, the fake runner that plays llama.cpp's
// KV cache, a fake clock moved by each step's price) and through the simulation: the scheduler
// decides the same steps in the same order. Fails the day the simulation hands requests over,
// keeps KV cells or prices steps otherwise than the server runs them.
TEST(ServeSimulation, DecidesTheStepsTheEngineLoopDecides) {
  const StepCostTable table = test_table();
  StepCosts price = StepCosts::from_table(table, 0, 128);
  const auto price_ms = [&](int decodes, int prompt_tokens, int cells) {
    price.set_attended_cells(cells);
    return price.step_ms(decodes, prompt_tokens);
  };

  // Six at once, prompts of 40 to 290 tokens (two of them long), then two more during the run;
  // three start with the same 32 tokens (a system prompt: the prefix cache shares its cells).
  std::vector<testing::Job> jobs;
  const int prompts[] = {40, 290, 60, 150, 25, 80, 120, 35};
  const int shared[] = {32, 0, 32, 0, 0, 32, 0, 0};
  const int outputs[] = {12, 6, 20, 9, 15, 7, 10, 18};
  const int later[] = {0, 0, 0, 0, 0, 0, 7, 15};  // submitted before this decode (0: at once)
  for (int i = 0; i < 8; ++i) {
    testing::Job job = testing::jobs(1, prompts[i], outputs[i], testing::greedy())[0];
    for (auto& token : job.prompt) token += 1000 * i;  // no two prompts start alike...
    for (int k = 0; k < shared[i]; ++k) job.prompt[static_cast<size_t>(k)] = 2 + k;  // ...but these
    job.submit_before_decode = later[i];
    jobs.push_back(job);
  }

  FakeClock clock;
  // Four running sequences and four for the prefix cache, as brisk serve gives the engine.
  FakeModelRunner runner(4096, -1, 97, 8);
  runner.clock = &clock;
  runner.step_price_ms = price_ms;
  SchedulerOptions options = test_options();
  options.clock = clock.function();
  std::vector<testing::Outcome> served;
  {
    testing::SchedulerRun run(runner, options);
    served = run.all(jobs);
  }
  ASSERT_FALSE(runner.priced_steps.empty());

  ServeSimulationOptions simulated;
  simulated.scheduler = test_options();
  simulated.kv_cells = 4096;
  simulated.price = table;
  simulated.warm_up = false;  // as the engine loop above ran
  ServeSimulation simulation(simulated);
  // A request submitted before decode n arrived as step n began (its decode is when the clock
  // moves): it reaches the scheduler for step n + 1.
  std::vector<double> step_start_ms = {0};
  for (const auto& step : runner.priced_steps) {
    step_start_ms.push_back(step_start_ms.back() +
                            price_ms(step.decodes, step.prompt_tokens, step.cells_in_use));
  }
  for (int i = 0; i < 8; ++i) {
    SimulatedRequest request;
    request.arrival_ms = later[i] == 0 ? 0 : step_start_ms[static_cast<size_t>(later[i] - 1)] + 1e-3;
    request.prompt_tokens = prompts[i];
    request.shared_prefix_tokens = shared[i];
    request.output_tokens = outputs[i];
    simulation.arrive(request);
  }
  ASSERT_TRUE(simulation.run());

  const std::vector<PricedStep>& steps = simulation.steps();
  ASSERT_EQ(steps.size(), runner.priced_steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].decodes, runner.priced_steps[i].decodes) << "step " << i;
    EXPECT_EQ(steps[i].prompt_tokens, runner.priced_steps[i].prompt_tokens) << "step " << i;
    EXPECT_EQ(steps[i].attended_cells, runner.priced_steps[i].cells_in_use) << "step " << i;
  }
  int cached = 0;
  for (const SimulatedRequest& request : simulation.requests()) cached += request.cached_prompt_tokens;
  EXPECT_GE(cached, 32) << "a later request read the shared prefix from the cache";
  for (size_t i = 0; i < served.size(); ++i) {
    EXPECT_EQ(simulation.requests()[i].finish_reason, served[i].reason) << "request " << i;
    EXPECT_EQ(simulation.requests()[i].cached_prompt_tokens, served[i].cached_prompt_tokens)
        << "request " << i;
    EXPECT_GT(simulation.requests()[i].first_token_ms, simulation.requests()[i].arrival_ms);
  }
}

// brisk plan, given what a model's steps cost on this device, predicts with the server's
// scheduler: a lone prompt is one step of its tokens, its decodes each a one-sequence step at
// the cells it holds.
TEST(ServeSimulation, PlanPredictsWithTheServersSchedulerOnMeasuredSteps) {
  std::string error;
  auto catalog = plan::HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  plan::Deployment deployment;
  deployment.device = catalog->find("cpu-2vcpu");
  ASSERT_NE(deployment.device, nullptr);
  for (const plan::ModelProfile& model : plan::model_presets(&error)) {
    if (model.id == "llama-3.2-1b") deployment.model = model;
  }
  ASSERT_EQ(deployment.model.id, "llama-3.2-1b") << error;
  deployment.precision = *plan::parse_precision("q4_k_m");
  deployment.efficiency = plan::Efficiency::defaults_for(*deployment.device);
  deployment.efficiency.measured_steps[deployment.model.name] = {test_table(), false};
  deployment.chunking.target_step_ms = 0;  // the prompt in one step
  deployment.simulate_server = true;

  const plan::LoadPrediction lone = plan::predict_burst(deployment, 256, 9, 1);
  EXPECT_NEAR(lone.ttft_ms.p50, 10 + 256 * 0.5, 1e-6);
  // Eight decodes of one sequence over the 256..263 cells in use before each: 10 ms and 2 us a
  // cell each.
  EXPECT_NEAR(lone.tpot_ms.p50, 10 + 0.002 * 259.5, 1e-6);

  // In one KV buffer the prefix cache's finished requests are attended over too: priced at no
  // cell, a quiet server's prompt costs what a lone one does.
  deployment.efficiency.measured_steps[deployment.model.name].table.row_cell_ms = 0;
  const plan::LoadPrediction quiet = plan::predict_open_loop(deployment, 256, 9, 0.1);
  EXPECT_FALSE(quiet.saturated);
  EXPECT_NEAR(quiet.ttft_ms.p50, 138, 1e-6) << "at 0.1/s nobody waits";
  EXPECT_TRUE(plan::predict_open_loop(deployment, 256, 9, 100).saturated)
      << "100 requests a second of 138 ms prompts are beyond one server";

  // The same model under another name is not measured: the roofline predicts it.
  deployment.model.name = "another model";
  EXPECT_GT(std::abs(plan::predict_burst(deployment, 256, 9, 1).ttft_ms.p50 - lone.ttft_ms.p50),
            1);
}

TEST(ServeSimulation, MeasuredStepsSurviveTheCalibrationFile) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("brisk-measured-steps-" + std::to_string(getpid()));
  plan::Calibration first;
  first.device_id = "cpu-2vcpu";
  first.efficiency.measured_steps["model a"] = {test_table(), false};
  std::string error;
  ASSERT_TRUE(plan::store_calibration(file, first, &error)) << error;
  plan::Calibration second = first;  // another model calibrated later on the same device
  second.efficiency.measured_steps.clear();
  second.efficiency.measured_steps["model b"] = {test_table(), true};
  second.efficiency.measured_steps["model b"].table.prefill_ms_per_token = 0.25;
  ASSERT_TRUE(plan::store_calibration(file, second, &error)) << error;
  const auto loaded = plan::load_calibrations(file);
  std::filesystem::remove(file);
  ASSERT_EQ(loaded.count("cpu-2vcpu"), 1u);
  const auto& measured = loaded.at("cpu-2vcpu").measured_steps;
  ASSERT_EQ(measured.size(), 2u) << "model a's steps are kept when model b is calibrated";
  EXPECT_EQ(measured.at("model a").table.decode_ms_by_batch, test_table().decode_ms_by_batch);
  EXPECT_DOUBLE_EQ(measured.at("model a").table.row_cell_ms, 0.002);
  EXPECT_FALSE(measured.at("model a").attention_on_gpu);
  EXPECT_DOUBLE_EQ(measured.at("model b").table.prefill_ms_per_token, 0.25);
  EXPECT_TRUE(measured.at("model b").attention_on_gpu);
}

}  // namespace
}  // namespace brisk
