#include "train/preflight.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/error.h"
#include "parallel/zero_policy.h"
#include "plan/step_time.h"

namespace dt {
namespace {

double step_seconds(const RunConfig& config, const HardwareProfile& profile) {
  return predict_step_time(config.model, run_step_layout(config, profile.gpus_per_node), profile).total;
}

// Whether `a` changes no knob further than `b` does, and is not b: b goes further than it needs.
bool goes_no_further(const MemoryRemedy& a, const MemoryRemedy& b) {
  const bool no_further = a.zero_stage <= b.zero_stage && a.recompute <= b.recompute &&
                          a.micro_batch_size >= b.micro_batch_size;
  return no_further && a.changes != b.changes;
}

std::string describe(const std::vector<MemoryRemedy>& remedies, double baseline_seconds) {
  std::string text;
  for (size_t i = 0; i < remedies.size(); ++i) {
    const MemoryRemedy& r = remedies[i];
    std::string changes;
    for (const std::string& c : r.changes) changes += str(changes.empty() ? "" : " and ", c);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", r.step_seconds / baseline_seconds);
    text += str(i == 0 ? "" : i + 1 == remedies.size() ? " or " : ", ", changes, " (", format_bytes(r.bytes),
                ", step time x", ratio, ")");
  }
  return text;
}

}  // namespace

std::vector<MemoryRemedy> memory_remedies(const RunConfig& config, double available, const HardwareProfile& profile,
                                          size_t most) {
  const int micro = config.train.micro_batch_size, replicas = config.dims().dp * config.dims().cp;
  std::vector<int> micro_batches;  // the micro-batch sizes that divide the step, largest first
  for (int m = micro; m >= 1; --m)
    if (micro % m == 0) micro_batches.push_back(m);
  std::vector<MemoryRemedy> fitting;
  const int top_stage = ZeroPolicy::stages_differ(replicas) ? ZeroPolicy::kHighestStage : config.parallel.zero_stage;
  for (int stage = config.parallel.zero_stage; stage <= top_stage; ++stage)
    for (int r = static_cast<int>(config.train.recompute); r <= static_cast<int>(Recompute::full); ++r)
      for (const int m : micro_batches) {
        RunConfig c = config;
        c.parallel.zero_stage = stage;
        c.train.recompute = static_cast<Recompute>(r);
        c.train.micro_batch_size = m;
        MemoryRemedy remedy{.changes = {}, .zero_stage = stage, .micro_batch_size = m, .recompute = c.train.recompute};
        if (stage != config.parallel.zero_stage) remedy.changes.push_back(str("parallel.zero_stage=", stage));
        if (c.train.recompute != config.train.recompute)
          remedy.changes.push_back(str("train.recompute=\"", recompute_name(c.train.recompute), "\""));
        if (m != micro) remedy.changes.push_back(str("train.micro_batch_size=", m));
        if (remedy.changes.empty() || !run_config_valid(c)) continue;
        remedy.bytes = static_cast<double>(run_memory_plan(c).total());
        if (remedy.bytes > available) continue;
        remedy.step_seconds = step_seconds(c, profile);
        fitting.push_back(remedy);
      }
  // A remedy that goes further than another that fits is not a fix to name.
  std::vector<MemoryRemedy> minimal;
  for (const MemoryRemedy& r : fitting)
    if (std::none_of(fitting.begin(), fitting.end(), [&](const MemoryRemedy& o) { return goes_no_further(o, r); }))
      minimal.push_back(r);
  std::sort(minimal.begin(), minimal.end(),
            [](const MemoryRemedy& a, const MemoryRemedy& b) { return a.step_seconds < b.step_seconds; });
  if (minimal.size() > most) minimal.resize(most);
  return minimal;
}

std::string check_run_fits(const RunConfig& config, double available, const std::string& gpu,
                           const HardwareProfile& profile) {
  const double needed = static_cast<double>(run_memory_plan(config).total());
  if (needed <= available) return "";
  const std::string shortfall =
      str("this run needs ", format_bytes(needed), " of GPU memory on its largest rank (parameters, gradients, "
          "AdamW's state and activations, as `dtrain plan` itemizes them) and the ", gpu, " has ",
          format_bytes(available), " free");
  if (config.train.unsafe_skip_memory_check)
    return str("warning: ", shortfall, "; running anyway (train.unsafe_skip_memory_check = true): it may run out of "
               "memory mid-step");
  const std::vector<MemoryRemedy> remedies = memory_remedies(config, available, profile);
  const std::string more_gpus = "more GPUs with parallel.tp, parallel.pp or parallel.cp (the job's GPU count)";
  if (remedies.empty())
    throw ConfigError(str(shortfall, "; no higher parallel.zero_stage, train.recompute or smaller "
                                     "train.micro_batch_size fits: use ",
                          more_gpus, ", or set train.unsafe_skip_memory_check = true to try anyway"));
  throw ConfigError(str(shortfall, "; what would fit, cheapest first by the step time the planner predicts on ",
                        profile.name, ": ", describe(remedies, step_seconds(config, profile)), "; or use ",
                        more_gpus, "; or set train.unsafe_skip_memory_check = true to try anyway"));
}

HardwareProfile profile_for_gpu(const std::string& gpu_name) {
  for (const auto& [part, profile] : {std::pair{"H200", "h200"}, std::pair{"H100", "h100-sxm"},
                                      std::pair{"A100", "a100-80gb"}})
    if (gpu_name.find(part) != std::string::npos) return load_hardware_profile(profile);
  return load_hardware_profile("h100-sxm");
}

}  // namespace dt
