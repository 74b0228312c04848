#include "quant/quant_run.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "engine/scoring_model.h"
#include "quant/model_measurement.h"
#include "quant/verdict.h"

namespace brisk::quant {
namespace {

namespace fs = std::filesystem;

// A token sequence whose tokens from `first_predicted` on are predicted by both models.
struct ScoredSequence {
  TokenList tokens;
  int first_predicted = 0;
};

std::unique_ptr<ScoringModel> load_model(const std::string& path, const QuantSettings& settings,
                                         std::string* error) {
  if (!fs::exists(path)) {
    *error = "model file '" + path + "' does not exist";
    return nullptr;
  }
  ScoringModelOptions options;
  options.model_path = path;
  options.ctx_size = std::max(settings.ctx_size, settings.text_ctx);
  options.max_seqs = std::max(1, settings.concurrency);
  options.threads = settings.threads;
  return ScoringModel::load(options, error);
}

bool same_vocabulary(const ScoringModel& reference, const ScoringModel& candidate,
                     const std::string& candidate_name, std::string* error) {
  if (reference.vocabulary_size() != candidate.vocabulary_size()) {
    *error = "candidate '" + candidate_name + "' has another vocabulary than the reference (" +
             std::to_string(candidate.vocabulary_size()) + " tokens against " +
             std::to_string(reference.vocabulary_size()) +
             "): KL divergence compares distributions over the same tokens, so compare "
             "quantizations of the reference's own model";
    return false;
  }
  if (reference.vocabulary_fingerprint() != candidate.vocabulary_fingerprint()) {
    *error = "candidate '" + candidate_name +
             "' has another vocabulary than the reference (as many tokens, different texts): "
             "compare quantizations of the reference's own model";
    return false;
  }
  return true;
}

// llama-perplexity --kl-divergence's chunking: chunks of `ctx` tokens, each starting with BOS
// (when the model adds one), the second half of each scored.
std::optional<std::vector<ScoredSequence>> text_sequences(const ScoringModel& reference,
                                                          const QuantSettings& settings,
                                                          int max_chunks, std::string* error) {
  std::ifstream file(settings.divergence_text);
  if (!file) {
    *error = "cannot read --text '" + settings.divergence_text + "'";
    return std::nullopt;
  }
  std::stringstream text;
  text << file.rdbuf();
  const TokenList tokens = reference.tokenize(text.str(), true, false);
  const int ctx = settings.text_ctx;
  if (static_cast<int>(tokens.size()) < 2 * ctx) {
    *error = "--text '" + settings.divergence_text + "' tokenizes to " +
             std::to_string(tokens.size()) + " tokens; --text-ctx " + std::to_string(ctx) +
             " needs at least " + std::to_string(2 * ctx) + " (as llama-perplexity does)";
    return std::nullopt;
  }
  int chunks = static_cast<int>(tokens.size()) / ctx;
  if (max_chunks > 0) chunks = std::min(chunks, max_chunks);
  std::vector<ScoredSequence> sequences;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    ScoredSequence sequence;
    sequence.tokens.assign(tokens.begin() + chunk * ctx, tokens.begin() + (chunk + 1) * ctx);
    if (reference.adds_bos()) sequence.tokens[0] = reference.bos();
    sequence.first_predicted = ctx / 2 + 1;
    sequences.push_back(std::move(sequence));
  }
  return sequences;
}

std::vector<ScoredSequence> continuation_sequences(const std::vector<PreparedPrompt>& prompts,
                                                   const std::vector<TokenList>& continuations) {
  std::vector<ScoredSequence> sequences;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (continuations[i].empty()) continue;  // the reference failed on it: nothing to compare
    ScoredSequence sequence;
    sequence.tokens = prompts[i].tokens;
    sequence.first_predicted = static_cast<int>(sequence.tokens.size());
    sequence.tokens.insert(sequence.tokens.end(), continuations[i].begin(), continuations[i].end());
    sequences.push_back(std::move(sequence));
  }
  return sequences;
}

size_t rows_of(const ScoredSequence& sequence) {
  return sequence.tokens.size() - static_cast<size_t>(sequence.first_predicted);
}

// Feeds all but the last token (which is only predicted) and returns the logits that predict
// the tokens from first_predicted on.
bool score_sequence(ScoringModel& model, const ScoredSequence& sequence, std::vector<float>* logits,
                    std::string* error) {
  const TokenList fed(sequence.tokens.begin(), sequence.tokens.end() - 1);
  return model.score(fed, sequence.first_predicted - 1, logits, error);
}

// The reference's logits are the same for every candidate: kept from the first candidate on
// when they fit in kReferenceLogitsCacheBytes, else computed again beside each candidate.
constexpr size_t kReferenceLogitsCacheBytes = size_t{2} << 30;

class ReferenceLogits {
 public:
  ReferenceLogits(ScoringModel& reference, const std::vector<ScoredSequence>& sequences)
      : reference_(reference) {
    size_t rows = 0;
    for (const ScoredSequence& sequence : sequences) {
      rows += sequence.tokens.size() - static_cast<size_t>(sequence.first_predicted);
    }
    const size_t bytes = rows * static_cast<size_t>(reference.vocabulary_size()) * sizeof(float);
    if (bytes <= kReferenceLogitsCacheBytes) cache_.resize(sequences.size());
  }
  const std::vector<float>* get(size_t index, const ScoredSequence& sequence, std::string* error) {
    std::vector<float>& slot = cache_.empty() ? scratch_ : cache_[index];
    if (!cache_.empty() && !slot.empty()) return &slot;
    if (!score_sequence(reference_, sequence, &slot, error)) return nullptr;
    return &slot;
  }

 private:
  ScoringModel& reference_;
  std::vector<std::vector<float>> cache_;
  std::vector<float> scratch_;
};

bool accumulate_divergence(ReferenceLogits& reference, size_t index, ScoringModel& candidate,
                           const ScoredSequence& sequence, DivergenceAccumulator* accumulator,
                           std::string* error) {
  const std::vector<float>* reference_logits_ptr = reference.get(index, sequence, error);
  if (reference_logits_ptr == nullptr) return false;
  const std::vector<float>& reference_logits = *reference_logits_ptr;
  std::vector<float> candidate_logits;
  if (!score_sequence(candidate, sequence, &candidate_logits, error)) return false;
  const size_t n_vocab = static_cast<size_t>(candidate.vocabulary_size());
  const size_t rows = rows_of(sequence);
  if (reference_logits.size() != rows * n_vocab || candidate_logits.size() != rows * n_vocab) {
    *error = "the models returned logits of different shapes for the same tokens";
    return false;
  }
  for (size_t row = 0; row < rows; ++row) {
    const Token actual = sequence.tokens[static_cast<size_t>(sequence.first_predicted) + row];
    accumulator->add(compare_next_token(reference_logits.data() + row * n_vocab,
                                        candidate_logits.data() + row * n_vocab,
                                        static_cast<int>(n_vocab), actual));
  }
  return true;
}

// Resident memory can shrink between two readings (freed pages); never report a negative cost.
uint64_t grown_by(uint64_t after, uint64_t before) { return after > before ? after - before : 0; }

ModelRun named_run(const std::string& name, const std::string& path) {
  ModelRun run;
  run.name = name;
  run.file = path;
  std::error_code ignored;
  run.memory.file_bytes = fs::file_size(path, ignored);
  return run;
}

}  // namespace

std::optional<QuantReport> run_quant(const QuantRunInputs& inputs, std::string* error) {
  QuantReport report;
  report.settings = inputs.settings;
  report.gates = inputs.gates;
  report.reference_quantized = inputs.reference_quantized;
  report.reference_type = inputs.reference_type;
  report.reference = named_run(fs::path(inputs.reference).stem().string(), inputs.reference);

  const size_t items = inputs.items.size();
  const size_t candidates = inputs.candidates.size();
  const int steps = static_cast<int>(items * (1 + candidates) + candidates);
  bench::ProgressDisplay progress(inputs.progress, "quant", steps, 0);
  bench::ProgressDisplay::mark_measured_start(progress.counters(), Clock::now());
  auto step_done = [&progress] { ++progress.counters().finished; };

  ScoringModel::initialize_backend();
  const uint64_t before_reference = resident_bytes();
  auto reference = load_model(inputs.reference, inputs.settings, error);
  if (!reference) return std::nullopt;
  report.reference.speed.load_ms = reference->load_ms();
  const auto prompts = prepare_prompts(*reference, inputs.items, inputs.settings.max_tokens, error);
  if (!prompts) return std::nullopt;
  std::vector<TokenList> reference_continuations;
  measure_model(*reference, inputs.items, *prompts, inputs.settings.concurrency,
                inputs.concurrent_tokens, &report.reference, &reference_continuations, step_done);
  report.reference.memory.rss_bytes = grown_by(resident_bytes(), before_reference);

  std::vector<ScoredSequence> sequences;
  if (!inputs.settings.divergence_text.empty()) {
    auto from_text = text_sequences(*reference, inputs.settings, inputs.text_chunks, error);
    if (!from_text) return std::nullopt;
    sequences = std::move(*from_text);
  } else {
    sequences = continuation_sequences(*prompts, reference_continuations);
  }

  ReferenceLogits reference_logits(*reference, sequences);
  for (const CandidateFile& file : inputs.candidates) {
    CandidateResult result;
    result.run = named_run(file.name, file.path);
    result.made_as = file.made_as;
    const uint64_t before_candidate = resident_bytes();
    auto candidate = load_model(file.path, inputs.settings, error);
    if (!candidate) return std::nullopt;
    if (!same_vocabulary(*reference, *candidate, file.name, error)) return std::nullopt;
    result.run.speed.load_ms = candidate->load_ms();
    std::vector<TokenList> ignored_continuations;
    measure_model(*candidate, inputs.items, *prompts, inputs.settings.concurrency,
                  inputs.concurrent_tokens, &result.run, &ignored_continuations, step_done);
    result.run.memory.rss_bytes = grown_by(resident_bytes(), before_candidate);
    DivergenceAccumulator accumulator;
    for (size_t i = 0; i < sequences.size(); ++i) {
      if (!accumulate_divergence(reference_logits, i, *candidate, sequences[i], &accumulator,
                                 error)) {
        return std::nullopt;
      }
    }
    step_done();
    result.divergence = accumulator.summary();
    result.tasks = compare_tasks(inputs.items, report.reference.answers, result.run.answers);
    judge_candidate(inputs.gates, /*perplexity_measured=*/true, &result);
    report.candidates.push_back(std::move(result));
  }
  progress.stop();
  report.verdict = choose_candidate(report.reference, report.candidates, inputs.settings.prefer);
  if (inputs.reference_quantized) {
    report.notes.push_back("the reference is itself quantized (" + inputs.reference_type +
                           "): quality is measured against it, not against the original weights");
  }
  report.notes.push_back(
      inputs.settings.divergence_text.empty()
          ? "divergence: teacher-forced over the reference's own greedy continuations of the "
            "dataset prompts"
          : "divergence: teacher-forced over --text, chunked as llama-perplexity --kl-divergence");
  return report;
}

}  // namespace brisk::quant
