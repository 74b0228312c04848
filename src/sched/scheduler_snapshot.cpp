#include "sched/scheduler_snapshot.h"

namespace brisk {

const char* admission_block_name(AdmissionBlock block) {
  switch (block) {
    case AdmissionBlock::no_free_sequence:
      return "no_free_sequence";
    case AdmissionBlock::kv_cache_full:
      return "kv_cache_full";
    case AdmissionBlock::long_prefill_turn:
      return "long_prefill_turn";
    case AdmissionBlock::step_budget:
      return "step_budget";
    case AdmissionBlock::first_choice_prefill:
      return "first_choice_prefill";
    case AdmissionBlock::none:
      break;
  }
  return "none";
}

const char* wait_reason_name(WaitReason reason) {
  switch (reason) {
    case WaitReason::no_free_sequence:
      return "no_free_sequence";
    case WaitReason::kv_cache_full:
      return "kv_cache_full";
    case WaitReason::long_prefill_turn:
      return "long_prefill_turn";
    case WaitReason::step_budget:
      return "step_budget";
    case WaitReason::first_choice_prefill:
      return "first_choice_prefill";
    case WaitReason::behind_others:
      return "behind_others";
    case WaitReason::not_yet_considered:
      break;
  }
  return "not_yet_considered";
}

}  // namespace brisk
