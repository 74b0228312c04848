// The model registry's residency on a real small model: requests queue while their model
// loads, a held model is never unloaded, pinned ones never. Skipped when the test model is not
// pulled (make test-models).
#include "server/model_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "common/model_store.h"

namespace brisk {
namespace {

using namespace std::chrono_literals;

// Loads SmolLM2 135M; `gate`, when given, holds the load until it is opened.
ModelLoader smollm_loader(std::shared_future<void> gate = {}) {
  return [gate](std::string* error) -> std::unique_ptr<ModelParts> {
    if (gate.valid()) gate.wait();
    const ResolveResult model = ModelStore::from_environment().resolve("smollm2-135m");
    if (!model.ok()) {
      *error = model.error;
      return nullptr;
    }
    auto parts = std::make_unique<ModelParts>();
    EngineOptions options;
    options.model_path = model.path.string();
    options.ctx_size = 512;
    options.max_seqs = 2;
    options.max_batched_tokens = 128;
    options.threads = 1;
    parts->engine = Engine::load(options, error);
    if (!parts->engine) return nullptr;
    parts->scheduler.max_seqs = 2;
    parts->scheduler.max_batched_tokens = 128;
    parts->route.model_name = "smollm";
    return parts;
  };
}

bool test_model_pulled() {
  return ModelStore::from_environment().resolve("smollm2-135m").ok();
}

// Two models of 100 bytes each under a budget of 150: one loaded at a time.
struct TwoModels {
  RejectionCounts rejections;
  ModelRegistry registry;
  ServedModel* a = nullptr;
  ServedModel* b = nullptr;

  explicit TwoModels(ModelLoader b_loader, bool a_pinned = false)
      : registry(ResidencyOptions{.memory_budget_bytes = 150, .max_load_wait_s = 30}) {
    add("a", smollm_loader(), a_pinned);
    add("b", std::move(b_loader), false);
    a = registry.find("a");
    b = registry.find("b");
    const auto error = registry.load_at_start();
    EXPECT_FALSE(error) << *error;
    registry.start_residency();
  }
  ~TwoModels() { registry.shutdown_all(0ms); }

  void add(const std::string& name, ModelLoader loader, bool pinned) {
    ServedModel::Options options;
    options.name = name;
    options.memory_bytes = 100;
    options.pinned = pinned;
    std::string error;
    EXPECT_TRUE(registry.add(
        std::make_unique<ServedModel>(std::move(options), std::move(loader), rejections), &error))
        << error;
  }
};

// Collects what the registry answers a waiting request.
struct Answers {
  std::mutex mutex;
  std::vector<ModelRegistry::HoldOutcome> outcomes;
  ModelRegistry::HoldCallback callback() {
    return [this](ModelRegistry::HoldOutcome outcome) {
      std::lock_guard lock(mutex);
      outcomes.push_back(std::move(outcome));
    };
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return outcomes.size();
  }
  bool wait_for(size_t n, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (count() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
};

bool wait_for_state(const ServedModel& model, ModelState state, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (model.state() != state) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(ModelRegistry, RequestsQueueWhileTheirModelLoadsAndGetItOnceLoaded) {
  if (!test_model_pulled()) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  std::promise<void> open;
  TwoModels models(smollm_loader(open.get_future().share()));
  EXPECT_EQ(models.a->state(), ModelState::loaded);
  EXPECT_EQ(models.b->state(), ModelState::unloaded);  // it did not fit beside a at start

  Answers answers;
  EXPECT_FALSE(models.registry.hold(*models.b, answers.callback()).has_value());
  EXPECT_FALSE(models.registry.hold(*models.b, answers.callback()).has_value());
  // a is idle: it makes room, and b's load begins (held at the gate).
  ASSERT_TRUE(wait_for_state(*models.b, ModelState::loading, 10s));
  EXPECT_EQ(models.a->state(), ModelState::unloaded);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(answers.count(), 0u);  // nobody is answered before the load ends
  open.set_value();
  ASSERT_TRUE(answers.wait_for(2, 60s));
  for (auto& outcome : answers.outcomes) {
    ASSERT_TRUE(std::holds_alternative<ModelHold>(outcome));
    const ModelHold& hold = std::get<ModelHold>(outcome);
    EXPECT_NE(hold.model, nullptr);
    EXPECT_GE(hold.load_wait_ms, 100);
  }
  EXPECT_EQ(models.b->state(), ModelState::loaded);
  // A loaded model is held at once, without waiting.
  auto now = models.registry.hold(*models.b, [](auto) { FAIL() << "no wait expected"; });
  ASSERT_TRUE(now && std::holds_alternative<ModelHold>(*now));
  EXPECT_EQ(std::get<ModelHold>(*now).load_wait_ms, 0);
}

TEST(ModelRegistry, AHeldModelIsNeverUnloadedAndTheWaiterGetsItsMemoryWhenLetGo) {
  if (!test_model_pulled()) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  TwoModels models(smollm_loader());
  std::shared_ptr<LoadedModel> in_flight = models.a->hold();  // a request on a
  ASSERT_NE(in_flight, nullptr);
  EXPECT_EQ(models.registry.unload(*models.a), ModelRegistry::UnloadResult::busy);

  Answers answers;
  EXPECT_FALSE(models.registry.hold(*models.b, answers.callback()).has_value());
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(models.a->state(), ModelState::loaded);
  EXPECT_EQ(models.b->state(), ModelState::unloaded);
  EXPECT_EQ(answers.count(), 0u);

  in_flight.reset();  // the request ends
  ASSERT_TRUE(answers.wait_for(1, 60s));
  EXPECT_TRUE(std::holds_alternative<ModelHold>(answers.outcomes.front()));
  EXPECT_EQ(models.a->state(), ModelState::unloaded);
  EXPECT_EQ(models.b->state(), ModelState::loaded);
}

TEST(ModelRegistry, APinnedModelStaysAndTheOtherCannotEverFitBesideIt) {
  if (!test_model_pulled()) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  RejectionCounts rejections;
  ModelRegistry registry(ResidencyOptions{.memory_budget_bytes = 150});
  for (const char* name : {"a", "b"}) {
    ServedModel::Options options;
    options.name = name;
    options.memory_bytes = 100;
    options.pinned = std::string(name) == "a";
    std::string error;
    ASSERT_TRUE(registry.add(
        std::make_unique<ServedModel>(std::move(options), smollm_loader(), rejections), &error));
  }
  const auto error = registry.load_at_start();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("'b' needs"), std::string::npos) << *error;
  EXPECT_NE(error->find("is missing"), std::string::npos) << *error;
  EXPECT_EQ(registry.unload(*registry.find("a")), ModelRegistry::UnloadResult::pinned);
  registry.shutdown_all(0ms);
}

}  // namespace
}  // namespace brisk
