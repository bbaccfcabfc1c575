// Context parallelism: every sequence of a micro-batch is cut over the cp group's ranks
// (context_layout.h: zig-zag or plain chunks), each rank running the model on its tokens only.
// Everything but attention works token by token and needs nothing from the other ranks, given
// each token's position (learned positions, rotary angles); attention is ring attention
// (ring_attention.h). ContextParallel is the model's AttentionScope (model/attention_core.h):
// the stage asks it where its tokens lie and for the attention core of each micro-batch.
//
// The rest of the run treats the cp ranks like data-parallel ones: each holds a part of every
// sequence's tokens and targets, so the global batch's target count, the loss and the
// replicated parameters' gradients are summed over dp × cp (the DataParallel's group is
// ProcessGroups::dp_cp()), and ZeRO shards over dp × cp. docs/parallelism.md#context-parallelism
// describes context parallelism as a user runs it, what it costs and how it is checked.
#pragma once

#include "comm/communicator.h"
#include "model/attention_core.h"
#include "model/config.h"
#include "model/rope_tables.h"
#include "parallel/context/context_layout.h"

namespace dt {

class ContextParallel final : public AttentionScope {
 public:
  // `group`: the cp group. seq_len: the whole sequences' length. A length that does not split
  // into the layout's chunks is padded at the end of every sequence to one that does: the padding
  // comes after every real token, so no real query attends to it, and its targets are ignored,
  // so it adds nothing to the loss or any gradient. The model on this rank runs
  // padded_len() / cp tokens of each sequence.
  ContextParallel(Communicator& group, const ModelConfig& config, int seq_len, bool zigzag, Device device);

  const ContextLayout& layout() const { return layout_; }
  Communicator& group() const { return group_; }
  int seq_len() const { return seq_len_; }
  int padded_len() const { return static_cast<int>(layout_.seq_len); }
  int local_len() const { return static_cast<int>(layout_.local_len()); }
  std::unique_ptr<TrainingAttention> core(kernels::AttentionHeads heads, int64_t B, int64_t T, Tensor rope_cos,
                                          Tensor rope_sin) const override;
  std::vector<Positions> positions(int64_t T) const override;
  int64_t sequence_length(int64_t T) const override { return T * group_.size(); }
  void sum_over_sequences(Tensor values) const override { group_.all_reduce(values, ReduceOp::sum).wait(); }

  // This rank's tokens of whole sequences: (B, seq_len) i32 into (B, local_len()), on the CPU;
  // `fill` where the padding falls (a token id for tokens, the ignore index for targets).
  void take_own(Tensor whole, Tensor own, int32_t fill) const;

 private:
  Communicator& group_;
  int seq_len_;
  ContextLayout layout_;
  RopeTables rope_;  // the whole sequences' angles (llama)
};

}  // namespace dt
