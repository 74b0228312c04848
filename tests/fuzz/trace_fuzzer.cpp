// Fuzzes the trace readers behind brisk bench --trace (brisk's JSONL, Mooncake's JSONL, the Azure
// CSV; parse_trace with each format and with detection): a bad file must be refused with a
// message, never crash. What is accepted must be sorted by arrival from 0, hold counts within
// their bounds, and survive a round trip through brisk's own line format unchanged.
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/request_trace.h"

namespace {

using namespace brisk;

void require(bool condition) {
  if (!condition) std::abort();
}

void check(const Trace& trace) {
  require(!trace.records.empty());
  require(trace.records.front().arrival_s == 0);
  double last = 0;
  std::string lines;
  for (const TraceRecord& record : trace.records) {
    require(std::isfinite(record.arrival_s) && record.arrival_s >= last);
    last = record.arrival_s;
    require(record.input_tokens >= 0 && record.input_tokens <= kMaxTraceTokens);
    require(record.output_tokens >= 0 && record.output_tokens <= kMaxTraceTokens);
    require(record.hash_ids.empty() || record.block_tokens > 0);
    lines += trace_line(record) + "\n";
  }
  std::string error;
  const auto again = parse_trace(lines, TraceFormat::brisk, "round-trip", error);
  require(again && again->records.size() == trace.records.size());
  for (size_t i = 0; i < trace.records.size(); ++i) {
    const TraceRecord& a = trace.records[i];
    const TraceRecord& b = again->records[i];
    require(a.input_tokens == b.input_tokens && a.output_tokens == b.output_tokens);
    require(a.hash_ids == b.hash_ids && a.block_tokens == b.block_tokens);
    // Written rounded to the microsecond.
    require(std::fabs(a.arrival_s - b.arrival_s) <= 1e-6 * (1 + std::fabs(a.arrival_s)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (TraceFormat format : {TraceFormat::automatic, TraceFormat::brisk, TraceFormat::mooncake,
                             TraceFormat::azure}) {
    std::string error;
    const auto trace = parse_trace(text, format, "fuzz", error);
    if (!trace) {
      require(!error.empty());
      continue;
    }
    check(*trace);
  }
  return 0;
}
