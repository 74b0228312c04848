#include "plan/performance_model.h"

#include <algorithm>
#include <cmath>

namespace brisk::plan {
namespace {

// Latency of one all-reduce on the link: NVLink-class links ~5 us, PCIe ~10 us (NCCL small
// message latencies); the bandwidth part is the ring's 2(N-1)/N of the message.
double allreduce_ms(const DeviceSpec& device, int devices, double bytes) {
  if (devices <= 1) return 0;
  const bool nvlink = device.interconnect.find("NVLink") != std::string::npos;
  const double latency_ms = nvlink ? 0.005 : 0.010;
  const double link_bytes_per_ms = std::max(device.interconnect_gb_s, 1.0) * 1e6;
  return latency_ms + 2.0 * (devices - 1) / devices * bytes / link_bytes_per_ms;
}

}  // namespace

double physical_efficiency(double fraction) { return std::clamp(fraction, kMinEfficiency, 1.0); }

Efficiency Efficiency::defaults_for(const DeviceSpec& device) {
  if (device.is_gpu())
    return {0.80, 0.55, 0.55, 1.0, 0.0, "default for a GPU (not calibrated)", {}, {}};
  return {0.55, 0.30, 0.30, 0.5, 4.0, "default for a CPU (not calibrated)", {}, {}};
}

StepCost Deployment::step(double decode_batch, double decode_context, double prefill_tokens,
                          double prefill_context) const {
  if (prefill_tokens <= 0) return step(decode_batch, decode_context, std::vector<PromptChunk>{});
  return step(decode_batch, decode_context, {PromptChunk{prefill_tokens, prefill_context}});
}

double Efficiency::decode_scale(double batch) const {
  if (decode_batch_scale.empty() || batch <= 0) return 1;
  if (batch <= decode_batch_scale.front().batch) return decode_batch_scale.front().scale;
  if (batch >= decode_batch_scale.back().batch) return decode_batch_scale.back().scale;
  for (size_t index = 1; index < decode_batch_scale.size(); ++index) {
    const BatchScale& low = decode_batch_scale[index - 1];
    const BatchScale& high = decode_batch_scale[index];
    if (batch <= high.batch) {
      const double where = std::log(batch / low.batch) / std::log(high.batch / low.batch);
      return low.scale + (high.scale - low.scale) * where;
    }
  }
  return decode_batch_scale.back().scale;
}

StepCost Deployment::step(double decode_batch, double decode_context,
                          const std::vector<PromptChunk>& prompts) const {
  StepCost cost = roofline_step(decode_batch, decode_context, prompts);
  const double scale = efficiency.decode_scale(decode_batch);
  if (decode_batch > 0 && scale != 1) {
    // The correction was measured on decode-only steps, so it scales their time; a prompt's
    // chunks add their roofline cost on top.
    const double decode_only_ms =
        prompts.empty() ? cost.total_ms : roofline_step(decode_batch, decode_context, {}).total_ms;
    cost.batch_correction_ms = (std::max(0.0, scale) - 1) * decode_only_ms;
    cost.total_ms += cost.batch_correction_ms;
  }
  return cost;
}

StepCost Deployment::roofline_step(double decode_batch, double decode_context,
                                   const std::vector<PromptChunk>& prompts) const {
  StepCost cost;
  double prefill_tokens = 0;
  double prompt_kv_bytes = 0;
  double prefill_attention = 0;
  int prompt_chunks = 0;
  for (const PromptChunk& chunk : prompts) {
    if (chunk.tokens <= 0) continue;
    ++prompt_chunks;
    prefill_tokens += chunk.tokens;
    prompt_kv_bytes += model.kv_bytes(chunk.context + chunk.tokens, kv_bytes_per_element);
    prefill_attention +=
        chunk.tokens * model.attention_flops_per_token(chunk.context + chunk.tokens / 2);
  }
  const double tokens = decode_batch + prefill_tokens;
  // K/V heads split across devices; with fewer KV heads than devices they are replicated.
  const double kv_split = std::min<double>(devices, model.kv_heads);
  cost.weight_bytes = static_cast<double>(model.weight_bytes_read_per_step(precision)) / devices;
  cost.kv_bytes =
      (decode_batch * model.kv_bytes(decode_context, kv_bytes_per_element) + prompt_kv_bytes) /
      kv_split;
  // Every token passes through the layers; only sampled positions (each decode, and each prompt
  // chunk's last token) pass through the output head.
  const double head_parameters = static_cast<double>(model.hidden_size) * model.vocab_size;
  const double layer_flops_per_token = 2.0 * model.layers * model.layer_matmul_parameters();
  const double decode_flops = layer_flops_per_token * decode_batch +
                              2.0 * head_parameters * decode_batch +
                              decode_batch * model.attention_flops_per_token(decode_context);
  cost.prefill_flops = (layer_flops_per_token * prefill_tokens +
                        2.0 * head_parameters * prompt_chunks + prefill_attention) /
                       devices;
  cost.flops = decode_flops / devices + cost.prefill_flops;
  // Efficiencies within physical limits (physical_efficiency), and no negative overhead.
  const double bytes_per_ms =
      device->memory_bandwidth_gb_s * 1e6 * physical_efficiency(efficiency.bandwidth);
  const double peak_flops_per_ms = precision.dense_tflops(*device) * 1e9;
  cost.memory_ms = (cost.weight_bytes + cost.kv_bytes) / bytes_per_ms;
  // Small decode batches and large prompt chunks run different kernels at different efficiency.
  cost.compute_ms =
      (cost.flops - cost.prefill_flops) /
          (peak_flops_per_ms * physical_efficiency(efficiency.compute)) +
      cost.prefill_flops / (peak_flops_per_ms * physical_efficiency(efficiency.prefill_compute));
  const double sampled_tokens = decode_batch + prompt_chunks;
  cost.overhead_ms =
      std::max(0.0, efficiency.step_overhead_ms) +
      sampled_tokens * model.vocab_size * std::max(0.0, efficiency.sample_ns_per_vocab_entry) / 1e6;
  // Two all-reduces per layer (after attention and after the MLP) of the step's activations.
  cost.interconnect_ms =
      2.0 * model.layers * allreduce_ms(*device, devices, tokens * model.hidden_size * 2.0);
  cost.total_ms =
      std::max(cost.memory_ms, cost.compute_ms) + cost.overhead_ms + cost.interconnect_ms;
  return cost;
}

double Deployment::prefill_ms(int prompt_tokens, int cached_tokens) const {
  const int first = std::clamp(cached_tokens, 0, std::max(0, prompt_tokens - 1));
  // brisk serve calls a prompt long by the tokens it has to prefill, not by its length.
  const bool long_prompt = chunking.is_long_prompt(prompt_tokens - first);
  double total_ms = 0;
  for (int done = first; done < prompt_tokens;) {
    double chunk = std::min(step_token_budget, prompt_tokens - done);
    if (long_prompt) chunk = alone_long_chunk_tokens(done, chunk);
    const int tokens = std::max(1, static_cast<int>(chunk));
    total_ms += step(0, 0, tokens, done).total_ms;
    done += tokens;
  }
  return total_ms;
}

int Deployment::prefill_chunks(int prompt_tokens, double decode_batch) const {
  const double room = std::max(1.0, step_token_budget - decode_batch);
  return static_cast<int>(std::ceil(prompt_tokens / room));
}

namespace {

// The largest chunk whose step takes at most `limit_ms`, at least kMinTimedChunkTokens and at
// most `room`. brisk serve learns what a prompt token adds to a step and converges on that
// chunk; a step's time grows with its chunk, so bisect for it.
template <typename StepMs>
double largest_chunk_within(const StepMs& step_ms, double limit_ms, double room) {
  const auto fits = [&](double tokens) { return step_ms(tokens) <= limit_ms; };
  double good = kMinTimedChunkTokens;
  double bad = std::floor(room) + 1;
  if (fits(bad - 1)) return room;
  if (!fits(good)) return good;
  while (bad - good > 1) {
    const double middle = std::floor((good + bad) / 2);
    (fits(middle) ? good : bad) = middle;
  }
  return good;
}

}  // namespace

double Deployment::timed_prefill_tokens(double decode_batch, double decode_context,
                                        double prompt_context, double room) const {
  const double target_ms = chunking.target_step_ms;
  if (target_ms <= 0 || decode_batch <= 0 || room <= kMinTimedChunkTokens) return room;
  return largest_chunk_within(
      [&](double tokens) {
        return step(decode_batch, decode_context, tokens, prompt_context).total_ms;
      },
      target_ms, room);
}

double Deployment::alone_long_chunk_tokens(double prompt_context, double room) const {
  const double target_ms = chunking.target_step_ms;
  if (target_ms <= 0 || room <= kMinTimedChunkTokens) return room;
  const double fixed_ms = step(1, prompt_context).total_ms;
  return largest_chunk_within(
      [&](double tokens) { return step(0, 0, tokens, prompt_context).total_ms; },
      std::max(target_ms, (1 + kMinAloneChunkOverFixedCost) * fixed_ms), room);
}

double Deployment::prefill_extra_ms(int prompt_tokens, double decode_batch, double decode_context,
                                    int cached_tokens) const {
  const int first = std::clamp(cached_tokens, 0, std::max(0, prompt_tokens - 1));
  const double decode_only_ms = step(decode_batch, decode_context).total_ms;
  const int chunks = prefill_chunks(prompt_tokens - first, decode_batch);
  const double chunk = static_cast<double>(prompt_tokens - first) / chunks;
  double extra_ms = 0;
  for (int index = 0; index < chunks; ++index) {
    extra_ms +=
        step(decode_batch, decode_context, chunk, first + index * chunk).total_ms - decode_only_ms;
  }
  return extra_ms;
}

const Efficiency::MeasuredSteps* Deployment::measured_steps() const {
  // Measured on one device; tensor parallelism is not.
  if (!simulate_server || devices != 1) return nullptr;
  const auto found = efficiency.measured_steps.find(model.name);
  return found == efficiency.measured_steps.end() || found->second.table.empty() ? nullptr
                                                                                 : &found->second;
}

}  // namespace brisk::plan
