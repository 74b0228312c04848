#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quant/dataset.h"

namespace brisk::quant {

// One model's answer to one dataset item and the outcome of each of the item's checks.
struct ItemAnswer {
  std::string text;
  std::vector<bool> passed;  // one per DatasetItem::checks, same order
};

// Runs every check of `item` on `text`.
ItemAnswer evaluate_answer(const DatasetItem& item, std::string text);

struct KindTally {
  int checks = 0;
  int reference_passed = 0;
  int candidate_passed = 0;
  int lost = 0;    // reference right, candidate wrong
  int gained = 0;  // reference wrong, candidate right
};

// A check whose outcome differs between the two models: equal pass rates can hide these.
struct Flip {
  std::string item_id;
  CheckKind kind;
  bool lost = true;  // true: reference right -> candidate wrong; false: the reverse
};

struct TaskComparison {
  std::map<CheckKind, KindTally> by_kind;  // only kinds the dataset uses
  KindTally total;
  double reference_pass_rate = 0;  // over all checks; 0 when there are none
  double candidate_pass_rate = 0;
  double task_drop = 0;  // reference_pass_rate - candidate_pass_rate
  // Format compliance kept: of the JSON checks the reference passes, the fraction the candidate
  // passes too. Nullopt when the reference passes none (nothing to keep).
  std::optional<double> format_kept;
  std::vector<Flip> flips;
};

// `reference` and `candidate` are parallel to `items`.
TaskComparison compare_tasks(const std::vector<DatasetItem>& items,
                             const std::vector<ItemAnswer>& reference,
                             const std::vector<ItemAnswer>& candidate);

}  // namespace brisk::quant
