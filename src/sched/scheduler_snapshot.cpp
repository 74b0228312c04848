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
    case AdmissionBlock::none:
      break;
  }
  return "none";
}

}  // namespace brisk
