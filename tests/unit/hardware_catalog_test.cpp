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

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

// Caught by tests/fuzz/hardware_catalog_fuzzer: max_per_node = 1e300 was converted to int
// (undefined behaviour), and nan or inf anywhere was taken and made every prediction nan.
TEST(HardwareCatalog, NumbersMustBeFiniteAndTheDeviceCountAnInteger) {
  const std::string entry =
      "[[device]]\nid='x'\nname='X'\nkind='gpu'\nmemory_gb=16.0\nmemory_bandwidth_gb_s=300.0\n"
      "fp16_tflops=65.0\nbf16_tflops=0.0\nfp8_tflops=0.0\nint8_tops=130.0\n"
      "interconnect='PCIe'\ninterconnect_gb_s=16.0\nmax_per_node=8\nusd_per_hour=0.5\n"
      "spec_source='datasheet'\nprice_source='cloud'\n";
  std::string error;
  ASSERT_TRUE(HardwareCatalog::parse(entry, "ok.toml", &error)) << error;
  for (const char* count : {"1e300", "2.5", "0", "-1", "100000", "'8'"}) {
    EXPECT_FALSE(HardwareCatalog::parse(
        replaced(entry, "max_per_node=8", std::string("max_per_node=") + count), "count.toml",
        &error))
        << count;
    EXPECT_NE(error.find("'max_per_node' must be an integer from 1 to 1024"), std::string::npos)
        << error;
  }
  for (const char* value : {"nan", "inf", "-inf", "+nan"}) {
    EXPECT_FALSE(HardwareCatalog::parse(
        replaced(entry, "memory_gb=16.0", std::string("memory_gb=") + value), "nan.toml", &error))
        << value;
    EXPECT_NE(error.find("'memory_gb' must be a finite number"), std::string::npos) << error;
  }
  EXPECT_FALSE(HardwareCatalog::parse(replaced(entry, "usd_per_hour=0.5", "usd_per_hour=inf"),
                                      "inf.toml", &error));
  EXPECT_NE(error.find("'usd_per_hour' must be a finite number"), std::string::npos) << error;
}

// Caught by tests/fuzz/hardware_catalog_fuzzer: `device = [1]` is an array but holds no table;
// it was skipped and an empty catalog accepted.
TEST(HardwareCatalog, ADeviceThatIsNoTableIsNamed) {
  std::string error;
  EXPECT_FALSE(HardwareCatalog::parse("device = [1, 2]\n", "array.toml", &error));
  EXPECT_EQ(error,
            "array.toml device #1: is not a table; write each device as a [[device]] section");
}

// toml++ 3.3 reaches __builtin_unreachable when a non-ASCII code point stands where whitespace
// may be (marzer/tomlplusplus#295, tests/fuzz/ubsan_ignorelist.txt); its gcc build reports a
// parse error, which is what a user must keep getting.
TEST(HardwareCatalog, NonAsciiOutsideAStringIsAParseErrorWithItsLine) {
  std::string error;
  EXPECT_FALSE(HardwareCatalog::parse("# ok\na\u00e9 = 1\n", "accent.toml", &error));
  EXPECT_NE(error.find("accent.toml: "), std::string::npos) << error;
  EXPECT_NE(error.find("(line 2)"), std::string::npos) << error;
}

}  // namespace
}  // namespace brisk::plan
