#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/embedding_model.h"
#include "engine/engine.h"
#include "sched/batch_window.h"
#include "sched/step_scheduler.h"
#include "server/generation_config.h"
#include "server/openai_server.h"
#include "server/trace_writer.h"

namespace brisk {

// The flags that set one model: its engine and scheduler, or its batcher. On the command line
// they apply to every model of their kind; a --models file may set them per model.
struct ModelFlags {
  EngineOptions engine;
  SchedulerOptions scheduler;
  std::string generation_config = kGenerationConfigPresets[0];
  std::string override_generation_config;
  std::string prefix_cache = "on";
  std::string policy = "fcfs";
  int prefix_cache_seqs = -1;  // -1: as many as --max-seqs
  int64_t cache_ram_mib = -1;  // -1: 8192, at most a quarter of the RAM
  // An embedding model's batcher (docs/cli.md, "Embeddings").
  EmbeddingModelOptions embedding;
  BatchWindowOptions batch_window;
  // The options given, by kind: those only an embedding model takes, and those only a
  // generative one takes (every other model flag: --threads and --gpu-layers mean the same
  // for both).
  std::vector<CLI::Option*> embedding_flags;
  std::vector<CLI::Option*> generation_flags;

  ModelFlags();
};

// brisk serve's flags: the server's own, and the model flags every model starts from.
struct ServeFlags {
  // Served side by side; the first is the default of requests that name no model.
  std::vector<std::string> models = {"gemma3-270m"};
  std::vector<std::string> served_model_names;  // one per model, in their order
  std::string models_file;                      // --models: the models and their own flags
  ServerOptions server;
  int read_timeout_s = 30;
  int keep_alive_timeout_s = 30;
  int write_timeout_s = 60;
  int drain_timeout_s = 10;
  // Memory: what the loaded models may take (docs/models.md, "Memory budget"). Empty: 75% of
  // the device's memory.
  std::string memory_budget;
  double keep_alive_s = -1;  // -1: a model stays loaded until its memory is needed
  double max_load_wait_s = 120;
  std::string log_format = "text";
  std::string metrics_compat = "none";
  std::string log_level = "info";
  TraceWriter::Options trace;  // --trace-out: no trace when its path is empty
  ModelFlags model;
  CLI::Option* models_option = nullptr;
};

// Registers the model flags on `app`, bound to `flags` (the command line's, or one model's of
// a --models file).
void add_model_flags(CLI::App& app, ModelFlags& flags);
// Registers the server's own flags.
void add_server_flags(CLI::App& app, ServeFlags& flags);

}  // namespace brisk
