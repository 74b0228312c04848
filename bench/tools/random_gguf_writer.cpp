#include "random_gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "ggml.h"

namespace random_gguf {
namespace {

using Clock = std::chrono::steady_clock;

// Rows are generated and encoded in tasks of about this many values (4 MB of floats per thread).
constexpr int64_t kValuesPerTask = int64_t{1} << 20;
constexpr double kProgressInterval_s = 2.0;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Each row has its own seed, so the values do not depend on how rows are split among threads.
uint64_t row_seed(uint64_t seed, uint64_t tensor_index, uint64_t row) {
  uint64_t state = seed ^ (tensor_index * 0xD1B54A32D192ED03ULL);
  state = splitmix64(state) ^ row;
  return splitmix64(state);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double to_gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

struct FileCloser {
  void operator()(FILE* file) const { std::fclose(file); }
};
using FileHandle = std::unique_ptr<FILE, FileCloser>;

struct GgmlContextFree {
  void operator()(ggml_context* context) const { ggml_free(context); }
};

// Prints a line at most every kProgressInterval_s, also while one large tensor is being written.
class ProgressReporter {
 public:
  explicit ProgressReporter(uint64_t file_bytes) : file_bytes_(file_bytes) {}

  void report(const PlannedTensor& tensor, uint64_t written_bytes, bool force) {
    const double elapsed_s = seconds_since(start_);
    if (!force && elapsed_s - last_report_s_ < kProgressInterval_s) return;
    last_report_s_ = elapsed_s;
    std::printf("  %-28s %5s  %7.2f / %.2f GB  %3.0f%%  %6.1f s\n", tensor.name.c_str(),
                ggml_type_name(tensor.type), to_gb(written_bytes), to_gb(file_bytes_),
                100.0 * static_cast<double>(written_bytes) / static_cast<double>(file_bytes_),
                elapsed_s);
    std::fflush(stdout);
  }

 private:
  uint64_t file_bytes_;
  Clock::time_point start_ = Clock::now();
  double last_report_s_ = 0.0;
};

class TensorDataStreamer {
 public:
  TensorDataStreamer(FILE* file, const std::filesystem::path& out_path, const WriteOptions& options,
                     const LlamaShape& shape, ProgressReporter& progress)
      : file_(file), out_path_(out_path), options_(options), shape_(shape), progress_(progress) {}

  void write_tensor(const PlannedTensor& tensor, uint64_t tensor_index) {
    if (tensor.fill == TensorFill::kRandomNormal) {
      write_random_rows(tensor, tensor_index);
    } else {
      write_constant_vector(tensor);
    }
  }

  void write_bytes(const void* data, size_t byte_count) {
    if (byte_count == 0) return;
    if (std::fwrite(data, 1, byte_count, file_) != byte_count) {
      throw std::runtime_error("writing " + out_path_.string() + " failed: " +
                               std::strerror(errno) + "; free disk space or choose another --out");
    }
  }

 private:
  void write_constant_vector(const PlannedTensor& tensor) {
    std::vector<float> values;
    if (tensor.fill == TensorFill::kOnes) values.assign(tensor.ne[0], 1.0f);
    if (tensor.fill == TensorFill::kRopeFreqFactors) values = llama3_rope_freq_factors(shape_);
    write_bytes(values.data(), values.size() * sizeof(float));
  }

  void write_random_rows(const PlannedTensor& tensor, uint64_t tensor_index) {
    const int64_t row_length = tensor.ne[0];
    const int64_t rows = tensor.ne[1];
    const size_t row_bytes = ggml_row_size(tensor.type, row_length);
    const int64_t rows_per_task = std::max<int64_t>(1, kValuesPerTask / row_length);
    const int64_t rows_per_batch = rows_per_task * options_.threads;
    encoded_.resize(rows_per_batch * row_bytes);
    for (int64_t batch_start = 0; batch_start < rows; batch_start += rows_per_batch) {
      const int64_t batch_rows = std::min(rows_per_batch, rows - batch_start);
      std::vector<std::jthread> workers;
      for (int64_t task_start = 0; task_start < batch_rows; task_start += rows_per_task) {
        const int64_t task_rows = std::min(rows_per_task, batch_rows - task_start);
        uint8_t* task_output = encoded_.data() + task_start * row_bytes;
        workers.emplace_back([=, this] {
          encode_random_rows(tensor, tensor_index, batch_start + task_start, task_rows,
                             task_output);
        });
      }
      workers.clear();  // joins
      write_bytes(encoded_.data(), batch_rows * row_bytes);
      progress_.report(tensor, static_cast<uint64_t>(std::ftell(file_)), /*force=*/false);
    }
  }

  void encode_random_rows(const PlannedTensor& tensor, uint64_t tensor_index, int64_t first_row,
                          int64_t row_count, uint8_t* output) const {
    const int64_t row_length = tensor.ne[0];
    std::vector<float> values(row_count * row_length);
    for (int64_t row = 0; row < row_count; ++row) {
      fill_random_normal(values.data() + row * row_length, row_length,
                         row_seed(options_.seed, tensor_index, first_row + row),
                         options_.weight_stddev);
    }
    ggml_quantize_chunk(tensor.type, values.data(), output, 0, row_count, row_length, nullptr);
  }

  FILE* file_;
  const std::filesystem::path& out_path_;
  const WriteOptions& options_;
  const LlamaShape& shape_;
  ProgressReporter& progress_;
  std::vector<uint8_t> encoded_;
};

std::unique_ptr<ggml_context, GgmlContextFree> add_tensor_infos(
    gguf_context* metadata, const std::vector<PlannedTensor>& tensors) {
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (tensors.size() + 1);
  params.no_alloc = true;  // tensor descriptions only; the data is streamed
  std::unique_ptr<ggml_context, GgmlContextFree> context(ggml_init(params));
  for (const PlannedTensor& tensor : tensors) {
    if (ggml_quantize_requires_imatrix(tensor.type)) {
      throw std::invalid_argument(std::string("type ") + ggml_type_name(tensor.type) +
                                  " needs an importance matrix; choose another --type");
    }
    ggml_tensor* description = ggml_new_tensor(
        context.get(), tensor.type, static_cast<int>(tensor.ne.size()), tensor.ne.data());
    ggml_set_name(description, tensor.name.c_str());
    gguf_add_tensor(metadata, description);
  }
  return context;
}

uint64_t planned_file_bytes(const gguf_context* metadata) {
  uint64_t bytes = gguf_get_meta_size(metadata);
  const size_t alignment = gguf_get_alignment(metadata);
  for (int64_t i = 0; i < gguf_get_n_tensors(metadata); ++i) {
    bytes += GGML_PAD(gguf_get_tensor_size(metadata, i), alignment);
  }
  return bytes;
}

void require_free_space(const std::filesystem::path& out_path, uint64_t file_bytes) {
  std::error_code error;
  const auto directory = std::filesystem::absolute(out_path).parent_path();
  const auto space = std::filesystem::space(directory, error);
  if (!error && space.available < file_bytes) {
    char message[256];
    std::snprintf(message, sizeof message,
                  "the file needs %.2f GB but %s has %.2f GB free; free space or choose another "
                  "--out",
                  to_gb(file_bytes), directory.c_str(), to_gb(space.available));
    throw std::runtime_error(message);
  }
}

void write_all(gguf_context* metadata, const std::vector<PlannedTensor>& tensors,
               const LlamaShape& shape, const std::filesystem::path& out_path,
               const WriteOptions& options, uint64_t file_bytes, FILE* file) {
  if (!gguf_write_to_file_ptr(metadata, file, /*only_meta=*/true)) {
    throw std::runtime_error("writing the GGUF header to " + out_path.string() +
                             " failed; check free disk space");
  }
  ProgressReporter progress(file_bytes);
  TensorDataStreamer streamer(file, out_path, options, shape, progress);
  const size_t alignment = gguf_get_alignment(metadata);
  const std::vector<uint8_t> zeros(alignment, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    streamer.write_tensor(tensors[i], i);
    const size_t tensor_bytes = gguf_get_tensor_size(metadata, static_cast<int64_t>(i));
    streamer.write_bytes(zeros.data(), GGML_PAD(tensor_bytes, alignment) - tensor_bytes);
  }
  progress.report(tensors.back(), static_cast<uint64_t>(std::ftell(file)), /*force=*/true);
  if (std::fflush(file) != 0) {
    throw std::runtime_error("writing " + out_path.string() + " failed: " + std::strerror(errno) +
                             "; free disk space or choose another --out");
  }
  const uint64_t written_bytes = static_cast<uint64_t>(std::ftell(file));
  if (written_bytes != file_bytes) {
    throw std::logic_error("wrote " + std::to_string(written_bytes) + " bytes but the header " +
                           "describes " + std::to_string(file_bytes));
  }
}

}  // namespace

void fill_random_normal(float* values, int64_t count, uint64_t seed, float stddev) {
  // The sum of four uniform bytes has mean 510 and standard deviation sqrt(4 * (256^2 - 1) / 12).
  constexpr float kSumMean = 510.0f;
  constexpr float kSumStddev = 147.8006f;
  const float scale = stddev / kSumStddev;
  uint64_t state = seed;
  for (int64_t i = 0; i < count; i += 2) {
    const uint64_t bits = splitmix64(state);
    const auto byte_sum = [](uint32_t word) {
      return static_cast<float>((word & 0xFF) + ((word >> 8) & 0xFF) + ((word >> 16) & 0xFF) +
                                (word >> 24));
    };
    values[i] = (byte_sum(static_cast<uint32_t>(bits)) - kSumMean) * scale;
    if (i + 1 < count)
      values[i + 1] = (byte_sum(static_cast<uint32_t>(bits >> 32)) - kSumMean) * scale;
  }
}

WriteResult write_random_gguf(gguf_context* metadata, const std::vector<PlannedTensor>& tensors,
                              const LlamaShape& shape, const std::filesystem::path& out_path,
                              const WriteOptions& options) {
  const auto tensor_descriptions = add_tensor_infos(metadata, tensors);
  const uint64_t file_bytes = planned_file_bytes(metadata);
  require_free_space(out_path, file_bytes);

  FileHandle file(std::fopen(out_path.c_str(), "wb"));
  if (!file) {
    throw std::runtime_error("cannot open --out " + out_path.string() +
                             " for writing: " + std::strerror(errno) + "; choose a writable path");
  }
  const auto start = Clock::now();
  try {
    write_all(metadata, tensors, shape, out_path, options, file_bytes, file.get());
    file.reset();
  } catch (...) {
    file.reset();
    std::error_code ignored;
    std::filesystem::remove(out_path, ignored);
    throw;
  }
  return {file_bytes, seconds_since(start)};
}

}  // namespace random_gguf
