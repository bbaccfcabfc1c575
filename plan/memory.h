// The memory one rank of a training run holds on its device, per tag, from the configuration
// alone — before anything is allocated. Every buffer's bytes come from the function its
// constructor also sizes it with: the model's flat buffers (Transformer::parameter_buffers and
// FlatTensors::held_bytes), the stage's activations (Stage::activation_bytes), the rotary tables,
// ZeRO's shards (DataParallel::shard_buffers) and AdamW's moments (AdamW::bytes_per_moment); so
// the prediction is what the constructors allocate, exactly. Beyond it, ZeRO 2 and 3 hold a few
// units of gradients (and at stage 3 of weights) during a pass: a bound, working_set.
// Not predicted: the communication backend's buffers and the kernels' scratch.
#pragma once

#include <array>
#include <cstddef>

#include "core/allocator.h"
#include "model/config.h"
#include "model/recompute.h"
#include "parallel/pipeline/schedule.h"

namespace dt {

struct MemoryPlan {
  std::array<size_t, kNumMemTags> bytes{};  // allocated when the run is built, per tag
  size_t working_set = 0;                   // ZeRO 2 and 3: held during a pass, at most
  size_t allocated() const;
  size_t total() const { return allocated() + working_set; }
};

// One rank's: micro-batches of batch_size x seq_len tokens under `recompute`, in `precision`,
// with ZeRO `zero_stage` over `dp_ranks` data-parallel ranks; with `tp_ranks` tensor-parallel
// ranks (and sequence parallelism when `sp`), and a pipeline `schedule` (none: one stage), the
// plan of the rank whose share is the largest. A pipeline rank's activations are each of its
// stages' kept activations times the micro-batches the schedule promises to hold at once, plus
// their shared and scratch regions: a bound (a stage's activation store grows to it).
MemoryPlan plan_memory(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute, DType precision,
                       int dp_ranks, int zero_stage, int tp_ranks = 1, bool sp = false,
                       const pipeline::Schedule* schedule = nullptr);

// Before a GPU run allocates: the plan's total against the GPU's free memory; the error names
// every figure and the fixes (a higher ZeRO stage, recomputation, bf16, smaller micro-batches).
void check_fits_on_gpu(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute, DType precision,
                       int dp_ranks, int zero_stage, int tp_ranks = 1, bool sp = false,
                       const pipeline::Schedule* schedule = nullptr);

}  // namespace dt
