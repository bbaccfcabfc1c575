// Data parallelism: every rank of the group (in a run the dp × cp ranks, ProcessGroups::dp_cp())
// runs forward and backward on its share of the global batch (data/data_loader.h), and the
// gradients are summed over the group before the update, so every rank applies the update one
// process would. Each rank's gradients are of the global-batch loss (scaled by the global target
// count, train/step.h), so the sum, not an average, is the whole batch's gradient.
//
// What ZeRO shards, how the model stores its buffers, and when gradients are reduced and weights
// gathered is the policy's (parallel/zero_policy.h); what happens as a pass reaches each unit is
// the hooks' (parallel/zero_hooks.h). This class carries it out: it holds the buckets (ranges of
// whole parameters of at least parallel.bucket_mb, cut from the end of the layout, all-reduced in
// place) and the shard buffers, starts their collectives when the hooks ask, during backward, and
// holds the optimizer of this rank's parts, whose gradient norm and non-finite search it completes
// over the group. docs/parallelism.md#zero describes what each stage shards and when it
// communicates, and measures what each holds per rank.
//
// Under expert parallelism a rank holds only its experts (parallel/expert/expert_parallel.h):
// their gradients are summed, and ZeRO shards them, over the ranks that hold the same experts
// (the expert group, ProcessGroups::expert_dp), every other parameter's over the whole group.
// Each unit's experts are a part of it of their own (ParameterLayout::experts_of_unit), so a
// bucket holds one kind or the other, and a unit with experts is reduced, sharded and gathered as
// two pieces, each over its ranks.
#pragma once

#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "kernels/flat_ranges.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/zero_hooks.h"
#include "parallel/zero_policy.h"

namespace dt {

class DataParallel : private ZeroHooks::Backend {
 public:
  // Reduces `model`'s gradients over `group`, the dp group (whose device must be the model's),
  // under `zero`, a policy of the model's precision over the group's ranks; the model must have
  // been made with zero.storage(). `adamw` configures the optimizer of this rank's parts. The
  // model calls this object's hooks until it is destroyed. pipeline: the ranks holding the
  // model's other stages (pipeline parallelism), whose gradients the norm counts too; the model
  // is then this rank's stages, whose schedule interleaves the micro-batches' backwards, so the
  // gradients are reduced after the last (reduce_gradients), under a policy that allows it.
  // experts: the ranks of the group that hold this rank's experts, over which their gradients are
  // summed (expert parallelism); none: the group, every rank holding every expert.
  DataParallel(Transformer& model, Communicator& group, double bucket_mb, const ZeroPolicy& zero,
               const AdamWConfig& adamw = {}, Communicator* pipeline = nullptr, Communicator* experts = nullptr);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& group() { return group_; }
  const Communicator& group() const { return group_; }
  // The ranks holding this rank's experts: the group itself without expert parallelism.
  const Communicator& expert_group() const { return expert_group_; }
  const ParameterLayout& model_layout() const { return model_.layout(); }
  const ZeroPolicy& policy() const { return policy_; }
  // The buckets where the gradients are all-reduced, in launch order, each over the group or, with
  // experts, the expert group.
  struct Bucket {
    kernels::FlatRange range;
    bool experts = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // Arms the reduction for the next backward: buckets or units launch as the model reports
  // their gradients final. first_of_step: the step's first reduction, which replaces the
  // gradient shard; later ones (policy().reduces_every_micro_batch()) add to it.
  void reduce_during_next_backward(bool first_of_step);
  // Waits until every bucket or unit of the armed backward is reduced over the group.
  void wait_for_gradients();
  // Reduces every gradient over the group now, after backward (a pipeline rank's): the buckets or
  // units from the last, in flight together, then waits.
  void reduce_gradients();

  // The optimizer of this rank's parts (optim/adamw.h): the whole layout where the optimizer
  // state is not sharded (the model's f32 parameters, gradients and 16-bit weights), else this
  // rank's part of every unit, with the norm and the non-finite search completed over the group.
  AdamW& optimizer() { return *optimizer_; }
  const AdamW& optimizer() const { return *optimizer_; }
  // One AdamW update of this rank's parts with learning rate lr, every gradient multiplied by
  // grad_scale first, rounded into the 16-bit weights, then gathered where the policy gathers
  // them after the update (else the next forward gathers them).
  void update(float lr, float grad_scale);
  // This rank's part of each unit of the f32 parameters, in unit order, where
  // policy().shards_f32_parameters() (for checkpoints, train/training_checkpoint.h).
  std::vector<Tensor> parameter_parts() const;
  // Sets the parameters from whole f32 ones (flat tensors of the model's layout, on any device;
  // the model's own params() where they are not sharded): this rank's parts where they are
  // sharded, then the 16-bit weights, then every rank's weights where gathered after an update.
  void take_parameters(const FlatTensors& whole);
  // Where policy().shards_f32_parameters(): the whole f32 parameters on rank 0 of the group,
  // gathered from every rank's parts, and on rank 0 of each expert group its experts' (the
  // elements of `whole` it does not receive are left as they are). A collective: the other ranks
  // pass nullptr and send theirs; nothing whole is allocated on them. For a sample of the model's
  // text.
  void gather_parameters(FlatTensors* whole);

 private:
  // Rank r's part of a piece of a unit (the unit, or its experts and the rest): where it is in the
  // flat buffers, and where in the shard.
  struct Part {
    size_t unit = 0;
    kernels::FlatRange piece;  // of the layout
    kernels::FlatRange owned;  // this rank's part of the piece, in the layout
    int64_t shard_offset = 0;  // where the part starts in the shard buffers
    Communicator* group = nullptr;  // the ranks holding the piece's other parts
  };
  // A reduction in flight: a bucket's, or a unit's pieces' with, where they add to the shard,
  // their staging.
  struct Reduction {
    std::vector<CollectiveHandle> handles;
    std::optional<size_t> unit;
    std::vector<Buffer> staged;  // by piece of the unit, where staged
  };
  // ZeroHooks::Backend: the model's units and the group's collectives.
  void start_gathering(size_t u) override;
  void wait_for_gathering(size_t u) override;
  void free_weights(size_t u) override;
  void hold_gradients(size_t u) override;
  void free_gradients(size_t u) override;
  void all_reduce_buckets(size_t u) override;
  void reduce_scatter(size_t u, bool staged) override;
  size_t reductions_in_flight() const override { return reductions_.size(); }
  std::optional<size_t> finish_oldest_reduction() override;

  Tensor shard_view(const Buffer& b, const Part& p, DType dtype = DType::f32) const;
  // The parts of unit u's pieces.
  std::span<const Part> parts_of(size_t u) const;
  // Part p's whole piece of `buffer` (the weights or gradients), whose unit must be held.
  Tensor piece_of(const FlatTensors& buffer, const Part& p) const;
  // This rank's part of unit p of the weights forward reads (in the model's precision): a range
  // of the model's whole weights, or where they are sharded of the shard the gathers send from.
  Tensor weight_part(const Part& p) const;
  // What the optimizer updates: this rank's parts, or the whole layout.
  OptimizerParts optimizer_parts();
  // After the weights' parts change, where the policy gathers after the update: all-gathers
  // every unit's parts into every rank's weights.
  void share_weights();
  // Each piece's group's rank 0: every rank's parts of it in `shard` into `whole` (a flat buffer's
  // elements); the others send theirs (whole undefined). Taking is the reverse, on every rank.
  void gather_shard(const Buffer& shard, Tensor whole);
  void take_shard(Buffer& shard, Tensor whole);

  Transformer& model_;
  Communicator& group_;
  Communicator& expert_group_;
  Communicator* pipeline_;
  ZeroPolicy policy_;
  ZeroHooks hooks_;
  std::vector<Bucket> buckets_;  // all-reduced: from the end of the buffer to its start
  std::vector<Part> parts_;      // sharded: per piece of each unit, in layout order
  std::vector<size_t> unit_parts_;  // unit u's parts are [unit_parts_[u], unit_parts_[u + 1])
  int64_t shard_elements_ = 0;
  Buffer grad_shard_;
  Buffer param_shard_;   // f32 parts: sharded weights in f32, or a 16-bit run's master weights
  Buffer weight_shard_;  // 16-bit parts of the weights, where they are sharded
  std::optional<AdamW> optimizer_;  // made last, over the buffers above
  std::deque<Reduction> reductions_;
  std::vector<std::vector<CollectiveHandle>> gathering_;  // where the weights are sharded: per unit
  size_t next_bucket_ = 0;
};

}  // namespace dt
