#include "quant/endpoint_speed.h"

#include <algorithm>

#include "bench/dataset_workload.h"
#include "bench/load_runner.h"
#include "common/clock.h"
#include "quant/sequential_speed.h"

namespace brisk::quant {
namespace {

bench::DatasetEntry entry_of(const DatasetItem& item, int default_max_tokens) {
  bench::DatasetEntry entry;
  entry.prompt = item.prompt;
  if (item.is_chat()) {
    entry.messages = nlohmann::json::array();
    for (const ChatMessage& message : item.messages) {
      entry.messages.push_back({{"role", message.role}, {"content", message.content}});
    }
  }
  entry.output_tokens = item.max_tokens > 0 ? item.max_tokens : default_max_tokens;
  return entry;
}

size_t prompt_chars(const DatasetItem& item) {
  size_t chars = item.prompt.size();
  for (const ChatMessage& message : item.messages) chars += message.content.size();
  return chars;
}

// Tokens the server generated: its usage count, else one per content chunk.
int generated_tokens(const bench::RequestRecord& record) {
  return record.completion_tokens >= 0 ? record.completion_tokens
                                       : static_cast<int>(record.content_chunks.size());
}

// The measured (non-warmup) requests of one closed-loop run of `entries`, all of one route:
// brisk bench reads a chat answer and a text completion differently.
std::vector<bench::RequestRecord> run_entries(const QuantEndpoint& endpoint,
                                              std::vector<bench::DatasetEntry> entries,
                                              bench::ApiKind kind, int concurrency, int requests,
                                              int warmup, std::chrono::milliseconds timeout) {
  bench::SamplingOptions greedy;
  greedy.temperature = 0;
  const bench::DatasetWorkload workload(std::move(entries), kind, endpoint.model, endpoint.target,
                                        bench::LengthDistribution::fixed_at(16), std::nullopt, 0,
                                        /*stream=*/true, greedy);
  bench::RunOptions options;
  options.load.concurrency = concurrency;
  options.num_requests = requests;
  options.warmup_requests = warmup;
  options.timeout = timeout;
  bench::RunResult result = bench::run_closed_loop(endpoint.target, workload, options);
  std::vector<bench::RequestRecord> measured;
  for (bench::RequestRecord& record : result.records) {
    if (!record.warmup) measured.push_back(std::move(record));
  }
  return measured;
}

void add_sequential_figures(const std::vector<bench::RequestRecord>& records, SpeedFigures* speed) {
  SequentialSpeed sequential;
  for (const bench::RequestRecord& record : records) {
    if (!record.ok() || !record.has_first_content()) {
      sequential.add_failure();
      continue;
    }
    sequential.add(ms_between(record.sent, record.first_content()),
                   ms_between(record.sent, record.end), generated_tokens(record));
  }
  sequential.write_to(speed);
}

double concurrent_decode_tokens_per_s(const std::vector<bench::RequestRecord>& records) {
  TimePoint first_token = TimePoint::max();
  TimePoint last_end{};
  int decode_tokens = 0;
  for (const bench::RequestRecord& record : records) {
    if (!record.ok() || !record.has_first_content()) continue;
    first_token = std::min(first_token, record.first_content());
    last_end = std::max(last_end, record.end);
    decode_tokens += std::max(0, generated_tokens(record) - 1);
  }
  const double span_ms = decode_tokens > 0 ? ms_between(first_token, last_end) : 0;
  return span_ms > 0 ? decode_tokens / (span_ms / 1000.0) : 0;
}

}  // namespace

SpeedFigures measure_endpoint_speed(const QuantEndpoint& endpoint,
                                    const std::vector<DatasetItem>& items, int default_max_tokens,
                                    int concurrency, int concurrent_tokens,
                                    std::chrono::milliseconds timeout) {
  SpeedFigures speed;
  speed.concurrency = concurrency;
  std::vector<bench::RequestRecord> sequential;
  int warmup = 1;  // one for the whole endpoint: it only has to wake the server up
  for (const bool chat : {false, true}) {
    std::vector<bench::DatasetEntry> entries;
    for (const DatasetItem& item : items) {
      if (item.is_chat() == chat) entries.push_back(entry_of(item, default_max_tokens));
    }
    if (entries.empty()) continue;
    const int count = static_cast<int>(entries.size());
    // The warmup takes entry 0, so the measured requests start at entry 1 and wrap around to
    // entry 0 last: each entry is measured once.
    auto records = run_entries(endpoint, std::move(entries),
                               chat ? bench::ApiKind::chat : bench::ApiKind::completions, 1, count,
                               warmup, timeout);
    warmup = 0;
    sequential.insert(sequential.end(), std::make_move_iterator(records.begin()),
                      std::make_move_iterator(records.end()));
  }
  add_sequential_figures(sequential, &speed);

  // The shortest prompt, as in the in-process figure; its length in characters, because the
  // client has no tokenizer.
  const DatasetItem* shortest = nullptr;
  for (const DatasetItem& item : items) {
    if (shortest == nullptr || prompt_chars(item) < prompt_chars(*shortest)) shortest = &item;
  }
  if (shortest != nullptr) {
    bench::DatasetEntry entry = entry_of(*shortest, default_max_tokens);
    entry.output_tokens = concurrent_tokens;
    const auto records = run_entries(
        endpoint, {entry}, shortest->is_chat() ? bench::ApiKind::chat : bench::ApiKind::completions,
        concurrency, concurrency, 0, timeout);
    for (const bench::RequestRecord& record : records) {
      ++speed.requests;
      if (!record.ok()) ++speed.errors;
    }
    speed.decode_tokens_per_s_concurrent = concurrent_decode_tokens_per_s(records);
  }
  speed.error_rate = speed.requests > 0 ? static_cast<double>(speed.errors) / speed.requests : 0;
  return speed;
}

}  // namespace brisk::quant
