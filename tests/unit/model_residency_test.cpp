// The residency policy: which models stay loaded within the memory budget.
#include "sched/model_residency.h"

#include <gtest/gtest.h>

#include <vector>

namespace brisk {
namespace {

ResidentModel loaded(uint64_t bytes, double idle_s, bool busy = false, bool pinned = false) {
  ResidentModel model;
  model.bytes = bytes;
  model.loaded = true;
  model.idle_s = idle_s;
  model.busy = busy;
  model.pinned = pinned;
  return model;
}

ResidentModel unloaded(uint64_t bytes) {
  ResidentModel model;
  model.bytes = bytes;
  return model;
}

TEST(ModelResidency, LoadsWithoutUnloadingWhenItFits) {
  const ModelResidency residency(100);
  const std::vector<ResidentModel> models = {loaded(40, 5), unloaded(60)};
  const LoadDecision decision = residency.decide_load(models, 1);
  EXPECT_EQ(decision.kind, LoadDecision::Kind::load);
  EXPECT_TRUE(decision.unload.empty());
}

TEST(ModelResidency, UnloadsTheLeastRecentlyUsedIdleModelsAndNoMore) {
  const ModelResidency residency(100);
  // 90 loaded; 30 wanted: one of the idle ones must go, the longest idle (index 1).
  const std::vector<ResidentModel> models = {loaded(30, 5), loaded(30, 50), loaded(30, 20),
                                             unloaded(30)};
  const LoadDecision decision = residency.decide_load(models, 3);
  EXPECT_EQ(decision.kind, LoadDecision::Kind::load);
  EXPECT_EQ(decision.unload, (std::vector<size_t>{1}));
}

TEST(ModelResidency, NeverUnloadsABusyOrPinnedModel) {
  const ModelResidency residency(100);
  // Only the busy and the pinned models could make room: wait for the busy one.
  const std::vector<ResidentModel> models = {loaded(50, 100, /*busy=*/true),
                                             loaded(30, 100, false, /*pinned=*/true),
                                             loaded(10, 1), unloaded(50)};
  const LoadDecision decision = residency.decide_load(models, 3);
  EXPECT_EQ(decision.kind, LoadDecision::Kind::wait);
  EXPECT_TRUE(decision.unload.empty());
}

TEST(ModelResidency, AModelThatCannotFitBesideThePinnedOnesNeverLoads) {
  const ModelResidency residency(100);
  const std::vector<ResidentModel> models = {loaded(70, 0, false, /*pinned=*/true), unloaded(45)};
  const LoadDecision decision = residency.decide_load(models, 1);
  EXPECT_EQ(decision.kind, LoadDecision::Kind::never);
  EXPECT_EQ(decision.missing_bytes, 15u);
  EXPECT_EQ(residency.shortfall_beside_pinned(models, 1), 15u);
  EXPECT_EQ(residency.shortfall_beside_pinned(models, 0), std::nullopt);
}

TEST(ModelResidency, KeepAliveExpiresOnlyIdleUnpinnedModels) {
  const std::vector<ResidentModel> models = {loaded(10, 301), loaded(10, 301, /*busy=*/true),
                                             loaded(10, 301, false, /*pinned=*/true),
                                             loaded(10, 299), unloaded(10)};
  EXPECT_EQ(ModelResidency::expired(models, 300), (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace brisk
