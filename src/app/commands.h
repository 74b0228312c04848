#pragma once

#include <CLI/CLI.hpp>

namespace brisk {

// Each verb registers its flags on `app` and returns the function that runs it.
using CommandRunner = std::function<int()>;

CommandRunner register_serve_command(CLI::App& app);
CommandRunner register_pull_command(CLI::App& app);
CommandRunner register_bench_command(CLI::App& app);
CommandRunner register_plan_command(CLI::App& app);
CommandRunner register_quant_command(CLI::App& app);
CommandRunner register_doctor_command(CLI::App& app);
CommandRunner register_tune_command(CLI::App& app);

}  // namespace brisk
