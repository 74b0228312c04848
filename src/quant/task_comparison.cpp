#include "quant/task_comparison.h"

namespace brisk::quant {

ItemAnswer evaluate_answer(const DatasetItem& item, std::string text) {
  ItemAnswer answer;
  for (const TaskCheck& check : item.checks) answer.passed.push_back(check_passes(check, text));
  answer.text = std::move(text);
  return answer;
}

TaskComparison compare_tasks(const std::vector<DatasetItem>& items,
                             const std::vector<ItemAnswer>& reference,
                             const std::vector<ItemAnswer>& candidate) {
  TaskComparison comparison;
  for (size_t i = 0; i < items.size() && i < reference.size() && i < candidate.size(); ++i) {
    for (size_t c = 0; c < items[i].checks.size(); ++c) {
      const CheckKind kind = items[i].checks[c].kind;
      const bool by_reference = reference[i].passed.at(c);
      const bool by_candidate = candidate[i].passed.at(c);
      for (KindTally* tally : {&comparison.by_kind[kind], &comparison.total}) {
        ++tally->checks;
        tally->reference_passed += by_reference ? 1 : 0;
        tally->candidate_passed += by_candidate ? 1 : 0;
        tally->lost += by_reference && !by_candidate ? 1 : 0;
        tally->gained += !by_reference && by_candidate ? 1 : 0;
      }
      if (by_reference != by_candidate)
        comparison.flips.push_back({items[i].id, kind, by_reference});
    }
  }
  const KindTally& total = comparison.total;
  if (total.checks > 0) {
    comparison.reference_pass_rate = static_cast<double>(total.reference_passed) / total.checks;
    comparison.candidate_pass_rate = static_cast<double>(total.candidate_passed) / total.checks;
    comparison.task_drop = comparison.reference_pass_rate - comparison.candidate_pass_rate;
  }
  const auto json = comparison.by_kind.find(CheckKind::json);
  if (json != comparison.by_kind.end() && json->second.reference_passed > 0) {
    const KindTally& tally = json->second;
    comparison.format_kept =
        static_cast<double>(tally.reference_passed - tally.lost) / tally.reference_passed;
  }
  return comparison;
}

}  // namespace brisk::quant
