#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "sched/request.h"

namespace brisk {

// Which waiting request starts next (--policy).
enum class SchedulingPolicy {
  fcfs,      // arrival order
  priority,  // the request's `priority` (lower first), aged, then arrival
  slo,       // earliest deadline for the first token first; a short prompt goes ahead of a long
             // one when that saves its deadline and the long one still meets its own
};
const char* scheduling_policy_name(SchedulingPolicy policy);

struct QueuePolicyOptions {
  SchedulingPolicy policy = SchedulingPolicy::fcfs;
  // --policy priority: every this many ms waited improve a request's priority by one, so a
  // low-priority request under a stream of higher ones still starts (0: no aging).
  double priority_aging_ms = 10000;
  // --policy slo: the deadline of a request that names none, as ms after arrival.
  double slo_ttft_ms = 2000;
};

// Orders the waiting requests; pure, so it is tested without a scheduler.
class QueuePolicy {
 public:
  explicit QueuePolicy(QueuePolicyOptions options) : options_(options) {}

  SchedulingPolicy policy() const { return options_.policy; }
  // The index in `waiting` of the request to start next among those `eligible`, or -1.
  // `prefill_ms_per_token` (measured; 0 when unknown) prices a prompt for --policy slo.
  int pick(const std::deque<std::shared_ptr<Request>>& waiting,
           const std::function<bool(const Request&)>& eligible,
           const std::function<bool(const Request&)>& is_long, TimePoint now,
           double prefill_ms_per_token) const;
  // Under --policy priority, whether `a` should run before `b` (lower aged priority, then
  // earlier arrival); under the others, whether `a` arrived first.
  bool runs_before(const Request& a, const Request& b, TimePoint now) const;
  // The request's priority after aging: lower runs sooner.
  double effective_priority(const Request& request, TimePoint now) const;
  // When the request's first token is due under --policy slo.
  TimePoint deadline(const Request& request) const;

 private:
  int pick_earliest_deadline(const std::deque<std::shared_ptr<Request>>& waiting,
                             const std::function<bool(const Request&)>& eligible,
                             const std::function<bool(const Request&)>& is_long, TimePoint now,
                             double prefill_ms_per_token) const;

  QueuePolicyOptions options_;
};

}  // namespace brisk
