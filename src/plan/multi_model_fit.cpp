#include "plan/multi_model_fit.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace brisk::plan {
namespace {

int sequence_tokens(const Workload& workload) {
  return workload.input_tokens + workload.output_tokens;
}

// One device type for all the models: each model's memory and step alone, then whole models
// packed onto devices.
ModelsOnDevice fit_on(const std::vector<PlanRequest>& requests, const DeviceSpec& device) {
  ModelsOnDevice fit;
  fit.device = &device;
  const int largest_group =
      device.is_gpu() ? std::min(device.max_per_node, requests.front().max_devices) : 1;
  std::vector<double> model_gb;  // what each model takes of its device(s), runtime excluded
  double runtime_gb = 0;
  for (const PlanRequest& request : requests) {
    const int users = std::max(1, request.workload.concurrency);
    const int tokens = sequence_tokens(request.workload);
    // The fewest devices (1, 2, 4, ...) whose memory holds the model at this load.
    int devices = 1;
    Deployment deployment = deployment_for(request, device, devices);
    MemoryBreakdown memory = memory_for(deployment, users, tokens, request.headroom);
    while (!memory.fits && devices * 2 <= largest_group) {
      devices *= 2;
      deployment = deployment_for(request, device, devices);
      memory = memory_for(deployment, users, tokens, request.headroom);
    }
    fit.memory.push_back(memory);
    fit.own_devices.push_back(memory.fits ? devices : 0);
    fit.usable_gb = memory.usable_gb;
    runtime_gb = memory.runtime_gb;
    model_gb.push_back(memory.total_gb - memory.runtime_gb);
    fit.step_ms.push_back(
        deployment.step(users, request.workload.input_tokens + request.workload.output_tokens / 2.0)
            .total_ms);
  }
  fit.total_gb = std::accumulate(model_gb.begin(), model_gb.end(), 0.0) + runtime_gb;
  if (std::find(fit.own_devices.begin(), fit.own_devices.end(), 0) != fit.own_devices.end()) {
    return fit;  // a model fits no group of these devices: devices stays 0
  }
  // Largest first, each into the first device with room beside the runtime; a model split over
  // several devices takes them alone.
  std::vector<int> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return model_gb[a] > model_gb[b]; });
  std::vector<double> used;
  for (int model : order) {
    if (fit.own_devices[model] > 1) {
      for (int i = 0; i < fit.own_devices[model]; ++i) {
        fit.placement.push_back({model});
        used.push_back(fit.usable_gb);
      }
      continue;
    }
    bool placed = false;
    for (size_t d = 0; d < fit.placement.size() && !placed; ++d) {
      if (used[d] + model_gb[model] <= fit.usable_gb) {
        fit.placement[d].push_back(model);
        used[d] += model_gb[model];
        placed = true;
      }
    }
    if (!placed) {
      fit.placement.push_back({model});
      used.push_back(runtime_gb + model_gb[model]);
    }
  }
  fit.devices = static_cast<int>(fit.placement.size());
  fit.usd_per_hour = fit.devices * device.usd_per_hour;
  for (const auto& on_device : fit.placement) {
    double sum = 0;
    for (int model : on_device) sum += fit.step_ms[model];
    fit.shared_itl_ms = std::max(fit.shared_itl_ms, sum);
  }
  return fit;
}

std::string model_name(const PlanRequest& request) {
  return request.model.name.empty() ? request.model.id : request.model.name;
}

}  // namespace

MultiModelFit fit_models(const std::vector<PlanRequest>& requests, const HardwareCatalog& catalog) {
  MultiModelFit out;
  const std::vector<std::string>& wanted = requests.front().devices;
  for (const DeviceSpec& device : catalog.devices()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), device.id) == wanted.end()) {
      continue;
    }
    out.devices.push_back(fit_on(requests, device));
  }
  std::stable_sort(out.devices.begin(), out.devices.end(),
                   [](const ModelsOnDevice& a, const ModelsOnDevice& b) {
                     if ((a.devices > 0) != (b.devices > 0)) return a.devices > 0;
                     if (a.usd_per_hour != b.usd_per_hour) return a.usd_per_hour < b.usd_per_hour;
                     return a.devices < b.devices;
                   });
  for (size_t i = 0; i < out.devices.size(); ++i) {
    if (out.devices[i].devices > 0 && out.devices[i].usd_per_hour > 0) {
      out.recommended = i;
      break;
    }
  }
  return out;
}

void print_multi_model_fit(std::ostream& out, const std::vector<PlanRequest>& requests,
                           const MultiModelFit& fit) {
  const Workload& workload = requests.front().workload;
  fmt::print(out, "{} models side by side, each at {} concurrent requests of {} + {} tokens:\n",
             requests.size(), std::max(1, workload.concurrency), workload.input_tokens,
             workload.output_tokens);
  for (const PlanRequest& request : requests) {
    fmt::print(out, "  {} ({}, {})\n", model_name(request), request.precision.name,
               request.model.origin);
  }
  fmt::print(out, "\n{:<16} {:>10} {:>10} {:>8} {:>10} {:>14}  {}\n", "device", "models GB",
             "usable GB", "devices", "$/hour", "shared ITL ms", "placement");
  for (const ModelsOnDevice& device : fit.devices) {
    std::string placement;
    if (device.devices == 0) {
      for (size_t i = 0; i < requests.size(); ++i) {
        if (device.own_devices[i] == 0) {
          placement = fmt::format("{} fits no group of these ({:.1f} GB at this load)",
                                  model_name(requests[i]), device.memory[i].total_gb);
          break;
        }
      }
    } else {
      for (const auto& on_device : device.placement) {
        std::string names;
        for (int model : on_device) {
          names += (names.empty() ? "" : "+") + model_name(requests[static_cast<size_t>(model)]);
        }
        placement += (placement.empty() ? "[" : " [") + names + "]";
      }
    }
    fmt::print(out, "{:<16} {:>10.2f} {:>10.1f} {:>8} {:>10} {:>14}  {}\n", device.device->id,
               device.total_gb, device.usable_gb,
               device.devices > 0 ? std::to_string(device.devices) : "-",
               device.device->usd_per_hour > 0 ? fmt::format("{:.2f}", device.usd_per_hour) : "-",
               device.devices > 0 ? fmt::format("{:.1f}", device.shared_itl_ms) : "-", placement);
  }
  if (fit.recommended) {
    const ModelsOnDevice& best = fit.devices[*fit.recommended];
    fmt::print(out,
               "\nCheapest: {} × {} (${:.2f}/hour). Models that share a device take turns step "
               "by step in brisk serve: while all are busy, a token gap is the sum of their "
               "steps ({:.1f} ms); mark the one that must stay fast `critical = true` "
               "(docs/models.md).\n",
               best.devices, best.device->id, best.usd_per_hour, best.shared_itl_ms);
    double largest = 0;  // the fullest device of the placement, runtime included
    for (const auto& on_device : best.placement) {
      double sum = best.memory[static_cast<size_t>(on_device.front())].runtime_gb;
      for (int model : on_device) {
        const MemoryBreakdown& memory = best.memory[static_cast<size_t>(model)];
        sum += memory.total_gb - memory.runtime_gb;
      }
      largest = std::max(largest, sum);
    }
    fmt::print(out,
               "Its fullest device holds {:.1f} GB of {:.1f} GB usable ({:.0f}% of the memory "
               "kept free); one brisk serve per device serves that device's models.\n",
               largest, best.usable_gb, requests.front().headroom * 100);
  }
}

nlohmann::json multi_model_fit_json(const std::vector<PlanRequest>& requests,
                                    const MultiModelFit& fit) {
  using nlohmann::json;
  json models = json::array();
  for (const PlanRequest& request : requests) {
    models.push_back({{"model", model_name(request)},
                      {"precision", request.precision.name},
                      {"origin", request.model.origin}});
  }
  json devices = json::array();
  for (const ModelsOnDevice& device : fit.devices) {
    json per_model = json::array();
    for (size_t i = 0; i < requests.size(); ++i) {
      const MemoryBreakdown& memory = device.memory[i];
      per_model.push_back({{"model", model_name(requests[i])},
                           {"weights_gb", memory.weights_gb},
                           {"kv_cache_gb", memory.kv_cache_gb},
                           {"activations_gb", memory.activations_gb},
                           {"own_devices", device.own_devices[i]},
                           {"step_ms", device.step_ms[i]}});
    }
    devices.push_back({{"device", device.device->id},
                       {"models", per_model},
                       {"total_gb", device.total_gb},
                       {"usable_gb", device.usable_gb},
                       {"devices", device.devices},
                       {"placement", device.placement},
                       {"usd_per_hour", device.usd_per_hour},
                       {"shared_itl_ms", device.shared_itl_ms}});
  }
  const Workload& workload = requests.front().workload;
  return {{"models", models},
          {"workload",
           {{"input_tokens", workload.input_tokens},
            {"output_tokens", workload.output_tokens},
            {"concurrency", std::max(1, workload.concurrency)}}},
          {"devices", devices},
          {"recommended", fit.recommended ? json(fit.devices[*fit.recommended].device->id)
                                          : json(nullptr)}};
}

}  // namespace brisk::plan
