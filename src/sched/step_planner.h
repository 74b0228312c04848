#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/clock.h"
#include "sched/kv_ledger.h"
#include "sched/queue_policy.h"
#include "sched/request.h"
#include "sched/scheduler_options.h"
#include "sched/scheduler_snapshot.h"
#include "sched/sequence.h"
#include "sched/step_costs.h"
#include "sched/step_plan.h"

namespace brisk {

// What the scheduler holds between steps. The planner reads it; only the scheduler changes it,
// by applying the planner's decisions.
struct SchedulerState {
  std::deque<std::shared_ptr<Request>> waiting;     // in arrival order
  int queued_prompt_tokens = 0;                     // prompt tokens in `waiting`
  std::vector<std::unique_ptr<Sequence>> running;   // in admission order
  std::deque<std::unique_ptr<Sequence>> preempted;  // in admission order; run before `waiting`
  uint64_t next_admission_order = 0;
  bool long_prefill_stepped_aside = false;  // the last step's long chunk gave way
};

// Why the last admission pass stopped, for each waiting request's reason (wait_reason).
struct AdmissionPass {
  AdmissionBlock blocked = AdmissionBlock::none;
  const Request* stopped_at = nullptr;  // kv_cache_full: the request that did not fit
  bool long_prompts_wait = false;       // --max-long-prefills long prompts were prefilling
  std::vector<const Request*> preempted_after;  // preempted for room since the pass
};

// One step's decision, made from the state without changing it: which running sequences give
// up their cells, which requests start (or resume) in which KV sequence id reusing which cached
// prefix, the KV operations that brings in order, and the step's batch.
struct StepDecision {
  struct Admission {
    int waiting_index = -1;  // the queue's request (index in SchedulerState::waiting), or -1:
                             // the preempted sequence of admission order `order` resumes
    uint64_t order = 0;      // its admission order
    PrefixLookup hit;
    int id = -1;      // its KV sequence id
    int reused = 0;   // cached tokens it starts from
    int query_tokens = 0;  // the tokens it looked up (prompt, or a resumed one's replay)
  };
  std::vector<uint64_t> preemptions;  // running sequences, by admission order, in order
  std::vector<Admission> admissions;  // in order
  // The KV ledger once the decision is applied (unset: unchanged) and the operations on the
  // cache that lead there, in order.
  std::optional<KvLedger> ledger;
  KvOps kv_ops;
  StepPlan plan;  // entries name sequences by admission order (bound once applied)
  uint64_t next_admission_order = 0;
  bool long_stepped_aside = false;
  std::optional<AdmissionPass> pass;  // set when the decision admitted
  // Preempted after the last admission pass (a decision after no room): wait_reason's.
  std::vector<const Request*> preempted_after_pass;
};

// A prompt's longest reusable cached prefix in a ledger (KvManager::lookup_in; in tests
// lookup_in_ledger): `shared_prompt` for a later choice of an n > 1 request.
using PrefixFinder = std::function<PrefixLookup(const KvLedger& ledger,
                                                std::span<const Token> tokens, bool shared_prompt)>;

// The scheduler's policy as a pure function: from the state, the KV ledger, the step costs and
// the clock it returns one StepDecision and changes nothing (nano-vllm's schedule()). A step:
// a waiting request that outranks a running one takes its place (--policy priority); in one
// KV buffer, room for every decode (cached prefixes first, then the latest-arrived request is
// preempted); admission of newcomers, which sizes their first chunks from a draft of the
// step's plan; then the plan itself (decodes, short prompt chunks, long ones), cached prefixes
// giving way when a running prompt's chunk lacks free cells. docs/scheduling.md tells why.
class StepPlanner {
 public:
  struct KvShape {
    int capacity_cells = 0;
    // Cells kept free at admission for the running requests' next tokens (vLLM's watermark),
    // so a new request does not force a preemption at once.
    int watermark_cells = 0;
    // One KV buffer for all: requests compete for cells. With a buffer per sequence each has
    // its own share and nothing is ever preempted for room.
    bool shared = true;
  };
  enum class Start {
    step,           // a new step: preemption for priority, room for decodes, admission, plan
    after_no_room,  // the last plan found no KV room: evict or preempt one, plan again
  };

  StepPlanner(const SchedulerOptions& options, KvShape kv);

  StepDecision decide(const SchedulerState& state, const KvLedger& ledger,
                      const PrefixFinder& find, const StepCosts& costs, TimePoint now,
                      Start start = Start::step) const;

  // Prompt sizes: long ones wait their turn (--long-prefill-tokens, --max-long-prefills).
  bool is_long_prompt(int tokens_to_prefill) const {
    return options_.long_prefill_tokens > 0 && tokens_to_prefill > options_.long_prefill_tokens;
  }
  // A later choice of an n > 1 request waits while its first choice prefills the prompt they
  // share; without a prefix cache to share it through, it prefills its own copy at once.
  static bool waits_for_first_choice(const Request& request, bool cache_enabled) {
    return cache_enabled && request.shares_prompt_of &&
           !request.shares_prompt_of->prompt_ready_to_share;
  }
  const KvShape& kv_shape() const { return kv_; }
  const QueuePolicy& policy() const { return policy_; }

 private:
  class Planning;
  friend class Planning;

  const SchedulerOptions options_;
  const KvShape kv_;
  const QueuePolicy policy_;
};

}  // namespace brisk
