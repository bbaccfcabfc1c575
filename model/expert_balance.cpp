#include "model/expert_balance.h"

#include <algorithm>
#include <numeric>

#include "core/device.h"
#include "model/transformer.h"

namespace dt {

namespace {

constexpr const char* kBiasState = "expert_bias";

// rate · sign(mean − load) added to each bias, in f32 on the host.
void move_bias(Tensor bias, const std::vector<double>& loads, float rate) {
  std::vector<float> values(loads.size());
  copy_bytes(values.data(), Device::cpu, bias.data, bias.device, bias.bytes());
  const double mean = std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(loads.size());
  for (size_t e = 0; e < loads.size(); ++e)
    values[e] += loads[e] < mean ? rate : loads[e] > mean ? -rate : 0.0f;
  copy_bytes(bias.data, bias.device, values.data(), Device::cpu, bias.bytes());
}

}  // namespace

std::vector<LinearStateDeclaration> with_model_states(const ModelConfig& config,
                                                      std::vector<LinearStateDeclaration> declared) {
  if (config.moe.experts > 0 && config.moe.bias_update_rate > 0)
    declared.push_back({.name = kBiasState, .count = config.moe.experts, .linears = {"mlp.router"}, .initial = 0});
  return declared;
}

double ExpertStats::dropped_fraction() const {
  const double total = std::accumulate(assignments.begin(), assignments.end(), 0.0);
  return total == 0 ? 0 : dropped / total;
}

double ExpertStats::imbalance() const {
  const double total = std::accumulate(assignments.begin(), assignments.end(), 0.0);
  if (total == 0) return 1;
  return *std::ranges::max_element(assignments) * static_cast<double>(assignments.size()) / total;
}

std::vector<ExpertStats> end_step_expert_balance(Transformer& model, Communicator* replicas, bool applied,
                                                 int64_t targets) {
  std::vector<ExpertStats> stats;
  // Per block: its E loads, the dropped ones, then its two losses.
  std::vector<double> flat;
  for (Stage* stage : model.stages()) {
    if (stage == nullptr) continue;
    for (size_t i = 0; i < stage->blocks().size(); ++i) {
      const ExpertRecord& counted = stage->expert_record(i);
      if (counted.loads.empty()) continue;
      stats.push_back({.layer = stage->blocks()[i].layer()});
      flat.insert(flat.end(), counted.loads.begin(), counted.loads.end());
      flat.push_back(static_cast<double>(counted.dropped));
      flat.push_back(counted.aux_loss);
      flat.push_back(counted.z_loss);
    }
    stage->reset_expert_records();
  }
  if (replicas != nullptr) all_reduce_values(*replicas, flat, ReduceOp::sum);
  const size_t E = static_cast<size_t>(model.config().moe.experts);
  const float rate = applied ? model.config().moe.bias_update_rate : 0.0f;
  for (size_t b = 0; b < stats.size(); ++b) {
    const auto block = flat.begin() + static_cast<std::ptrdiff_t>(b * (E + 3));
    const auto after = block + static_cast<std::ptrdiff_t>(E);
    stats[b].assignments.assign(block, after);
    stats[b].dropped = after[0];
    stats[b].aux_loss = after[1] / static_cast<double>(targets);
    stats[b].z_loss = after[2] / static_cast<double>(targets);
    if (rate > 0) move_bias(model.linear_states().find(stats[b].layer, "mlp.router", kBiasState), stats[b].assignments, rate);
  }
  return stats;
}

}  // namespace dt
