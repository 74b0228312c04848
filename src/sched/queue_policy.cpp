#include "sched/queue_policy.h"

namespace brisk {

const char* scheduling_policy_name(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::fcfs:
      return "fcfs";
    case SchedulingPolicy::priority:
      return "priority";
    case SchedulingPolicy::slo:
      return "slo";
  }
  return "fcfs";
}

double QueuePolicy::effective_priority(const Request& request, TimePoint now) const {
  if (options_.priority_aging_ms <= 0) return request.priority;
  return request.priority - ms_between(request.arrival, now) / options_.priority_aging_ms;
}

TimePoint QueuePolicy::deadline(const Request& request) const {
  const double ms = request.deadline_ms > 0 ? request.deadline_ms : options_.slo_ttft_ms;
  return request.arrival +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

bool QueuePolicy::runs_before(const Request& a, const Request& b, TimePoint now) const {
  if (options_.policy == SchedulingPolicy::priority) {
    const double pa = effective_priority(a, now);
    const double pb = effective_priority(b, now);
    if (pa != pb) return pa < pb;
  }
  return a.arrival < b.arrival;
}

int QueuePolicy::pick(const std::deque<std::shared_ptr<Request>>& waiting,
                      const std::function<bool(const Request&)>& eligible,
                      const std::function<bool(const Request&)>& is_long, TimePoint now,
                      double prefill_ms_per_token) const {
  if (options_.policy == SchedulingPolicy::slo) {
    return pick_earliest_deadline(waiting, eligible, is_long, now, prefill_ms_per_token);
  }
  int best = -1;
  for (size_t i = 0; i < waiting.size(); ++i) {
    const Request& request = *waiting[i];
    if (!eligible(request)) continue;
    if (options_.policy == SchedulingPolicy::fcfs) return static_cast<int>(i);  // arrival order
    if (best < 0 || runs_before(request, *waiting[static_cast<size_t>(best)], now)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

// Earliest deadline first. When that is a long prompt, the short prompt with the earliest
// deadline goes first instead if waiting behind the long one's prefill would make it miss its
// deadline and the long one still meets its own after it.
int QueuePolicy::pick_earliest_deadline(const std::deque<std::shared_ptr<Request>>& waiting,
                                        const std::function<bool(const Request&)>& eligible,
                                        const std::function<bool(const Request&)>& is_long,
                                        TimePoint now, double prefill_ms_per_token) const {
  int earliest = -1;
  int earliest_short = -1;
  for (size_t i = 0; i < waiting.size(); ++i) {
    const Request& request = *waiting[i];
    if (!eligible(request)) continue;
    const int index = static_cast<int>(i);
    auto sooner = [&](int other) {
      return other < 0 || deadline(request) < deadline(*waiting[static_cast<size_t>(other)]);
    };
    if (sooner(earliest)) earliest = index;
    if (!is_long(request) && sooner(earliest_short)) earliest_short = index;
  }
  if (earliest < 0 || earliest_short < 0 || earliest == earliest_short) return earliest;
  auto prefill = [&](int index) {
    const double ms = static_cast<double>(waiting[static_cast<size_t>(index)]->prompt_tokens.size()) *
                      prefill_ms_per_token;
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  };
  const Request& long_one = *waiting[static_cast<size_t>(earliest)];
  const Request& short_one = *waiting[static_cast<size_t>(earliest_short)];
  const TimePoint both = now + prefill(earliest) + prefill(earliest_short);
  const bool short_misses_behind_long = deadline(short_one) < both;
  const bool long_meets_after_short = deadline(long_one) >= both;
  return short_misses_behind_long && long_meets_after_short ? earliest_short : earliest;
}

}  // namespace brisk
