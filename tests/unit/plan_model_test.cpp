// Memory arithmetic of brisk plan, checked against hand-computed cases.
#include <gtest/gtest.h>

#include "plan/capacity_planner.h"
#include "plan/memory_model.h"
#include "plan/model_profile.h"
#include "plan/multi_model_fit.h"

namespace brisk::plan {
namespace {

ModelProfile preset(const std::string& id) {
  std::string error;
  for (ModelProfile& model : model_presets(&error)) {
    if (model.id == id) return model;
  }
  ADD_FAILURE() << "no preset " << id << " " << error;
  return {};
}

TEST(ModelProfile, Llama31_8bKvCacheIs128KibPerTokenInBf16) {
  const ModelProfile model = preset("llama-3.1-8b");
  // 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131072.
  EXPECT_DOUBLE_EQ(model.kv_bytes(1, 2), 131072);
  EXPECT_DOUBLE_EQ(model.kv_bytes(1000, 2), 131072.0 * 1000);
  EXPECT_DOUBLE_EQ(model.kv_bytes(1, 1), 65536);  // fp8 cache halves it
}

TEST(ModelProfile, Llama31_8bWeightsFromShapeMatchTheModelCard) {
  const ModelProfile model = preset("llama-3.1-8b");
  EXPECT_NEAR(model.parameters, 8.03e9, 0.01e9);
  EXPECT_NEAR(model.weight_bytes(*parse_precision("bf16")) / 1e9, 16.06, 0.01);
  EXPECT_NEAR(model.weight_bytes(*parse_precision("fp8")) / 1e9, 8.03, 0.01);
  // A decode step skips the untied input embedding table: 128256 x 4096 x 2 bytes.
  EXPECT_NEAR((model.weight_bytes(*parse_precision("bf16")) -
               model.weight_bytes_read_per_step(*parse_precision("bf16"))) / 1e9,
              128256.0 * 4096 * 2 / 1e9, 1e-6);
}

TEST(ModelProfile, Gemma3SlidingWindowLayersCapTheirCache) {
  const ModelProfile model = preset("gemma3-270m");
  ASSERT_EQ(model.layers, 18);
  EXPECT_EQ(model.global_layers(), 3);  // every sixth layer
  EXPECT_EQ(model.windowed_layers(), 15);
  const double per_layer_token = 2.0 * 1 * 256 * 2;  // K,V x 1 KV head x 256 dims x f16
  EXPECT_DOUBLE_EQ(model.kv_bytes(100, 2), per_layer_token * 18 * 100);
  EXPECT_DOUBLE_EQ(model.kv_bytes(4096, 2),
                   per_layer_token * (3 * 4096 + 15 * model.sliding_window));
}

TEST(ModelProfile, Llama70bFp16NeedsMoreThanOneH100) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  Deployment deployment;
  deployment.device = catalog->find("h100-sxm");
  deployment.model = preset("llama-3.1-70b");
  deployment.precision = *parse_precision("bf16");
  const MemoryBreakdown one = memory_for(deployment, 1, 2048, 0.2);
  EXPECT_NEAR(one.weights_gb, 141.1, 0.5);
  EXPECT_FALSE(one.fits);
  deployment.devices = 4;
  const MemoryBreakdown four = memory_for(deployment, 1, 2048, 0.2);
  EXPECT_NEAR(four.weights_gb, 141.1 / 4, 0.2);
  EXPECT_TRUE(four.fits);
}

TEST(MemoryModel, MoreMemoryNeverUnfits) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  DeviceSpec device = *catalog->find("l4");
  Deployment deployment;
  deployment.device = &device;
  deployment.model = preset("qwen2.5-7b");
  deployment.precision = *parse_precision("bf16");
  bool fitted = false;
  int previous_sequences = 0;
  for (double memory_gb = 8; memory_gb <= 160; memory_gb += 4) {
    device.memory_gb = memory_gb;
    const MemoryBreakdown memory = memory_for(deployment, 4, 4096, 0.2);
    if (fitted) EXPECT_TRUE(memory.fits) << memory_gb;
    EXPECT_GE(memory.max_sequences, previous_sequences) << memory_gb;
    fitted = fitted || memory.fits;
    previous_sequences = memory.max_sequences;
  }
  EXPECT_TRUE(fitted);
}

TEST(MemoryModel, HeadroomIsKeptFree) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  Deployment deployment;
  deployment.device = catalog->find("a100-80gb");
  deployment.model = preset("llama-3.1-8b");
  deployment.precision = *parse_precision("bf16");
  const MemoryBreakdown loose = memory_for(deployment, 1, 2048, 0.0);
  const MemoryBreakdown strict = memory_for(deployment, 1, 2048, 0.3);
  EXPECT_DOUBLE_EQ(loose.usable_gb, 80);
  EXPECT_DOUBLE_EQ(strict.usable_gb, 56);
  EXPECT_GT(loose.max_sequences, strict.max_sequences);
  // 56 GB usable - 16.06 weights - ~1.2 activations/runtime, over 2048 x 128 KiB per sequence.
  EXPECT_NEAR(strict.max_sequences, (56 - 16.06 - 1.0 - strict.activations_gb) / 0.268435456,
              1.0);
}

TEST(Precision, NamesAndFallbacks) {
  EXPECT_EQ(parse_precision("FP16")->name, "f16");
  EXPECT_EQ(parse_precision("awq")->name, "int4");
  EXPECT_FALSE(parse_precision("fp3"));
  DeviceSpec a100;
  a100.fp16_tflops = 312;
  a100.bf16_tflops = 312;
  a100.int8_tops = 624;
  EXPECT_DOUBLE_EQ(parse_precision("fp8")->dense_tflops(a100), 312);  // no FP8 unit
  EXPECT_DOUBLE_EQ(parse_precision("int8")->dense_tflops(a100), 624);
}

TEST(Precision, KvCacheBytesPerElement) {
  EXPECT_EQ(kv_cache_bytes_per_element("f16"), 2.0);
  EXPECT_EQ(kv_cache_bytes_per_element("BF16"), 2.0);
  EXPECT_EQ(kv_cache_bytes_per_element("fp8"), 1.0);
  // llama.cpp's q8_0 cache: 32 int8 and an f16 scale per block (was counted as 1 byte).
  EXPECT_EQ(kv_cache_bytes_per_element("q8_0"), 34.0 / 32);
  EXPECT_EQ(kv_cache_bytes_per_element("q4_0"), 18.0 / 32);
  EXPECT_EQ(kv_cache_bytes_per_element("q5_1"), 24.0 / 32);
  EXPECT_FALSE(kv_cache_bytes_per_element("q2_k"));  // not a cache type llama.cpp offers
}

}  // namespace
}  // namespace brisk::plan

namespace brisk::plan {
namespace {

PlanRequest request_for(const std::string& id, int concurrency) {
  PlanRequest request;
  request.model = preset(id);
  request.precision = *parse_precision("bf16");
  request.workload.input_tokens = 512;
  request.workload.output_tokens = 256;
  request.workload.concurrency = concurrency;
  request.devices = {"l4", "h100-sxm"};
  return request;
}

TEST(MultiModelFit, PacksWholeModelsOntoTheFewestDevicesAndSumsTheirSteps) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  // Two 8B-class models in bf16 (~16 GB of weights each) and a small one.
  const std::vector<PlanRequest> requests = {request_for("llama-3.1-8b", 16),
                                             request_for("gemma3-270m", 16),
                                             request_for("qwen2.5-7b", 16)};
  const MultiModelFit fit = fit_models(requests, *catalog);
  ASSERT_EQ(fit.devices.size(), 2u);
  const ModelsOnDevice* l4 = nullptr;
  const ModelsOnDevice* h100 = nullptr;
  for (const ModelsOnDevice& device : fit.devices) {
    (device.device->id == "l4" ? l4 : h100) = &device;
  }
  ASSERT_TRUE(l4 && h100);
  // An L4 holds 19.2 GB usable: one 8B model each, the small one beside the smaller.
  EXPECT_EQ(l4->devices, 2);
  EXPECT_EQ(l4->placement.size(), 2u);
  // An H100 holds all three; while all are busy a token gap is the sum of their three steps.
  EXPECT_EQ(h100->devices, 1);
  EXPECT_NEAR(h100->shared_itl_ms, h100->step_ms[0] + h100->step_ms[1] + h100->step_ms[2], 1e-9);
  EXPECT_GT(h100->shared_itl_ms, h100->step_ms[0]);
  // Ranked by price: two L4s cost less than an H100.
  EXPECT_LT(l4->usd_per_hour, h100->usd_per_hour);
  ASSERT_TRUE(fit.recommended);
  EXPECT_EQ(fit.devices[*fit.recommended].device->id, "l4");
}

TEST(MultiModelFit, AModelNoGroupOfADeviceHoldsLeavesItOut) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  std::vector<PlanRequest> requests = {request_for("llama-3.1-8b", 1),
                                       request_for("gemma3-270m", 1)};
  for (PlanRequest& request : requests) request.devices = {"cpu-2vcpu"};
  const MultiModelFit fit = fit_models(requests, *catalog);
  ASSERT_EQ(fit.devices.size(), 1u);
  EXPECT_EQ(fit.devices[0].devices, 0);
  EXPECT_EQ(fit.devices[0].own_devices[0], 0);  // 16 GB of weights in an 8 GB machine
  EXPECT_FALSE(fit.recommended);
}

}  // namespace
}  // namespace brisk::plan
