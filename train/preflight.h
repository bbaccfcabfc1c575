// The memory pre-flight of a GPU run: before anything is allocated, the memory plan of the run's
// largest rank (plan/memory.h, the bytes the constructors will allocate) against the GPU's free
// memory. A run that will not fit stops with what it needs, what the GPU has, and the cheapest
// changes of its configuration that would fit: every valid combination of a higher ZeRO stage,
// recomputation and a smaller micro-batch (the global batch kept: more accumulation) whose plan
// fits, ranked by the step time the planner predicts for it (plan/step_time.h). Changes that need
// other GPUs (tp, pp, cp) are named last, unpriced: the GPU count is the job's.
// train.unsafe_skip_memory_check = true turns the stop into a warning.
#pragma once

#include <string>
#include <vector>

#include "plan/hardware_profile.h"
#include "train/run_config.h"

namespace dt {

struct MemoryRemedy {
  std::vector<std::string> changes;  // section.key=value, each a change of the configuration
  double bytes = 0;                  // the largest rank's plan with them
  double step_seconds = 0;           // the planner's step time with them
  int zero_stage = 0, micro_batch_size = 0;
  Recompute recompute = Recompute::none;
};

// The changes that fit in `available` bytes, cheapest first, at most `most`; none goes further
// than another that fits (a higher stage, more recomputation or a smaller micro-batch on a knob,
// no less on the others).
std::vector<MemoryRemedy> memory_remedies(const RunConfig& config, double available, const HardwareProfile& profile,
                                          size_t most = 3);

// Throws ConfigError when the run's plan does not fit in `available` bytes of `gpu` (its name),
// listing the remedies; with train.unsafe_skip_memory_check it returns the warning to print
// instead. Empty when the run fits.
std::string check_run_fits(const RunConfig& config, double available, const std::string& gpu,
                           const HardwareProfile& profile);

// The datasheet profile of a GPU by its name ("NVIDIA H100 80GB HBM3"), for ranking remedies;
// h100-sxm for one it does not know.
HardwareProfile profile_for_gpu(const std::string& gpu_name);

}  // namespace dt
