// Data parallelism: every rank of the dp group runs forward and backward on its share of the
// global batch (data/data_loader.h), and the gradients are summed over the group before the
// update, so every rank applies the update one process would.
//
// ZeRO stage 0: the sum is taken in buckets, contiguous ranges of the flat gradient buffer of
// about parallel.bucket_mb cut at parameter boundaries, all-reduced in place; every rank keeps
// the whole AdamW state and updates every parameter.
//
// ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer state is sharded. The parameter layout
// is cut into units (the embeddings, each block, the head; model/parameters.h), each padded so
// that it splits into equal parts over the ranks; rank r owns part r of every unit. Each unit's
// gradient is reduce-scattered into this rank's gradient shard, AdamW's moments exist only for
// the shard, the update runs on the owned parts of the parameters, and each unit's parameters
// are then all-gathered from the parts. The gradient norm is the shards' sums of squares summed
// over the group. Per rank the optimizer state is 8Ψ/N bytes instead of 8Ψ (f32 parameters and
// gradients stay whole: 4Ψ each).
//
// ZeRO stage 2: the gradients, too, exist only as the shard. The model's gradient buffer is
// stored per unit (model/parameters.h): backward allocates a unit's gradients when it reaches
// the unit, and they are freed as soon as their reduce-scatter has completed, at most a few
// units behind. Because no whole gradient outlives its backward, every micro-batch reduces
// (as DeepSpeed's stage 2 does): the first into the shard, later ones added to it. Per rank:
// 4Ψ of parameters and 12Ψ/N of gradient shard and moments, with a few units of gradients.
//
// ZeRO stage 3: the parameters are sharded as well. Rank r keeps only its parts (the master
// copy the update writes); the model's parameter buffer is stored per unit, and each unit is
// all-gathered just before a pass reads it (the next unit's gather starts at the same time, so
// it arrives while this one computes) and freed after the pass's last read: forward gathers
// every unit, backward gathers them again from the head down. Per rank: 16Ψ/N, plus the units
// being used and prefetched. Evaluation under stage 3 runs on every rank (each forward is a
// collective); a whole copy for a checkpoint or a sample is gathered on rank 0.
//
// In every stage a bucket's (stage 0) or a unit's (stages 1-3) collective starts during
// backward as soon as the model reports its gradients final (model/unit_hooks.h), while
// backward goes on with the layers below: communication overlaps with compute. In stages 0 and
// 1 only the last micro-batch of an accumulation reduces (the earlier ones accumulate into the
// whole gradients locally); one reduction per step. Each rank's gradients are of the
// global-batch loss (scaled by the global target count, train/step.h), so the sum is the whole
// batch's gradient.
//
// Mixed precision (bf16, f16): the f32 master weights exist only as this rank's parts, at every
// stage (tagged optimizer_state, as the paper counts them); the update rounds the owned parts
// into the model's 16-bit weights, which stages 1 and 2 then all-gather (half the bytes of f32)
// and stage 3 gathers unit by unit as forward reads them. Gradients stay f32.
#pragma once

#include <array>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "kernels/flat_ranges.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace dt {

class DataParallel : public UnitHooks {
 public:
  // Reduces `model`'s gradients over `group`, the dp group (whose device must be the model's). With ZeRO the
  // model must have been made with storage(group size, zero_stage). `adamw` configures the
  // optimizer of this rank's parts. The model calls this object's hooks until it is destroyed.
  // pipeline: the ranks holding the model's other stages (pipeline parallelism), whose gradients
  // the norm counts too; the model is then this rank's stages, whose schedule interleaves the
  // micro-batches' backwards, so the gradients are reduced after the last (reduce_gradients), at
  // ZeRO stage 0 or 1.
  DataParallel(Transformer& model, Communicator& group, double bucket_mb, int zero_stage = 0,
               const AdamWConfig& adamw = {}, Communicator* pipeline = nullptr);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // How the model must store its parameters and gradients for `zero_stage` over `ranks` ranks:
  // units of equal parts of whole 16-element (64-byte) groups; gradients per unit from stage 2,
  // parameters per unit at stage 3.
  static ParameterStorage storage(int ranks, int zero_stage);

  // The elements of one rank's shard over `ranks` ranks: its part of every unit.
  static int64_t shard_elements(const ParameterLayout& layout, int ranks);
  // The shard buffers ZeRO `zero_stage` (1 to 3) makes, each of shard_elements: the gradient
  // shard; the f32 parameters' parts where sharded (stage 3, and every stage in 16-bit: the
  // master weights, tagged optimizer_state); the 16-bit weights' parts at stage 3. The
  // constructor makes exactly these; plan/memory.h counts them.
  enum class ShardRole { gradients, f32_parameters, weights };
  struct ShardSpec {
    ShardRole role;
    MemTag tag;
    DType dtype;
  };
  static std::vector<ShardSpec> shard_buffers(DType precision, int zero_stage);
  // What stages 2 and 3 hold during a step beside the shards, at most, by tag: the units of
  // gradients backward makes, each kept until its reduction completes (gradients); the staging
  // of the reductions that add to the shard, every micro-batch's after the first
  // (communication); at stage 3 the units of weights gathered for the passes (parameters). The
  // hooks below walked over `calls`, one micro-batch's (Stage::unit_hook_calls), for a step of
  // `micro_batches`. None below stage 2.
  static std::array<size_t, kNumMemTags> working_set(const ParameterLayout& layout, DType precision, int ranks,
                                                     int zero_stage, const std::vector<UnitHookCall>& calls,
                                                     int micro_batches);

  Communicator& group() { return group_; }
  const Communicator& group() const { return group_; }
  const ParameterLayout& model_layout() const { return model_.layout(); }
  int zero_stage() const { return zero_stage_; }
  // Stage 0's buckets, in launch order.
  const std::vector<kernels::FlatRange>& buckets() const { return buckets_; }

  // Whether every micro-batch's backward reduces (stages 2 and 3), or only the last (0 and 1).
  bool reduces_every_micro_batch() const { return zero_stage_ >= 2; }
  // Arms the reduction for the next backward: buckets or units launch as the model reports
  // their gradients final. first_of_step: the step's first reduction, which replaces the
  // gradient shard; later ones (stages 2 and 3) add to it.
  void reduce_during_next_backward(bool first_of_step);
  // Waits until every bucket or unit of the armed backward is reduced over the group.
  void wait_for_gradients();
  // Reduces every gradient over the group now, after backward (a pipeline rank's): the buckets or
  // units from the last, in flight together, then waits.
  void reduce_gradients();

  // The optimizer of this rank's parts (optim/adamw.h): the whole layout at stage 0 (the
  // model's f32 parameters, gradients and 16-bit weights), else this rank's part of every unit,
  // with the norm and the non-finite search completed over the group.
  AdamW& optimizer() { return *optimizer_; }
  const AdamW& optimizer() const { return *optimizer_; }
  // One AdamW update of this rank's parts with learning rate lr, every gradient multiplied by
  // grad_scale first, rounded into the 16-bit weights; stages 1 and 2 then all-gather each unit's
  // weights from the parts, stage 3 keeps only its parts (the next forward gathers them).
  void update(float lr, float grad_scale);
  // Whether the f32 parameters are sharded here: at stage 3, and at every stage in 16-bit
  // precision (the master weights; the model keeps only the 16-bit copy).
  bool shards_parameters() const { return shards_parameters_; }
  // This rank's part of each unit of the f32 parameters, in unit order, where shards_parameters()
  // (for checkpoints, train/training_checkpoint.h).
  std::vector<Tensor> parameter_parts() const;
  // Sets the parameters from whole f32 ones (flat tensors of the model's layout, on any device;
  // the model's own params() at stage 0 in f32): this rank's parts where they are sharded, then
  // the 16-bit weights, then at stages 1 and 2 every rank's weights.
  void take_parameters(const FlatTensors& whole);
  // Where shards_parameters(): the whole f32 parameters on rank 0 of the group, gathered from
  // every rank's parts (a collective: the other ranks pass nullptr and send theirs; nothing whole
  // is allocated on them). For a sample of the model's text.
  void gather_parameters(FlatTensors* whole);

  // UnitHooks: stage 3 gathers and frees parameter units; stages 2 and 3 allocate
  // and free gradient units; every stage starts reductions at gradients_final.
  void weights_needed(size_t u, std::optional<size_t> next) override;
  void weights_done(size_t u) override;
  void gradients_needed(size_t u) override;
  void gradients_final(size_t u) override;

 private:
  // Rank r's part of a unit: where it is in the flat buffers, and where in the shard.
  struct Part {
    kernels::FlatRange unit;
    kernels::FlatRange owned;  // this rank's part of the unit, in the layout
    int64_t shard_offset = 0;  // where the part starts in the shard buffers
  };
  // A reduction in flight, and what to do once it completes: add the staged result into the
  // shard (a later micro-batch under stages 2 and 3), free the unit's gradients (stages 2, 3).
  struct Reduction {
    CollectiveHandle handle;
    std::optional<size_t> unit;
    Buffer staged;
  };
  void finish_oldest_reduction();
  // Stage 3: starts unit u's all-gather unless it is held or on its way.
  void start_gathering(size_t u);
  Tensor shard_view(const Buffer& b, const Part& p, DType dtype = DType::f32) const;
  // This rank's part of unit p of the weights forward reads (in the model's precision): a range
  // of the model's whole weights, or at stage 3 of the shard the gathers send from.
  Tensor weight_part(const Part& p) const;
  // What the optimizer updates: this rank's parts, or the whole layout at stage 0.
  OptimizerParts optimizer_parts();
  // After the weights' parts change: below stage 3 all-gathers every unit's parts into every
  // rank's weights.
  void share_weights();
  // Rank 0 of the group: every rank's parts of `shard` into `whole` (a flat buffer's elements);
  // the others send theirs (whole undefined). Taking is the reverse, on every rank.
  void gather_shard(const Buffer& shard, Tensor whole);
  void take_shard(Buffer& shard, Tensor whole);

  Transformer& model_;
  Communicator& group_;
  Communicator* pipeline_;
  int zero_stage_;
  std::vector<kernels::FlatRange> buckets_;  // stage 0: from the end of the buffer to its start
  std::vector<Part> parts_;                  // ZeRO: per unit, in layout order
  int64_t shard_elements_ = 0;
  Buffer grad_shard_;
  bool shards_parameters_;
  Buffer param_shard_;   // f32 parts: stage 3's parameters, or a 16-bit run's master weights
  Buffer weight_shard_;  // 16-bit parts of the weights, at stage 3
  std::optional<AdamW> optimizer_;  // made last, over the buffers above
  std::deque<Reduction> reductions_;
  std::vector<std::optional<CollectiveHandle>> gathering_;  // stage 3: per unit
  size_t next_bucket_ = 0;
  bool armed_ = false;
  bool accumulate_ = false;  // stages 2 and 3: add this backward's reductions to the shard
};

}  // namespace dt
