// How long one training step takes, predicted from the model, a layout of ranks and a hardware
// profile (plan/hardware_profile.h) alone, term by term, so that each can be checked against a
// measurement (dtrain bench step, the trace's compute and communication spans).
//
// On a rank, per micro-batch and block (t tokens: micro_batch × seq_len / cp):
//   GEMMs        each of the block's linears (the fused qkv, the output projection, the MLP's
//                two) forward, and twice backward (input and weight gradients), at the
//                roofline: max(FLOPs / (peak × efficiency.gemm), bytes / (bandwidth ×
//                efficiency.memory)), bytes its two operands and its result once each. Small or
//                thin products (few tokens, a narrow tp shard) fall to the memory side.
//   attention    the causal core (model/flops.h), forward and backward (2.5 forward: flash
//                attention recomputes the scores), at peak × efficiency.attention. For an engine
//                without fused attention (fused_attention = false: Megatron-LM's 2021 runs), the
//                scores are GEMMs over every key (twice the causal FLOPs, backward twice forward)
//                at peak × efficiency.gemm, and the 5·a·s bytes per position they keep (softmax
//                output, dropout output and mask; Korthikanti et al.) are streamed like the
//                block's other activations.
//   streaming    the norms, activations, residual adds, rotary and bias passes: four passes over
//                the activations the block keeps (model/stage.h's own count, per tensor-parallel
//                rank and sequence-parallel split): forward reads inputs and writes each kept
//                tensor, backward reads it and writes its gradient. At bandwidth × efficiency.memory.
//   recompute    selective repeats the attention core's forward, full the whole block's forward.
//   FP8          with train.fp8, the linears FP8 quantizes (model/float8_recipe.h: not the head,
//                the router or the shared expert's gate) run at the profile's FP8 peak, their
//                operands 1 byte an element, and each product first quantizes its two operands:
//                one streaming pass reading the 16-bit tensor and writing its bytes (two reads for
//                tensorwise, whose amax is a pass of its own).
//   tp           per block forward 2 all-reduces of the block's activations (t × C), or under
//                sequence parallelism 2 all-gathers and 2 reduce-scatters, as much backward and
//                again in a recomputed forward; on the critical path (collective_time.h).
//   cp           the ring passes key/value blocks cp − 1 times forward and, with their
//                gradients, twice as much backward; what the attention compute does not cover.
// The head adds its projection (GEMM roofline) and the fused classifier's two passes over the
// logits. A step runs `micro_batches` of them through the pipeline schedule, replayed with these
// pass times (parallel/pipeline/schedule_check.h), which gives the bubble; without a pipeline,
// micro_batches × (forward + backward). Then:
//   pipeline     per micro-batch boundary 2 messages (activations forward, their gradient back)
//                on the critical path only while the pipeline fills and drains: 2 (pp − 1).
//   dp           the gradients' reduction over dp × cp (all-reduce at ZeRO 0, reduce-scatter
//                above) overlaps the last micro-batch's backward; what is left shows, as does
//                ZeRO 1 and 2's all-gather of the updated 16-bit weights; ZeRO 3 gathers the
//                weights before each forward and backward, behind the compute where it can.
//   optimizer    AdamW over the rank's parameters (its shard above ZeRO 0): f32 master, gradient
//                and two moments read, three written, and the 16-bit copy written.
// Model FLOPs (train/throughput.h) over the step time and the job's GPUs give TFLOP/s per GPU
// and MFU against the profile's peak in the run's precision (bf16's with FP8, as torchtitan counts
// it); hardware FLOPs add what recomputation repeats, the figure Megatron-LM publishes.
#pragma once

#include <string>

#include "core/dtype.h"
#include "model/config.h"
#include "model/float8_recipe.h"
#include "model/recompute.h"
#include "plan/hardware_profile.h"

namespace dt {

struct StepLayout {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int ep = 1;  // the experts over ep of the dp × cp ranks
  bool sp = false;
  int zero_stage = 0;
  std::string schedule = "1f1b";  // with pp > 1 (parallel/pipeline/schedule.h)
  int pp_virtual = 1;
  int micro_batch = 1;     // sequences per micro-batch
  int micro_batches = 1;   // per step on each data-parallel rank
  int seq_len = 1024;
  Recompute recompute = Recompute::none;
  DType precision = DType::bf16;
  Float8Scaling fp8 = Float8Scaling::none;  // FP8 training's recipe (train.fp8)
  int gpus_per_node = 8;
  bool fused_attention = true;  // dtrain's (flash attention); false: the scores materialized

  int gpus() const { return dp * tp * pp * cp; }
  int64_t global_batch() const { return int64_t{dp} * micro_batch * micro_batches; }  // sequences
};

struct StepTime {
  // Seconds of one step on the slowest rank, by term; compute terms summed over the rank's
  // micro-batches.
  double gemm = 0, attention = 0, streaming = 0;  // the blocks' and the head's compute
  double tensor_parallel = 0, context_parallel = 0, expert_parallel = 0;
  double bubble = 0;             // pipeline idle time, from the schedule's replay
  double pipeline_transfers = 0;
  double data_parallel = 0;      // the part the backward does not hide
  double optimizer = 0;
  double total = 0;

  double model_flops = 0, hardware_flops = 0;  // the whole job's, per step
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0;
  double mfu = 0;  // model FLOPs against the profile's dense peak in the run's precision
};

// Throws dt::Error naming the problem when the layout cannot run the model (more tensor-parallel
// ranks than heads, more pipeline stages than blocks, an unknown schedule). A tp that does not
// divide the heads or the MLP is timed on its busiest rank, the first.
StepTime predict_step_time(const ModelConfig& model, const StepLayout& layout, const HardwareProfile& profile);

}  // namespace dt
