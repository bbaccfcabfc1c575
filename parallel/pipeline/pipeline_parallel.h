// Pipeline parallelism in training. The model's blocks are cut into the schedule's stages by the
// balanced partition (partition.h); each rank of the pp group makes its model with the stages the
// schedule places on it (rank_stages: its layout then holds only their units), and every step
// runs the step's micro-batches through the pipeline in the schedule's order (executor.h), every
// pp rank given the same micro-batches: the first stage reads their tokens, the last their
// targets.
//
// What follows the schedule, before the optimizer:
//   - a tied model whose embeddings and head sit on different ranks holds wte twice: the first
//     stage's rank owns it, the last stage's holds a copy for the output projection, made equal
//     at initialisation (both are drawn from the same indices) and kept equal by identical
//     updates: their gradients are summed between the two (sum_tied_gradients), so both hold the
//     whole gradient, and the copy is not owned, so the norm counts it once and checkpoints
//     save it once (model/parameters.h).
//   - the loss, computed on the last stage's rank, is shared with the group.
// The gradient norm is completed over the pp group (OptimizerParts::pipeline). Data parallelism
// reduces each stage's gradients over its dp group after the schedule (DataParallel::
// reduce_gradients), at ZeRO stage 0 or 1. docs/parallelism.md#pipeline-parallelism describes
// pipeline parallelism as a user runs it, and how it is checked against one rank.
#pragma once

#include <memory>
#include <span>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedule.h"

namespace dt::pipeline {

// The same stages' forwards alone, every micro-batch through every stage in order: evaluation.
Schedule forward_only(const Schedule& schedule, int micro_batches);

class PipelineParallel {
 public:
  // The stages of the model that `schedule` places on pipeline rank `rank`, for sequences of
  // seq_len tokens (the partition balances the stages' FLOPs for that length).
  static RankStages rank_stages(const ModelConfig& config, const Schedule& schedule, int rank, int seq_len);

  // `group`: the pp group, whose rank order is the schedule's; `model` made with
  // rank_stages(config, schedule, group.rank(), seq_len). Both must outlive this object.
  PipelineParallel(Transformer& model, Communicator& group, Schedule schedule);
  ~PipelineParallel();

  const Schedule& schedule() const { return schedule_; }
  Communicator& group() { return group_; }

  // Forward and backward of every micro-batch in the schedule's order, each micro-batch's loss
  // scaled by `loss_scale` in backward; the gradients are added into the model's. Returns the
  // sum of every micro-batch's losses (unscaled), on every rank of the group.
  double forward_backward(std::span<const MicroBatch> micro_batches, float loss_scale);
  // The sum of the losses of the micro-batches' forwards alone, on every rank of the group.
  double forward(std::span<const MicroBatch> micro_batches);
  // Where wte is held twice (see above): sums its gradient between its two holders.
  void sum_tied_gradients();

  // The whole model's f32 parameters on rank 0 of the group from every rank's: `mine` holds this
  // rank's stages whole (every tp shard placed), in whole storage; rank 0 places every rank's
  // owned tensors into `whole` (the whole model's layout, on the CPU), the others pass nullptr.
  // For a sample of the model's text. A collective over the group.
  void gather_parameters(const FlatTensors& mine, FlatTensors* whole);

  // Each compute kind's time in the last forward_backward (pipeline/executor.h).
  const std::map<Op, PipelineRank::Busy>& busy() const { return busy_; }

 private:
  double run(const Schedule& schedule, std::span<const MicroBatch> micro_batches, float loss_scale);

  Transformer& model_;
  Communicator& group_;
  Schedule schedule_;
  // The ranks of the first and the last stage, where a tied wte is held twice; null elsewhere.
  std::unique_ptr<Communicator> embedding_group_;
  std::map<Op, PipelineRank::Busy> busy_;
};

}  // namespace dt::pipeline
