// `dtrain plan --search`: every layout of a run configuration's model and global batch over a
// number of GPUs — dp, tp (within a node), pp (at most the blocks), cp, the
// pipeline schedule (1f1b, interleaved over 2 virtual stages, zb-h1), the micro-batch size, the
// ZeRO stage, recomputation and sequence parallelism — that load_run_config's own checks accept
// (run_config_valid), each with its memory plan (run_memory_plan) and predicted step
// (plan/step_time.h); those that fit the profile's memory, fastest first.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/hardware_profile.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "train/run_config.h"

namespace dt {

struct LayoutCandidate {
  RunConfig config;  // the configuration with this layout
  MemoryPlan memory;
  StepTime time;
};

struct LayoutSearch {
  int64_t considered = 0;  // combinations enumerated
  int64_t valid = 0;       // of those, layouts the configuration checks accept
  // Valid layouts whose memory fits, fastest first; of those the model times alike (within
  // 0.5%), the simpler first: a lower ZeRO stage, less recomputation, no sequence parallelism,
  // larger micro-batches. Each layout once, at its best micro-batch size.
  std::vector<LayoutCandidate> fitting;
};

LayoutSearch search_layouts(const RunConfig& base, int gpus, const HardwareProfile& profile, int gpus_per_node);

// When no layout of `gpus` fits: the smallest count of 2^k x gpus GPUs (k up to 10) on which the
// leanest layouts (the most sharding ZeRO stage each allows, full recomputation, micro-batches
// of one) fit; 0 when none does.
int smallest_fitting_gpus(const RunConfig& base, int gpus, const HardwareProfile& profile, int gpus_per_node);

}  // namespace dt
