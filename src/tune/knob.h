#pragma once

#include <map>
#include <string>
#include <vector>

namespace brisk::tune {

// One value a knob may take: its label (what the report and a --server-cmd template show) and
// the arguments it adds to a brisk serve command line ("--max-seqs", "8"; "--no-kv-unified").
struct KnobValue {
  std::string label;
  std::vector<std::string> args;
};

// A setting the search may change: brisk serve's --max-seqs, or a --server-cmd placeholder.
struct Knob {
  std::string name;
  std::vector<KnobValue> values;
  std::string baseline;  // the label of the value the configuration starts from
  // What changing it trades, in words, for the report's "why it wins".
  std::string effect;
  // Whether brisk plan's simulation sees this knob (else every value predicts alike).
  bool predicted = false;

  const KnobValue* find(const std::string& label) const;
};

// A configuration: a value label for every knob, by knob name.
using Setting = std::map<std::string, std::string>;

// Every knob at its baseline value.
Setting baseline_setting(const std::vector<Knob>& knobs);
// The arguments `setting` adds, in knob order.
std::vector<std::string> setting_args(const std::vector<Knob>& knobs, const Setting& setting);
// "max-seqs=8 max-batched-tokens=1024": the knobs that differ from `base` ("defaults" if none).
std::string describe_change(const std::vector<Knob>& knobs, const Setting& base,
                            const Setting& setting);

}  // namespace brisk::tune
