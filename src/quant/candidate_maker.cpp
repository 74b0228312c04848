#include "quant/candidate_maker.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/subprocess.h"
#include "engine/gguf_metadata.h"

namespace brisk::quant {
namespace {

namespace fs = std::filesystem;

// llama.cpp's llama_ftype values (include/llama.h) for the types people ship.
const std::map<int, std::string>& file_type_names() {
  static const std::map<int, std::string> names = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},   {32, "BF16"}};
  return names;
}

// What llama-quantize accepts that needs no importance matrix.
const std::vector<std::string>& makeable_types() {
  static const std::vector<std::string> types = {
      "F16",    "BF16",   "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1",   "Q5_0",
      "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K"};
  return types;
}

std::string uppercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Identifies the reference a made file came from, without hashing hundreds of megabytes.
std::string source_stamp(const std::string& reference) {
  std::error_code ignored;
  const auto size = fs::file_size(reference, ignored);
  const auto modified = fs::last_write_time(reference, ignored).time_since_epoch().count();
  return fs::absolute(reference).string() + "\n" + std::to_string(size) + "\n" +
         std::to_string(modified) + "\n";
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

std::optional<FileType> read_file_type(const std::string& gguf_path, std::string* error) {
  const auto metadata = read_gguf_metadata(gguf_path, error);
  if (!metadata) return std::nullopt;
  FileType type;
  if (const auto number = metadata->number("general.file_type")) {
    const int code = static_cast<int>(*number);
    const auto found = file_type_names().find(code);
    type.name = found != file_type_names().end() ? found->second : "type " + std::to_string(code);
    type.quantized = code != 0 && code != 1 && code != 32;
    return type;
  }
  // No file type recorded: judge by the tensors themselves.
  type.name = "unknown";
  for (const auto& [tensor_type, bytes] : metadata->bytes_by_type) {
    const std::string lower = lowercase(tensor_type);
    if (lower != "f32" && lower != "f16" && lower != "bf16") type.quantized = true;
  }
  return type;
}

std::optional<std::vector<std::string>> parse_make_types(const std::string& text,
                                                         std::string* error) {
  std::vector<std::string> types;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    part.erase(std::remove_if(part.begin(), part.end(), ::isspace), part.end());
    if (part.empty()) continue;
    const std::string type = uppercase(part);
    const auto& known = makeable_types();
    if (std::find(known.begin(), known.end(), type) == known.end()) {
      std::string names;
      for (const std::string& name : known)
        names.append(names.empty() ? "" : ",").append(lowercase(name));
      *error = "--make: '" + part + "' is not a type brisk quant can make (one of " + names + ")";
      return std::nullopt;
    }
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  }
  if (types.empty()) {
    *error = "--make is empty; give types such as q8_0,q4_k_m,q2_k";
    return std::nullopt;
  }
  return types;
}

std::string llama_tool_path(const std::string& tool) {
  if (const char* dir = std::getenv("BRISK_LLAMA_BIN_DIR"); dir != nullptr && *dir != '\0') {
    return (fs::path(dir) / tool).string();
  }
  std::error_code ignored;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ignored).parent_path() / tool;
  if (!ignored && fs::exists(beside)) return beside.string();
  return tool;
}

std::optional<std::vector<MadeCandidate>> make_candidates(
    const std::string& reference, const std::vector<std::string>& types, const fs::path& work_dir,
    bool allow_requantize, std::ostream& progress, std::string* error) {
  std::error_code failure;
  fs::create_directories(work_dir, failure);
  if (failure) {
    *error = "cannot create the work directory '" + work_dir.string() + "' (" + failure.message() +
             "); choose another with --work-dir";
    return std::nullopt;
  }
  const std::string stamp = source_stamp(reference);
  const std::string stem = fs::path(reference).stem().string();
  std::vector<MadeCandidate> made;
  for (const std::string& type : types) {
    MadeCandidate candidate{type, work_dir / (stem + "." + lowercase(type) + ".gguf"), false};
    const fs::path stamp_path = candidate.path.string() + ".source";
    if (fs::exists(candidate.path) && read_text(stamp_path) == stamp) {
      candidate.reused = true;
      progress << "reusing " << candidate.path.string() << " (made from this reference before)\n";
      made.push_back(candidate);
      continue;
    }
    const fs::path partial = candidate.path.string() + ".partial";
    const fs::path log_path = candidate.path.string() + ".log";
    std::vector<std::string> argv = {llama_tool_path("llama-quantize")};
    if (allow_requantize) argv.push_back("--allow-requantize");
    argv.insert(argv.end(), {reference, partial.string(), type});
    progress << "making " << type << ": " << describe_command(argv) << "\n" << std::flush;
    const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int status = run_process(argv, log_fd, log_fd);
    if (log_fd >= 0) ::close(log_fd);
    if (status != 0 || !fs::exists(partial)) {
      fs::remove(partial, failure);
      *error = "llama-quantize could not make " + type + " (exit status " + std::to_string(status) +
               (status == 127 ? ": is llama-quantize built?" : "") +
               "); its log: " + log_path.string();
      return std::nullopt;
    }
    fs::rename(partial, candidate.path, failure);
    if (failure) {
      *error = "cannot move " + partial.string() + " into place: " + failure.message();
      return std::nullopt;
    }
    std::ofstream(stamp_path) << stamp;
    made.push_back(candidate);
  }
  return made;
}

}  // namespace brisk::quant
