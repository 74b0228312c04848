#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <exception>
#include <optional>
#include <vector>

#include "bench/chat_session.h"
#include "bench/progress.h"
#include "bench/request_record.h"
#include "bench/target_endpoint.h"
#include "bench/workload.h"
#include "common/arrival_schedule.h"

namespace brisk::bench {

using brisk::ArrivalProcess;

// How load is offered at one point of a sweep.
// Closed loop (rate == 0): `concurrency` virtual users, each sending its next request as soon as
// the previous one finished. Open loop (rate > 0): requests are due on an arrival schedule
// whatever the server's progress, at most `concurrency` in flight when it is > 0; latency then
// counts from the scheduled time, so a client or server that falls behind cannot hide queueing.
struct LoadPoint {
  int concurrency = 1;
  double rate = 0;  // requests per second; infinity sends everything at once
  ArrivalProcess arrival = ArrivalProcess::poisson;
  double burstiness = 1.0;  // gamma shape: < 1 burstier than Poisson, 1 = Poisson
  // The arrivals are a trace's (RunOptions::schedule_s); `rate` is then their mean rate.
  bool trace = false;
  // A session run (run_sessions): this many conversations, each sending its next turn when it
  // has read the last answer. Neither closed nor open loop: `rate` is 0 unless `trace`.
  int sessions = 0;

  bool open_loop() const { return rate > 0; }
  ArrivalPattern arrival_pattern() const { return {arrival, rate, burstiness}; }
};

struct RunOptions {
  LoadPoint load;
  int run_index = 0;      // position in the sweep; makes prompts unique across runs
  int num_requests = 64;  // measured requests, unless duration_s is set
  // Send measured requests for this long instead (closed loop: users start no request after it;
  // open loop: arrivals are scheduled up to it). Requests in flight then still finish.
  std::optional<double> duration_s;
  int warmup_requests = 2;  // sent first, at the same concurrency, and excluded from statistics
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per request
  PhaseCounters* progress = nullptr;  // bumped during the measured phase, when not null
  // Spin on the sockets instead of sleeping in epoll: costs the whole core, but waking an idle
  // CPU takes tens of microseconds, and that delay would be counted in every timing.
  bool busy_poll = false;
  // Open loop: the measured requests' arrival offsets, replacing the arrival process and
  // num_requests/duration_s (a trace replay, brisk bench --trace).
  std::vector<double> schedule_s = {};
  // No measured request starts at or after this moment (closed loop), whatever num_requests
  // says: a caller with a time budget (brisk doctor) bounds a run that meets a slow server.
  TimePoint stop_starting_at = TimePoint::max();
  // Closed loop: a user whose request was refused with Retry-After (429, 503) waits that long
  // (at most until the run's deadline) before its next request, as the openai SDK's clients do;
  // otherwise it resends at once, and against a server that sheds load the users spin.
  bool honour_retry_after = true;
  // Open loop: asked every 50 ms during the measured phase with the records so far (measured
  // ones being filled in) and the time; a non-empty answer abandons the run at once: no further
  // request is sent, those in flight are dropped (their connections closed, so the server can
  // cancel them) and fail as `abandoned`, and those not sent yet are left out of the result.
  // brisk tune ends a trial this way once it can no longer meet the SLO.
  std::function<std::string(const std::vector<RequestRecord>&, TimePoint now)> abandon_if = {};
};

struct RunResult {
  LoadPoint load;
  // Warmup requests first, then measured ones, ordered by index (not by completion).
  std::vector<RequestRecord> records;
  TimePoint start{};  // start of the measured phase: the zero of every offset in requests.csv
  TimePoint end{};    // when the last measured request ended
  std::string abandoned;  // why abandon_if ended the run; empty when it ran to its end
};

// Offsets in seconds from the start of the measured phase at which each of `count` requests is
// due (common/arrival_schedule.h: the schedule brisk plan predicts for the same seed).
std::vector<double> arrival_offsets_s(const LoadPoint& load, int count, uint64_t seed);
// The same schedule, every arrival before `duration_s` (a finite rate only).
std::vector<double> arrival_offsets_within_s(const LoadPoint& load, double duration_s,
                                             uint64_t seed);

// Runs `io` until it has no work left: io.run(), or with `busy_poll` io.poll() in a loop.
void drive(net::io_context& io, bool busy_poll);

// Completion handler for the coroutines a run spawns (closed and open loop): an exception ends
// the run loudly (brisk bench reports it and exits 1) instead of vanishing with the connection
// it held, which under --max-concurrency left an open-loop run waiting forever for a release.
void rethrow_if_failed(std::exception_ptr error);

// Records that one measured request finished, leaving `in_flight` requests running.
void count_finished(PhaseCounters& counters, int in_flight, bool ok);

// Runs one closed-loop load point to completion on the calling thread. Connections opened
// during warmup are kept for the measured phase, so it starts warm.
RunResult run_closed_loop(const TargetEndpoint& target, const Workload& workload,
                          const RunOptions& options);

// Runs one open-loop load point: warmup requests one at a time, then the measured requests on
// their arrival schedule (seeded by `seed`).
RunResult run_open_loop(const TargetEndpoint& target, const Workload& workload,
                        const RunOptions& options, uint64_t seed);

// Runs one session load point (brisk bench --sessions, --replay-sessions): `warmup_requests`
// short requests one at a time, then every conversation at once, each on its own connection (a
// chat user's browser), turn after turn. A turn that fails ends its conversation: the turns it
// left unsent are not in the result. Only `load`, `warmup_requests`, `timeout`, `progress` and
// `busy_poll` of `options` apply.
RunResult run_sessions(const TargetEndpoint& target, const std::vector<SessionScript>& scripts,
                       const SessionRequestOptions& requests, const RunOptions& options);

}  // namespace brisk::bench
