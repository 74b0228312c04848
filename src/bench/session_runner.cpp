#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "bench/load_runner.h"
#include "bench/openai_client.h"

// GCC 12 flags Boost 1.74's coroutine-frame allocator as mismatched; see load_runner.cpp.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace brisk::bench {
namespace {

constexpr int kWarmupWords = 8;
constexpr int kWarmupOutputTokens = 4;

Clock::duration seconds(double value) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
}

// What the conversations of one run share: the io_context is single-threaded, so plain integers.
struct SessionPhase {
  const SessionRequestOptions* requests;
  TimePoint start;
  int in_flight = 0;
  PhaseCounters* progress = nullptr;
};

// One user's conversation on its own connection (their browser's), turn after turn: each turn
// resends the history with the answers this server gave. A failed turn ends the conversation,
// as it would end the user's: its later turns stay unsent.
net::awaitable<void> converse(const SessionScript& script, RequestRecord* records,
                              const TargetEndpoint& target, std::chrono::milliseconds timeout,
                              SessionPhase& phase) {
  auto executor = co_await net::this_coro::executor;
  OpenAiConnection connection(executor, target, phase.requests->kind, timeout);
  Conversation conversation(phase.requests->kind);
  if (!script.system_text.empty()) conversation.add_system(script.system_text);
  net::steady_timer due_timer(executor);
  TimePoint previous_end = phase.start;
  for (size_t t = 0; t < script.turns.size(); ++t) {
    const SessionTurn& turn = script.turns[t];
    const TimePoint due =
        std::max(phase.start + seconds(turn.not_before_s), previous_end + seconds(turn.think_s));
    due_timer.expires_at(due);
    co_await due_timer.async_wait(net::use_awaitable);
    conversation.add_user(turn.user_text);
    const CompletionRequest request =
        conversation.request(phase.requests->model, script.user, turn.output_tokens,
                             phase.requests->stream, phase.requests->sampling);
    RequestRecord& record = records[t];
    record.turn = static_cast<int>(t);
    record.keep_answer = true;
    record.scheduled = due;
    record.in_flight_at_send = ++phase.in_flight;
    if (phase.progress) phase.progress->in_flight.store(phase.in_flight, std::memory_order_relaxed);
    co_await connection.send(request, record);
    --phase.in_flight;
    if (phase.progress) count_finished(*phase.progress, phase.in_flight, record.ok());
    if (!record.ok()) co_return;
    conversation.add_answer(record.answer);
    record.answer = {};  // the conversation holds it now
    previous_end = record.end;
  }
}

}  // namespace

RunResult run_sessions(const TargetEndpoint& target, const std::vector<SessionScript>& scripts,
                       const SessionRequestOptions& requests, const RunOptions& options) {
  const int warmup = std::max(0, options.warmup_requests);
  std::vector<int> first_record;  // each script's first turn's record
  int total = warmup;
  for (const SessionScript& script : scripts) {
    first_record.push_back(total);
    total += static_cast<int>(script.turns.size());
  }
  std::vector<RequestRecord> records(total);
  for (size_t s = 0; s < scripts.size(); ++s) {
    for (size_t t = 0; t < scripts[s].turns.size(); ++t) {
      RequestRecord& record = records[first_record[s] + t];
      record.index = first_record[s] + static_cast<int>(t);
      record.session = static_cast<int>(s);
    }
  }

  RunResult result;
  result.load = options.load;
  net::io_context io;
  // Warmup: short one-turn conversations, one at a time, sharing nothing with the measured ones.
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        OpenAiConnection connection(io.get_executor(), target, requests.kind, options.timeout);
        for (int i = 0; i < warmup; ++i) {
          Conversation conversation(requests.kind);
          conversation.add_user(fmt::format("Warm-up request {}.", i) +
                                filler_text(mix_bits(0x7761726d ^ i), kWarmupWords));
          RequestRecord& record = records[i];
          record.index = i;
          record.warmup = true;
          record.in_flight_at_send = 1;
          record.scheduled = Clock::now();
          co_await connection.send(
              conversation.request(requests.model, "brisk-bench-warmup", kWarmupOutputTokens,
                                   requests.stream, requests.sampling),
              record);
        }
      },
      rethrow_if_failed);
  drive(io, options.busy_poll);
  io.restart();

  SessionPhase phase{&requests, Clock::now(), 0, options.progress};
  result.start = phase.start;
  if (options.progress) ProgressDisplay::mark_measured_start(*options.progress, result.start);
  for (size_t s = 0; s < scripts.size(); ++s) {
    net::co_spawn(io,
                  converse(scripts[s], &records[first_record[s]], target, options.timeout, phase),
                  rethrow_if_failed);
  }
  drive(io, options.busy_poll);
  result.end = Clock::now();
  // The turns a failed turn left unsent were never requests.
  for (RequestRecord& record : records) {
    if (record.warmup || record.sent != TimePoint{} || !record.ok()) {
      result.records.push_back(std::move(record));
    }
  }
  return result;
}

}  // namespace brisk::bench
