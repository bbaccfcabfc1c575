// Tensor parallelism (Shoeybi et al., Megatron-LM, 2019): the ranks of a tp group each hold a
// slice of every block — attention heads, MLP columns — and of the vocabulary (model/tensor_shard.h),
// and meet twice per block and pass:
//
//   attention  qkv = f(x) @ Wqkv_r^T  (column-parallel: this rank's heads)
//              y   = g(attn_r @ Wproj_r^T)  (row-parallel: this rank's part of the sum)
//   MLP        h   = act(f(x) @ Wfc_r^T),  y = g(h @ Wproj_r^T)
//
// f is the identity forward and an all-reduce of the input's gradient backward; g an all-reduce
// forward and the identity backward: one all-reduce per branch each way. The embedding is
// row-parallel over the vocabulary (each rank looks up its ids, g sums), the output projection
// column-parallel, and the loss is computed from the slices without gathering the logits
// (kernels/vocab_parallel_cross_entropy.h). Backward sums the input's gradient while the
// weight's gradient is computed (model/block.cpp). docs/parallelism.md#tensor-and-sequence-parallelism
// describes the layout as a user sees it, what it communicates and keeps, and how it is checked.
//
// The sums of 16-bit activations and their gradients are taken in f32 — widened, summed, rounded
// once — so that a row-parallel layer's output is rounded once, as one rank's GEMM rounds it (and
// because MPI has no 16-bit sum). That moves twice the bytes of a 16-bit all-reduce.
//
// Key/value heads that several ranks hold copies of (fewer key/value heads than ranks) get the
// sum of the copies' gradients: each holder's part of dqkv is all-reduced over the group (the
// others contribute zeros) after the input's gradient has used the rank's own, so every holder
// computes the complete weight gradient, the same on each.
//
// Sequence parallelism (Korthikanti et al., 2022), when enabled: each rank keeps a part of the
// micro-batch's rows (its tokens, as evenly as possible: even_part) in the norms and the residual
// stream, f becomes an all-gather of the parts and g a reduce-scatter into them — the bytes of
// the all-reduce each replaces — and the norms' weight gradients, each rank's rows' share, are
// summed over the group. A column-parallel layer's whole input is gathered again for its weight
// gradient rather than kept. When the rows do not split evenly, the collectives work on equal
// parts padded at their ends.
//
// The model is made with this object as its regions (model/transformer.h), and it is the
// model's ParallelRegions from then on.
#pragma once

#include <functional>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/parallel_regions.h"
#include "model/parameters.h"
#include "model/tensor_shard.h"

namespace dt {

class TensorParallel final : public ParallelRegions {
 public:
  // Over `group`, the tp group of this rank, for a model of `config` (checked to split over it),
  // with or without sequence parallelism.
  TensorParallel(Communicator& group, const ModelConfig& config, bool sequence_parallel = false);

  // What a step's collectives over the tp group hold beside the model, for micro-batches of
  // `tokens` tokens in `precision` (plan/memory.h counts them): `largest_sum`, the bytes of the
  // largest all-reduce (always f32: an MPI backend keeps a result buffer that size); `staging`,
  // the most that one of the blocks' collectives stages at once — a 16-bit sum's f32 copy,
  // sequence parallelism's padded parts, or copied key/value heads' gradients placed among the
  // model's; `loss`, what the vocabulary-parallel loss gathers (on the rank with the head).
  struct CommunicationBytes {
    size_t largest_sum = 0, staging = 0, loss = 0;
  };
  static CommunicationBytes communication_bytes(const ModelConfig& config, TensorShard shard, int64_t tokens,
                                                DType precision, bool sequence_parallel);

  TensorShard shard() const override { return {group_.rank(), group_.size()}; }
  Communicator* group() const override { return &group_; }
  bool sequence_parallel() const override { return sequence_parallel_; }
  kernels::FlatRange rows(int64_t n) const override;
  Tensor column_input(Tensor x, Tensor whole) override;
  PendingSum column_input_gradient(Tensor dx, Tensor local) override;
  Tensor row_output(Tensor y, Tensor local) override;
  Tensor row_output_gradient(Tensor dy, Tensor whole) override;
  void sum_partial_gradients(Tensor grads) override;
  void sum_copied_head_gradients(Tensor dqkv) override;
  void max_over_group(Tensor values) override;
  void cross_entropy(Tensor losses, Tensor logits, Tensor targets, kernels::FlatRange vocab, bool with_gradient,
                     float loss_scale) override;

 private:
  // Starts summing t over the group in place (in f32: see above).
  CollectiveHandle sum(Tensor t);
  // Starts summing whole (N rows) over the group into this rank's rows `local` (in f32).
  CollectiveHandle scatter_sum(Tensor whole, Tensor local);
  // Every rank's rows `local` into whole (N rows).
  void gather(Tensor whole, Tensor local);

  Communicator& group_;
  ModelConfig config_;
  ShardDims dims_;
  bool sequence_parallel_;
};

// The f32 parameters whole over `group` (a tp or an ep group) on its rank 0, from every rank's
// shard `shard` (its f32 parameters, whole storage, any device): every rank sends its shard and
// rank 0 places its own owned slices, and each other rank's of the parameters `include` selects
// (all without it), into `whole` (a layout holding all of them, on the CPU); the other ranks
// pass nullptr.
// `layout_of(r)` is rank r's layout. For a sample of the model's text. A collective over the group.
void gather_shards(Communicator& group, const FlatTensors& shard, FlatTensors* whole,
                   const std::function<ParameterLayout(int rank)>& layout_of,
                   const std::function<bool(const ParamInfo&)>& include = {});

}  // namespace dt
