#include "common/request_trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include <fmt/format.h>

namespace brisk {
namespace {

using json = nlohmann::json;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

// Reads `object[key]` as a non-negative integer that fits an int; `required` makes a missing key
// an error. Returns false with `error` set on a bad value.
bool read_count(const json& object, const char* key, bool required, std::optional<int>& out,
                std::string& error) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) error = fmt::format("no \"{}\"", key);
    return !required;
  }
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) ==
                                                                 it->get<double>())) {
    error = fmt::format("\"{}\" must be a whole number, got {}", key, it->dump());
    return false;
  }
  const double value = it->get<double>();
  if (value < 0 || value > kMaxTraceTokens) {
    error = fmt::format("\"{}\" must be between 0 and {}, got {}", key, kMaxTraceTokens,
                        it->dump());
    return false;
  }
  out = static_cast<int>(value);
  return true;
}

bool read_seconds(const json& object, const char* key, double scale, double& out,
                  std::string& error) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) {
    error = it == object.end() ? fmt::format("no \"{}\"", key)
                               : fmt::format("\"{}\" must be a number, got {}", key, it->dump());
    return false;
  }
  const double value = it->get<double>() * scale;
  if (!std::isfinite(value) || value < 0) {
    error = fmt::format("\"{}\" must be a finite number >= 0, got {}", key, it->dump());
    return false;
  }
  out = value;
  return true;
}

bool read_hash_ids(const json& object, std::vector<uint64_t>& out, std::string& error) {
  const auto it = object.find("hash_ids");
  if (it == object.end() || it->is_null()) return true;
  if (!it->is_array()) {
    error = "\"hash_ids\" must be an array of whole numbers";
    return false;
  }
  out.reserve(it->size());
  for (const json& value : *it) {
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
      error = fmt::format("\"hash_ids\" must hold whole numbers >= 0, got {}", value.dump());
      return false;
    }
    out.push_back(value.get<uint64_t>());
  }
  return true;
}

std::optional<std::string> read_string(const json& object, const char* key, std::string& error) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    error = fmt::format("\"{}\" must be a string, got {}", key, it->dump());
    return std::nullopt;
  }
  return it->get<std::string>();
}

bool parse_brisk_line(const json& line, TraceRecord& record, std::string& error) {
  std::optional<int> input, output, cached, max_tokens, priority, block;
  if (!read_seconds(line, "arrival_s", 1.0, record.arrival_s, error) ||
      !read_count(line, "input_tokens", true, input, error) ||
      !read_count(line, "output_tokens", true, output, error) ||
      !read_count(line, "cached_tokens", false, cached, error) ||
      !read_count(line, "max_tokens", false, max_tokens, error) ||
      !read_count(line, "block_tokens", false, block, error) ||
      !read_hash_ids(line, record.hash_ids, error)) {
    return false;
  }
  if (const auto it = line.find("priority"); it != line.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      error = fmt::format("\"priority\" must be an integer, got {}", it->dump());
      return false;
    }
    priority = it->get<int>();
  }
  for (const char* key : {"ttft_ms", "e2e_ms"}) {
    if (const auto it = line.find(key); it != line.end() && !it->is_null()) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
        error = fmt::format("\"{}\" must be a number >= 0, got {}", key, it->dump());
        return false;
      }
      (std::string_view(key) == "ttft_ms" ? record.ttft_ms : record.e2e_ms) = it->get<double>();
    }
  }
  auto endpoint = read_string(line, "endpoint", error);
  auto model = read_string(line, "model", error);
  auto finish = read_string(line, "finish_reason", error);
  auto session = read_string(line, "session", error);
  auto prompt = read_string(line, "prompt", error);
  if (!endpoint || !model || !finish || !session || !prompt) return false;
  if (!endpoint->empty() && *endpoint != "chat" && *endpoint != "completions") {
    error = fmt::format("\"endpoint\" must be \"chat\" or \"completions\", got \"{}\"", *endpoint);
    return false;
  }
  if (!record.hash_ids.empty() && (!block || *block == 0)) {
    error = "\"hash_ids\" needs \"block_tokens\" (the tokens each hash covers)";
    return false;
  }
  record.input_tokens = *input;
  record.output_tokens = *output;
  record.cached_tokens = cached.value_or(-1);
  record.max_tokens = max_tokens;
  record.priority = priority;
  record.block_tokens = block.value_or(0);
  record.endpoint = std::move(*endpoint);
  record.model = std::move(*model);
  record.finish_reason = std::move(*finish);
  record.session = std::move(*session);
  record.prompt = std::move(*prompt);
  return true;
}

bool parse_mooncake_line(const json& line, TraceRecord& record, std::string& error) {
  std::optional<int> input, output;
  // Mooncake's timestamps are milliseconds.
  if (!read_seconds(line, "timestamp", 1e-3, record.arrival_s, error) ||
      !read_count(line, "input_length", true, input, error) ||
      !read_count(line, "output_length", true, output, error) ||
      !read_hash_ids(line, record.hash_ids, error)) {
    return false;
  }
  record.input_tokens = *input;
  record.output_tokens = *output;
  record.block_tokens = record.hash_ids.empty() ? 0 : kMooncakeBlockTokens;
  return true;
}

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {  // proleptic Gregorian, 1970-01-01 = 0
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// "2023-11-16 18:15:46.6805900" (the Azure traces' TIMESTAMP) in seconds since 1970; a plain
// number is taken as seconds.
std::optional<double> parse_azure_time(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0;
  double second = 0;
  char sep = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%d%c%d:%d:%lf", &year, &month, &day, &sep, &hour, &minute,
                  &second) == 7 &&
      (sep == ' ' || sep == 'T') && month >= 1 && month <= 12 && day >= 1 && day <= 31 &&
      hour >= 0 && hour < 24 && minute >= 0 && minute < 60 && second >= 0 && second < 61) {
    return static_cast<double>(days_from_civil(year, month, day)) * 86400 + hour * 3600 +
           minute * 60 + second;
  }
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0' && std::isfinite(seconds) && seconds >= 0) {
    return seconds;
  }
  return std::nullopt;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  std::string field;
  while (std::getline(stream, field, ',')) fields.push_back(trim(field));
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

std::optional<Trace> parse_azure(const std::vector<std::string>& lines, const std::string& source,
                                 std::string& error) {
  Trace trace{TraceFormat::azure, {}};
  int time_column = -1, context_column = -1, generated_column = -1;
  size_t header_line = 0;
  while (header_line < lines.size() && trim(lines[header_line]).empty()) ++header_line;
  if (header_line == lines.size()) {
    error = source + ": empty file";
    return std::nullopt;
  }
  const std::vector<std::string> header = split_csv(trim(lines[header_line]));
  for (int i = 0; i < static_cast<int>(header.size()); ++i) {
    std::string name = header[i];
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name == "timestamp") time_column = i;
    if (name == "contexttokens") context_column = i;
    if (name == "generatedtokens") generated_column = i;
  }
  if (time_column < 0 || context_column < 0 || generated_column < 0) {
    error = fmt::format(
        "{}:{}: an Azure trace's header names TIMESTAMP, ContextTokens and GeneratedTokens; got "
        "'{}'",
        source, header_line + 1, trim(lines[header_line]));
    return std::nullopt;
  }
  const int columns = std::max({time_column, context_column, generated_column}) + 1;
  for (size_t i = header_line + 1; i < lines.size(); ++i) {
    const std::string line = trim(lines[i]);
    if (line.empty()) continue;
    const std::vector<std::string> fields = split_csv(line);
    if (static_cast<int>(fields.size()) < columns) {
      error = fmt::format("{}:{}: {} fields, the header has {}", source, i + 1, fields.size(),
                          header.size());
      return std::nullopt;
    }
    TraceRecord record;
    const auto when = parse_azure_time(fields[time_column]);
    if (!when) {
      error = fmt::format("{}:{}: TIMESTAMP '{}' is neither 'YYYY-MM-DD HH:MM:SS.fff' nor seconds",
                          source, i + 1, fields[time_column]);
      return std::nullopt;
    }
    record.arrival_s = *when;
    for (auto [column, name, out] : {std::tuple{context_column, "ContextTokens", &record.input_tokens},
                                     std::tuple{generated_column, "GeneratedTokens",
                                                &record.output_tokens}}) {
      const std::string& text = fields[column];
      char* end = nullptr;
      const long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 0 || value > kMaxTraceTokens) {
        error = fmt::format("{}:{}: {} must be a whole number from 0 to {}, got '{}'", source,
                            i + 1, name, kMaxTraceTokens, text);
        return std::nullopt;
      }
      *out = static_cast<int>(value);
    }
    trace.records.push_back(std::move(record));
  }
  return trace;
}

void sort_and_rebase(Trace& trace) {
  std::stable_sort(trace.records.begin(), trace.records.end(),
                   [](const TraceRecord& a, const TraceRecord& b) {
                     return a.arrival_s < b.arrival_s;
                   });
  if (trace.records.empty()) return;
  const double first = trace.records.front().arrival_s;
  for (TraceRecord& record : trace.records) record.arrival_s -= first;
}

}  // namespace

std::optional<TraceFormat> parse_trace_format(const std::string& name) {
  if (name == "auto") return TraceFormat::automatic;
  if (name == "brisk") return TraceFormat::brisk;
  if (name == "mooncake") return TraceFormat::mooncake;
  if (name == "azure") return TraceFormat::azure;
  return std::nullopt;
}

const char* trace_format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::automatic: return "auto";
    case TraceFormat::brisk: return "brisk";
    case TraceFormat::mooncake: return "mooncake";
    case TraceFormat::azure: return "azure";
  }
  return "?";
}

std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> tokens, int block_tokens) {
  std::vector<uint64_t> hashes;
  if (block_tokens <= 0) return hashes;
  hashes.reserve((tokens.size() + block_tokens - 1) / block_tokens);
  uint64_t chain = 0x6272697368747261ULL;  // any fixed start
  for (size_t start = 0; start < tokens.size(); start += block_tokens) {
    const size_t end = std::min(tokens.size(), start + static_cast<size_t>(block_tokens));
    uint64_t h = mix64(chain ^ (end - start));
    for (size_t i = start; i < end; ++i) {
      h = mix64(h ^ static_cast<uint32_t>(tokens[i]) ^ (static_cast<uint64_t>(i - start) << 32));
    }
    chain = h;
    hashes.push_back(h & kTraceHashMask);
  }
  return hashes;
}

namespace {

// `value` to 1/scale, unless it is too large for that to matter (or to stay finite).
double rounded(double value, double scale) {
  return std::fabs(value) < 1e12 ? std::round(value * scale) / scale : value;
}

}  // namespace

std::string trace_line(const TraceRecord& record) {
  json line = {{"arrival_s", rounded(record.arrival_s, 1e6)},
               {"endpoint", record.endpoint},
               {"model", record.model},
               {"input_tokens", record.input_tokens},
               {"cached_tokens", record.cached_tokens >= 0 ? json(record.cached_tokens) : json()},
               {"output_tokens", record.output_tokens},
               {"max_tokens", record.max_tokens ? json(*record.max_tokens) : json()},
               {"finish_reason", record.finish_reason},
               {"priority", record.priority ? json(*record.priority) : json()},
               {"session", record.session.empty() ? json() : json(record.session)},
               {"ttft_ms", record.ttft_ms ? json(rounded(*record.ttft_ms, 1e3)) : json()},
               {"e2e_ms", record.e2e_ms ? json(rounded(*record.e2e_ms, 1e3)) : json()},
               {"block_tokens", record.block_tokens},
               {"hash_ids", record.hash_ids}};
  if (!record.prompt.empty()) line["prompt"] = record.prompt;
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<Trace> parse_trace(const std::string& text, TraceFormat format,
                                 const std::string& source, std::string& error) {
  std::vector<std::string> lines;
  {
    std::stringstream stream(text);
    std::string line;
    while (std::getline(stream, line)) lines.push_back(std::move(line));
  }
  if (format == TraceFormat::automatic) {
    const auto first = std::find_if(lines.begin(), lines.end(),
                                    [](const std::string& l) { return !trim(l).empty(); });
    if (first == lines.end()) {
      error = source + ": empty trace";
      return std::nullopt;
    }
    const std::string head = trim(*first);
    if (head.front() != '{') {
      format = TraceFormat::azure;
    } else {
      const json probe = json::parse(head, nullptr, false);
      if (probe.is_object() && probe.contains("timestamp") && probe.contains("input_length")) {
        format = TraceFormat::mooncake;
      } else if (probe.is_object() && probe.contains("arrival_s")) {
        format = TraceFormat::brisk;
      } else {
        error = fmt::format(
            "{}:{}: not a trace line of a known format (brisk's has \"arrival_s\", Mooncake's "
            "\"timestamp\" and \"input_length\"); name it with --trace-format",
            source, first - lines.begin() + 1);
        return std::nullopt;
      }
    }
  }
  std::optional<Trace> trace;
  if (format == TraceFormat::azure) {
    trace = parse_azure(lines, source, error);
    if (!trace) return std::nullopt;
  } else {
    trace = Trace{format, {}};
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string line = trim(lines[i]);
      if (line.empty()) continue;
      const json parsed = json::parse(line, nullptr, false);
      if (!parsed.is_object()) {
        error = fmt::format("{}:{}: not a JSON object", source, i + 1);
        return std::nullopt;
      }
      TraceRecord record;
      std::string why;
      const bool ok = format == TraceFormat::brisk ? parse_brisk_line(parsed, record, why)
                                                   : parse_mooncake_line(parsed, record, why);
      if (!ok) {
        error = fmt::format("{}:{}: {}", source, i + 1, why);
        return std::nullopt;
      }
      trace->records.push_back(std::move(record));
    }
  }
  if (trace->records.empty()) {
    error = source + ": the trace holds no request";
    return std::nullopt;
  }
  sort_and_rebase(*trace);
  return trace;
}

std::optional<Trace> read_trace_file(const std::string& path, TraceFormat format,
                                     std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read " + path;
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_trace(buffer.str(), format, path, error);
}

std::optional<double> prefix_sharing_ratio(const std::vector<TraceRecord>& records) {
  std::unordered_set<uint64_t> seen;
  double shared_tokens = 0, prompt_tokens = 0;
  bool hashed = false;
  for (const TraceRecord& record : records) {
    prompt_tokens += record.input_tokens;
    if (record.hash_ids.empty() || record.block_tokens <= 0) continue;
    hashed = true;
    // A prefix cache serves the leading blocks an earlier request had, up to the first it did
    // not: a later block seen elsewhere follows a different prefix.
    for (size_t block = 0; block < record.hash_ids.size(); ++block) {
      if (!seen.count(record.hash_ids[block])) break;
      const double first_token = static_cast<double>(block) * record.block_tokens;
      shared_tokens += std::clamp(record.input_tokens - first_token, 0.0,
                                  static_cast<double>(record.block_tokens));
    }
    // Only after the record: a prompt is shared with earlier requests, not with itself.
    seen.insert(record.hash_ids.begin(), record.hash_ids.end());
  }
  if (!hashed || prompt_tokens <= 0) return std::nullopt;
  return shared_tokens / prompt_tokens;
}

}  // namespace brisk
