#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tune/knob.h"

namespace brisk::tune {

// A brisk doctor finding whose prescription is a set of brisk serve flags (report.json's
// findings[].serve_flags).
struct Prescription {
  std::string finding;  // its id, e.g. "no_batching"
  std::vector<std::string> serve_flags;
};

// The prescriptions of a `brisk doctor --out DIR` report.json (DIR/report.json or the file);
// findings without flags are skipped. nullopt with `error` when the file is not such a report.
std::optional<std::vector<Prescription>> read_prescriptions(const std::string& path,
                                                            std::string& error);

// One knob, "prescription", whose baseline "current" adds nothing and whose other values are
// the prescriptions, by finding id.
Knob prescription_knob(const std::vector<Prescription>& prescriptions);

// `flags` ("--max-seqs", "16", ...) as knob values of brisk_serve_knobs' names ("max-seqs": "16"),
// for the prediction.
Setting flags_as_setting(const std::vector<std::string>& flags);

}  // namespace brisk::tune
