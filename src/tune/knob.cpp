#include "tune/knob.h"

namespace brisk::tune {

const KnobValue* Knob::find(const std::string& label) const {
  for (const KnobValue& value : values) {
    if (value.label == label) return &value;
  }
  return nullptr;
}

Setting baseline_setting(const std::vector<Knob>& knobs) {
  Setting setting;
  for (const Knob& knob : knobs) setting[knob.name] = knob.baseline;
  return setting;
}

std::vector<std::string> setting_args(const std::vector<Knob>& knobs, const Setting& setting) {
  std::vector<std::string> args;
  for (const Knob& knob : knobs) {
    const auto chosen = setting.find(knob.name);
    const KnobValue* value = knob.find(chosen != setting.end() ? chosen->second : knob.baseline);
    if (value) args.insert(args.end(), value->args.begin(), value->args.end());
  }
  return args;
}

std::string describe_change(const std::vector<Knob>& knobs, const Setting& base,
                            const Setting& setting) {
  std::string text;
  for (const Knob& knob : knobs) {
    const auto from = base.find(knob.name);
    const auto to = setting.find(knob.name);
    if (to == setting.end() || (from != base.end() && from->second == to->second)) continue;
    if (!text.empty()) text += ' ';
    text += knob.name + '=' + to->second;
  }
  return text.empty() ? "(baseline)" : text;
}

}  // namespace brisk::tune
