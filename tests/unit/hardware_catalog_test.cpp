#include <gtest/gtest.h>

#include "plan/hardware_catalog.h"

namespace brisk::plan {
namespace {

TEST(HardwareCatalog, BuiltInCatalogLoadsAndEveryEntryHasSources) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  for (const char* id : {"t4", "l4", "a10", "l20", "l40s", "rtx-4090", "v100-32gb", "a100-40gb",
                         "a100-80gb", "h100-pcie", "h100-sxm", "h200", "b200"}) {
    EXPECT_NE(catalog->find(id), nullptr) << id;
  }
  int cpus = 0;
  for (const DeviceSpec& device : catalog->devices()) {
    EXPECT_FALSE(device.spec_source.empty()) << device.id;
    EXPECT_FALSE(device.price_source.empty()) << device.id;
    EXPECT_GT(device.memory_bandwidth_gb_s, 0) << device.id;
    cpus += device.kind == "cpu";
  }
  EXPECT_GE(cpus, 1);
}

TEST(HardwareCatalog, RatesAreDenseNotSparse) {
  std::string error;
  const auto catalog = HardwareCatalog::load("", &error);
  ASSERT_TRUE(catalog) << error;
  const DeviceSpec& h100 = *catalog->find("h100-sxm");
  EXPECT_NEAR(h100.bf16_tflops, 989, 1);  // 1,979 is the with-sparsity figure
  EXPECT_NEAR(h100.memory_bandwidth_gb_s, 3350, 1);
  EXPECT_NEAR(catalog->find("h200")->memory_bandwidth_gb_s, 4800, 1);
  EXPECT_NEAR(catalog->find("a100-80gb")->bf16_tflops, 312, 1);
}

TEST(HardwareCatalog, BadFilesNameTheProblem) {
  std::string error;
  EXPECT_FALSE(HardwareCatalog::parse("[[device]\nid=", "broken.toml", &error));
  EXPECT_NE(error.find("broken.toml"), std::string::npos) << error;

  const std::string entry =
      "[[device]]\nid='x'\nname='X'\nkind='gpu'\nmemory_gb=16.0\nmemory_bandwidth_gb_s=300.0\n"
      "fp16_tflops=65.0\nbf16_tflops=0.0\nfp8_tflops=0.0\nint8_tops=130.0\n"
      "interconnect='PCIe'\ninterconnect_gb_s=16.0\nmax_per_node=8\nusd_per_hour=0.5\n";
  EXPECT_FALSE(HardwareCatalog::parse(entry, "nosource.toml", &error));
  EXPECT_NE(error.find("spec_source"), std::string::npos) << error;

  const std::string sourced = entry + "spec_source='datasheet'\nprice_source='cloud'\n";
  EXPECT_TRUE(HardwareCatalog::parse(sourced, "ok.toml", &error)) << error;
  EXPECT_FALSE(HardwareCatalog::parse(sourced + sourced, "twice.toml", &error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
}

}  // namespace
}  // namespace brisk::plan
