#include <csignal>
#include <iostream>
#include <map>

#include "app/commands.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"brisk: fast LLM inference, and why it is slow"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "brisk 0.1.0");
  std::map<CLI::App*, brisk::CommandRunner> runners;
  auto add = [&](const char* name, const char* description, auto register_command) {
    CLI::App* command = app.add_subcommand(name, description);
    runners[command] = register_command(*command);
  };
  add("serve", "Serve a model with an OpenAI-compatible API", brisk::register_serve_command);
  add("pull", "Download a model into the local model cache", brisk::register_pull_command);
  add("bench", "Measure latency and throughput of any OpenAI-compatible endpoint",
      brisk::register_bench_command);
  add("plan", "Pick hardware: memory fit, predicted TTFT/TPOT, device count and $/1M tokens",
      brisk::register_plan_command);
  add("quant", "Is the quantized model good enough, and faster? Gates, verdict, report",
      brisk::register_quant_command);
  add("doctor", "Name the bottleneck of an inference endpoint, with evidence and a prescription",
      brisk::register_doctor_command);
  add("tune", "Find, by measuring, the serve configuration that meets an SLO with the most goodput",
      brisk::register_tune_command);
  CLI11_PARSE(app, argc, argv);
  for (auto& [command, run] : runners) {
    if (!command->parsed()) continue;
    // A failure no check foresaw still ends with a message and an exit status, not an abort.
    try {
      return run();
    } catch (const std::exception& e) {
      std::cerr << "error: brisk " << command->get_name() << " failed: " << e.what() << "\n";
      return 1;
    }
  }
  return 1;
}
