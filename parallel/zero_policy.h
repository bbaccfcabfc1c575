// ZeRO (Rajbhandari et al., 2020) as one value: what a stage shards over the ranks that hold
// the model's replicas (the dp × cp group), and what follows from it — how the model stores its
// buffers, how and when the gradients are summed, when the weights are gathered, and whether
// pipeline stages can run. Data parallelism acts on it (parallel/data_parallel.h, its unit hooks
// parallel/zero_hooks.h), the planner counts by it (plan/memory.h, plan/step_time.h),
// checkpoints save by it (train/training_checkpoint.h) and the run's checks refuse what it
// cannot run (train/run_config.h). Only ZeroPolicy::of decides anything by the stage's number.
//
// Each stage shards what the one below does, and one thing more (docs/parallelism.md#zero
// describes how each runs and measures what it holds):
//   0  nothing: every rank keeps the whole model states.
//   1  the optimizer state, over the layout's units (model/parameters.h) padded into equal
//      parts, rank r owning part r of each.
//   2  the gradients: each unit's is held only until its reduce-scatter completes, so every
//      micro-batch reduces.
//   3  the weights forward reads: each unit's is gathered before a pass reads it and freed after.
// With 16-bit weights the f32 master weights exist only as this rank's parts, at every stage
// above 0 (tagged optimizer_state, as the paper counts them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "model/parameters.h"

namespace dt {

struct ZeroPolicy {
  static constexpr int kHighestStage = 3;
  // Whether `stage` is one (0 to kHighestStage).
  static bool exists(int stage) { return stage >= 0 && stage <= kHighestStage; }
  // ZeRO shards over the dp × cp replicas: with one, every stage is the same layout.
  static bool stages_differ(int replicas) { return replicas > 1; }
  // Stage `stage`, which must exist, of a model whose weights forward reads are in `precision`,
  // over `ranks` ranks.
  static ZeroPolicy of(int stage, DType precision, int ranks);

  int stage = 0;                 // for messages
  DType precision = DType::f32;  // of the weights forward reads
  int ranks = 1;                 // that the model states are sharded over
  // What is sharded: each rank keeps only its part of every unit.
  bool shards_optimizer_state = false;  // AdamW's moments, and the reduced gradients they read
  bool shards_gradients = false;        // the gradients backward writes, beyond one unit's at a time
  bool shards_weights = false;          // the weights forward reads, beyond one unit's at a time
  // The f32 parameters: the weights themselves, or with 16-bit weights the master weights.
  bool shards_f32_parameters() const;

  // How the gradients are summed: in place in buckets of the whole buffer, or each unit's
  // reduce-scattered into the gradient shard, which the sharded update reads (so it runs even
  // on one rank).
  enum class Reduction { all_reduce_buckets, reduce_scatter_units };
  Reduction reduction() const;
  // Whether a backward's gradients are reduced at all: over several ranks, or into the shard.
  bool reduces() const;
  // Every micro-batch's backward reduces where no whole gradient outlives it; else only the
  // last one's does (the earlier ones accumulate locally), once a step.
  bool reduces_every_micro_batch() const { return shards_gradients; }
  // When the weights forward reads are gathered from the owned parts the update wrote.
  enum class Gather { never, after_update, before_each_pass };
  Gather gathers_weights() const;

  // Whether pipeline stages can run under it: a schedule interleaves the micro-batches' passes,
  // so the data-parallel reduction must wait for the last (DataParallel::reduce_gradients).
  bool allows_pipeline() const;
  // Why not, naming the stage ("ZeRO stage 2 reduces during every micro-batch's pass, ..."),
  // and the stages that can: "0 or 1".
  std::string pipeline_conflict() const;
  static std::string stages_allowing_pipeline();
  // The stage that shards the most, of those a pipeline allows where the run has one.
  static int most_sharding_stage(bool pipeline);

  // How the model must store its parameters and gradients: units of equal parts of whole
  // 16-element (64-byte) groups, each buffer that is sharded stored per unit.
  ParameterStorage storage() const;
  // The elements AdamW updates on this rank: the whole layout's, or its part of every unit.
  int64_t optimizer_elements(const ParameterLayout& layout) const;
  // A rank's part of unit u where it is sharded: of its experts a part over the ranks / ep that
  // hold them (parallel/data_parallel.h), of the rest a part over all the ranks.
  int64_t part_elements(const ParameterLayout& layout, size_t u) const;
  // The shard buffers the sharded stages make, each of optimizer_elements: the gradient shard;
  // the f32 parameters' parts where they are sharded (the master weights of 16-bit weights are
  // optimizer state); with 16-bit weights sharded, their parts. DataParallel makes exactly
  // these; plan/memory.h counts them.
  enum class ShardRole { gradients, f32_parameters, weights };
  struct ShardBuffer {
    ShardRole role;
    MemTag tag;
    DType dtype;
  };
  std::vector<ShardBuffer> shard_buffers() const;
  // What it shards, for a run's header: "optimizer state, gradients and parameters".
  std::string sharded() const;
};

}  // namespace dt
