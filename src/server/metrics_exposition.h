#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/label_value.h"

namespace brisk {

// /metrics of a server with several models: each model renders its own families (the text
// exposition format 0.0.4) and this joins them into one valid exposition, every family's HELP
// and TYPE once and its samples together, each model's samples labelled model="NAME".
class MetricsExposition {
 public:
  // `model`: the label value for every sample of `text`; empty adds no label (a server-wide
  // part, or the only model of a server that serves one).
  void add(std::string_view text, std::string_view model);
  std::string render() const;

 private:
  struct Family {
    std::string name;
    std::string header;  // its HELP and TYPE lines, as the first part that had them wrote them
    std::string samples;
  };
  Family& family(std::string_view name);

  std::vector<Family> families_;  // in order of first appearance
};

}  // namespace brisk
