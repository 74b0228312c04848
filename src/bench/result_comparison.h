#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace brisk::bench {

// Two result.json documents side by side: for each load point present in both (matched by
// position), the headline latencies and throughputs of each (A, B) and their ratio B / A. The
// header names what each sent beyond the workload (workload.sampling, workload.extra_body) and
// notes when the two differ.
// Returns an error message instead of a table when a document does not have the schema.
std::string compare_results(const nlohmann::json& first, const nlohmann::json& second,
                            const std::string& first_label, const std::string& second_label,
                            std::string& error);

}  // namespace brisk::bench
