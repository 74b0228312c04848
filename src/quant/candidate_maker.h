#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace brisk::quant {

// What a GGUF's general.file_type says: "F16", "Q4_K_M", ... and whether it is quantized.
struct FileType {
  std::string name;
  bool quantized = false;
};
std::optional<FileType> read_file_type(const std::string& gguf_path, std::string* error);

// "q8_0,q4_k_m" -> {"Q8_0", "Q4_K_M"}; nullopt with `error` for a type llama-quantize lacks.
std::optional<std::vector<std::string>> parse_make_types(const std::string& text,
                                                         std::string* error);

struct MadeCandidate {
  std::string type;  // e.g. "Q8_0"
  std::filesystem::path path;
  bool reused = false;  // an earlier run's file, made from the same reference
};

// Makes each type from `reference` with llama-quantize (the one built beside brisk, else from
// PATH) into `work_dir`, reusing a file an earlier run made from the same reference (same path,
// size and modification time, recorded in FILE.source). `allow_requantize` is passed on and is
// required when the reference is itself quantized. llama-quantize's output goes to FILE.log.
std::optional<std::vector<MadeCandidate>> make_candidates(const std::string& reference,
                                                          const std::vector<std::string>& types,
                                                          const std::filesystem::path& work_dir,
                                                          bool allow_requantize,
                                                          std::ostream& progress,
                                                          std::string* error);

// Where a llama.cpp tool is: BRISK_LLAMA_BIN_DIR, else beside this executable, else the bare
// name (looked up on PATH).
std::string llama_tool_path(const std::string& tool);

}  // namespace brisk::quant
