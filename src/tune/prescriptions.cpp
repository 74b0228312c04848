#include "tune/prescriptions.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace brisk::tune {

std::optional<std::vector<Prescription>> read_prescriptions(const std::string& path,
                                                            std::string& error) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "report.json";
  std::ifstream in(file);
  if (!in) {
    error = "--verify: cannot read " + file.string();
    return std::nullopt;
  }
  const auto report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("findings") || !report["findings"].is_array()) {
    error = "--verify: " + file.string() + " is not a brisk doctor report.json (no findings)";
    return std::nullopt;
  }
  std::vector<Prescription> prescriptions;
  for (const auto& finding : report["findings"]) {
    if (!finding.is_object() || !finding.contains("id") || !finding["id"].is_string() ||
        !finding.contains("serve_flags") || !finding["serve_flags"].is_array()) {
      continue;
    }
    Prescription prescription;
    prescription.finding = finding["id"].get<std::string>();
    for (const auto& flag : finding["serve_flags"]) {
      if (flag.is_string()) prescription.serve_flags.push_back(flag.get<std::string>());
    }
    if (!prescription.serve_flags.empty()) prescriptions.push_back(std::move(prescription));
  }
  return prescriptions;
}

Knob prescription_knob(const std::vector<Prescription>& prescriptions) {
  Knob knob;
  knob.name = "prescription";
  knob.baseline = "current";
  knob.values.push_back({"current", {}});
  for (const Prescription& prescription : prescriptions) {
    knob.values.push_back({prescription.finding, prescription.serve_flags});
  }
  knob.effect = "brisk doctor's prescription for that finding";
  knob.predicted = true;
  return knob;
}

Setting flags_as_setting(const std::vector<std::string>& flags) {
  Setting setting;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i].rfind("--", 0) != 0) continue;
    const bool has_value = i + 1 < flags.size() && flags[i + 1].rfind("--", 0) != 0;
    setting[flags[i].substr(2)] = has_value ? flags[i + 1] : "";
    if (has_value) ++i;
  }
  return setting;
}

}  // namespace brisk::tune
