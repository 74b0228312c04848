#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace brisk {

// brisk_requests_rejected_total: requests the server refused before they ran, by model and
// reason. A refusal before the request's model is known (authentication, too many connections,
// an unknown model) counts under no model.
class RejectionCounts {
 public:
  void count(const std::string& model, const std::string& reason);
  // `label_models`: each sample carries model="NAME" (a server of several models); without it
  // the counts of every model are summed by reason.
  std::string render_prometheus(bool label_models) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, uint64_t> counts_;  // (model, reason)
};

}  // namespace brisk
