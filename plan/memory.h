// The memory one rank of a training run holds on its device, per tag, from the configuration
// alone — before anything is allocated. Every buffer's bytes come from the function its
// constructor also sizes it with: the model's flat buffers (Transformer::parameter_buffers and
// FlatTensors::held_bytes), the stage's activations (Stage::activation_bytes), the rotary tables,
// ZeRO's shards (ZeroPolicy::shard_buffers) and AdamW's moments (AdamW::bytes_per_moment); so
// the prediction is what the constructors allocate, exactly. Beside them during a step: ZeRO's
// units of gradients, their staging and gathered weights (ZeroHooks::working_set runs the run's
// own hooks over the stage's hook calls, Stage::unit_hook_calls), tensor parallelism's staging
// (TensorParallel::communication_bytes) and the pipeline's boundary tensors (pipeline::boundary_buffers); and what an MPI backend
// keeps of each group's all-reduces. train/run_config.h's run_memory_plan adds what the trainer
// holds, a CPU run's kernel scratch (cpu_kernel_scratch_bytes) and ring attention's buffers.
// Not predicted: a GPU's kernel scratch.
#pragma once

#include <array>
#include <cstddef>
#include <optional>

#include "core/allocator.h"
#include "model/qat_recipe.h"
#include "model/config.h"
#include "model/float8_recipe.h"
#include "model/recompute.h"
#include "model/tensor_shard.h"
#include "parallel/pipeline/schedule.h"

namespace dt {

struct MemoryPlan {
  std::array<size_t, kNumMemTags> bytes{};        // allocated when the run is built, per tag
  std::array<size_t, kNumMemTags> during_step{};  // held beside them during a step, at most
  // The result buffers an MPI backend keeps of this rank's all-reduces, one per group at the
  // size of its largest (comm/mpi_communicator.cpp): host memory, the device's on a CPU run.
  size_t mpi_kept_results = 0;
  // What an asynchronous checkpoint save stages (train/checkpoint_saver.h), host memory held for
  // the whole run: a rank's share of a checkpoint (train/training_checkpoint.h's
  // checkpoint_share), by which ranks write it.
  struct CheckpointStaging {
    size_t parts = 0;    // every rank: its parts of the buffers ZeRO shards
    size_t dense = 0;    // rank 0 of dp × cp: the rest of the buffers held whole, and on tp rank 0
                         // the per-linear states
    size_t experts = 0;  // rank 0 of the ranks holding the same experts: theirs of the buffers held whole
    size_t of(bool dp_lead, bool experts_lead) const {
      return parts + (dp_lead ? dense : 0) + (experts_lead ? experts : 0);
    }
  } checkpoint_staging;
  size_t peak(MemTag tag) const { return bytes[static_cast<size_t>(tag)] + during_step[static_cast<size_t>(tag)]; }
  size_t allocated() const;
  size_t total() const;  // every tag's peak, added
};

// One rank's: steps of `micro_batches` (a schedule's own) of batch_size x seq_len tokens under
// `recompute`, in `precision`, with ZeRO `zero_stage` over `dp_ranks` data-parallel ranks; with
// `tp_ranks` tensor-parallel ranks (and sequence parallelism when `sp`), a pipeline `schedule`
// (none: one stage) and the experts over `ep_ranks` of the dp ranks, the plan of the rank whose
// share is the largest. Under expert parallelism the experts' activations are sized for the most
// rows a rank's experts can receive (MoeConfig::received_rows): dropless, every rank's rows. A pipeline
// rank's activations are each of its stages' kept activations times the micro-batches that
// stage holds at once under the schedule (pipeline::stage_in_flight, to which its activation
// store grows), plus their shared and scratch regions.
// `fp8`: FP8 training's recipe, whose per-linear state (delayed scaling's histories and scales)
// is counted with the parameters.
MemoryPlan plan_memory(const ModelConfig& config, int batch_size, int seq_len, int micro_batches, Recompute recompute,
                       DType precision, int dp_ranks, int zero_stage, int tp_ranks = 1, bool sp = false,
                       const pipeline::Schedule* schedule = nullptr, int ep_ranks = 1, const Float8Recipe& fp8 = {});

// The plan of one rank: tensor-parallel rank `shard` of pipeline rank `pp_rank` under `schedule`
// (none: one stage, pp_rank 0), holding expert-parallel rank `experts`'s experts.
MemoryPlan plan_rank_memory(const ModelConfig& config, int batch_size, int seq_len, int micro_batches,
                            Recompute recompute, DType precision, int dp_ranks, int zero_stage, TensorShard shard,
                            bool sp, const pipeline::Schedule* schedule, int pp_rank, ExpertShard experts = {},
                            const Float8Recipe& fp8 = {});

// The most workspace one FP8 product of a step holds (train.fp8, model/float8_recipe.h): its
// quantized operands (float8_operand_bytes) and, on the CPU (`cpu`), the emulation's f32 copies
// (kernels::cpu::float8_linear_scratch_bytes), over the linear layers FP8 quantizes and their
// `batch_size` x `seq_len` rows; an experts' layer over its rows' bound (MoeConfig::expert_rows,
// or received_rows under expert parallelism), each of its products over one segment's rows at
// most (one rank's for one expert; blockwise, every rank's). Nothing without a recipe. Held at a moment of the step when no other kernel's scratch is.
size_t float8_workspace_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                              TensorShard shard, ExpertShard experts, const Float8Recipe& fp8, bool cpu);

// The most workspace one linear product of a step holds under quantization-aware training
// (train.qat, model/layers.h's LinearProduct): the weight's fake-quantized copy in `precision`,
// with the recipe's activations the input's too, and beside them the widened f32 values a 16-bit
// tensor is quantized in, or the CPU kernel's scratch (kernels/cpu/linear_scratch.h), over the
// rank's linear layers and, where it holds the `head` and the embeddings are untied, the output
// projection. Nothing without a recipe.
size_t qat_workspace_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision, TensorShard shard,
                           std::optional<QatRecipe> qat, bool head);

// The most scratch one of the CPU kernels of a step allocates for `threads` threads: attention's
// per-thread tiles (kernels/attention.h), a norm backward's row-block partials, or a 16-bit linear
// layer's widened operands where the processor has no bf16 units (kernels/cpu/linear_scratch.h;
// the output projection's where the rank holds the `head`). A CPU run holds it beside the plan's
// workspace at some moment of each step. With `ring_attention` (context parallelism) attention
// runs in blocks whose buffers and kernels' scratch RingAttention::call_bytes gives. (A GPU's
// kernels' scratch, cuDNN's workspace, is known only once its graph is built: not counted.)
size_t cpu_kernel_scratch_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                                TensorShard shard, bool sp, bool ring_attention, bool head, int threads);

// Before a GPU run of one micro-batch a step (or a schedule's) allocates: the plan's total
// against the GPU's free memory; the error names
// every figure and the fixes (a higher ZeRO stage, recomputation, bf16, smaller micro-batches).
void check_fits_on_gpu(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute, DType precision,
                       int dp_ranks, int zero_stage, int tp_ranks = 1, bool sp = false,
                       const pipeline::Schedule* schedule = nullptr);

}  // namespace dt
