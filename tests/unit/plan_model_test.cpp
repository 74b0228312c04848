// Memory arithmetic of brisk plan, checked against hand-computed cases.
#include <gtest/gtest.h>

#include "plan/capacity_planner.h"
#include "plan/memory_model.h"
#include "plan/model_profile.h"

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
