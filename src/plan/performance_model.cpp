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

Efficiency Efficiency::defaults_for(const DeviceSpec& device) {
  if (device.is_gpu()) return {0.80, 0.55, 0.55, 1.0, 0.0, "default for a GPU (not calibrated)"};
  return {0.55, 0.30, 0.30, 0.5, 4.0, "default for a CPU (not calibrated)"};
}

StepCost Deployment::step(double decode_batch, double decode_context, double prefill_tokens,
                          double prefill_context) const {
  StepCost cost;
  const double tokens = decode_batch + prefill_tokens;
  // K/V heads split across devices; with fewer KV heads than devices they are replicated.
  const double kv_split = std::min<double>(devices, model.kv_heads);
  cost.weight_bytes = static_cast<double>(model.weight_bytes_read_per_step(precision)) / devices;
  cost.kv_bytes =
      (decode_batch * model.kv_bytes(decode_context, kv_bytes_per_element) +
       (prefill_tokens > 0 ? model.kv_bytes(prefill_context + prefill_tokens, kv_bytes_per_element)
                           : 0)) /
      kv_split;
  const double prefill_attention =
      prefill_tokens * model.attention_flops_per_token(prefill_context + prefill_tokens / 2);
  // Every token passes through the layers; only sampled positions (each decode, and a prompt's
  // last token) pass through the output head.
  const double head_parameters = static_cast<double>(model.hidden_size) * model.vocab_size;
  const double layer_flops_per_token = 2.0 * model.layers * model.layer_matmul_parameters();
  const double decode_flops = layer_flops_per_token * decode_batch +
                              2.0 * head_parameters * decode_batch +
                              decode_batch * model.attention_flops_per_token(decode_context);
  cost.prefill_flops = (prefill_tokens > 0 ? layer_flops_per_token * prefill_tokens +
                                                 2.0 * head_parameters + prefill_attention
                                           : 0.0) /
                       devices;
  cost.flops = decode_flops / devices + cost.prefill_flops;
  // Efficiencies come from the catalog or a calibration, which is a measurement and can be off
  // (a noisy run, a catalog spec below this machine's). The physical limits hold whatever it
  // says: no fraction above 1 (faster than the device's peak) and none at 0 (a division by
  // zero), no negative overhead.
  auto physical = [](double fraction) { return std::clamp(fraction, kMinEfficiency, 1.0); };
  const double bytes_per_ms = device->memory_bandwidth_gb_s * 1e6 * physical(efficiency.bandwidth);
  const double peak_flops_per_ms = precision.dense_tflops(*device) * 1e9;
  cost.memory_ms = (cost.weight_bytes + cost.kv_bytes) / bytes_per_ms;
  // Small decode batches and large prompt chunks run different kernels at different efficiency.
  cost.compute_ms =
      (cost.flops - cost.prefill_flops) / (peak_flops_per_ms * physical(efficiency.compute)) +
      cost.prefill_flops / (peak_flops_per_ms * physical(efficiency.prefill_compute));
  const double sampled_tokens = decode_batch + (prefill_tokens > 0 ? 1 : 0);
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

double Deployment::prefill_ms(int prompt_tokens) const {
  double total_ms = 0;
  for (int done = 0; done < prompt_tokens; done += step_token_budget) {
    const int chunk = std::min(step_token_budget, prompt_tokens - done);
    total_ms += step(0, 0, chunk, done).total_ms;
  }
  return total_ms;
}

int Deployment::prefill_chunks(int prompt_tokens, double decode_batch) const {
  const double room = std::max(1.0, step_token_budget - decode_batch);
  return static_cast<int>(std::ceil(prompt_tokens / room));
}

double Deployment::prefill_extra_ms(int prompt_tokens, double decode_batch,
                                    double decode_context) const {
  const double decode_only_ms = step(decode_batch, decode_context).total_ms;
  const int chunks = prefill_chunks(prompt_tokens, decode_batch);
  const double chunk = static_cast<double>(prompt_tokens) / chunks;
  double extra_ms = 0;
  for (int index = 0; index < chunks; ++index) {
    extra_ms += step(decode_batch, decode_context, chunk, index * chunk).total_ms - decode_only_ms;
  }
  return extra_ms;
}

}  // namespace brisk::plan
