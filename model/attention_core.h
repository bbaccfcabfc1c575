// The attention inside a block, between the qkv projection and the output projection: from qkv
// (N, (NH + 2*NKV) * HS), the query heads then the key and value heads of each row, to atty
// (N, NH*HS). A block reaches it only through this interface. It is the seam where context
// parallelism's ring attention goes (the keys and values of the sequence's other chunks arrive
// from the other ranks) and where generation reads and extends its key/value cache
// (model/inference.h); the rotary embedding is applied here because only the core knows each
// row's position in the whole sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"

namespace dt {

class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  // Sets atty, and lse (the per-head log-sum-exp, (B, NH, T) as N*NH values) where kept; may
  // rotate qkv's q and k heads in place (llama).
  virtual void forward(Tensor qkv, Tensor atty, Tensor lse) = 0;
};

// The core a training block also runs backward through.
class TrainingAttention : public AttentionCore {
 public:
  // forward() without the rotation: reruns attention from the kept, already rotated qkv
  // (selective recomputation).
  virtual void rerun(Tensor qkv, Tensor atty, Tensor lse) = 0;
  // Sets dqkv from datty, through attention and the rotation.
  virtual void backward(Tensor dqkv, Tensor datty, Tensor qkv, Tensor atty, Tensor lse) = 0;
};

// Where a stage's tokens lie in their sequences and how they attend: the tokens of a
// micro-batch's sequences, positions 0..T-1, attending among themselves (one rank, or tensor
// parallelism), or under context parallelism this rank's chunks of each sequence, attending
// across the cp group (parallel/context/).
class AttentionScope {
 public:
  // A run of consecutive positions in the whole sequence.
  struct Positions {
    int64_t first = 0, count = 0;
  };
  virtual ~AttentionScope() = default;
  // The core for B sequences of T tokens held here; rope_cos, rope_sin: the stage's tables
  // (>= T rows) or undefined.
  virtual std::unique_ptr<TrainingAttention> core(kernels::AttentionHeads heads, int64_t B, int64_t T,
                                                  Tensor rope_cos, Tensor rope_sin) const;
  // Where the T tokens held here lie in their sequence, run by run, in order.
  virtual std::vector<Positions> positions(int64_t T) const { return {{0, T}}; }
  // The length of the whole sequences of which T tokens are held here.
  virtual int64_t sequence_length(int64_t T) const { return T; }
  // Sums values kept per sequence (a row each) over the ranks holding the other tokens of the same
  // sequences, in place: nothing where the tokens held here are whole sequences. A collective of
  // those ranks.
  virtual void sum_over_sequences(Tensor /*values*/) const {}
  // The scope of a micro-batch's own tokens.
  static const AttentionScope& local();
};

// Causal self-attention over a micro-batch of B sequences of T tokens (kernels/attention.h), of
// the heads this rank holds (all of them on one rank; model/tensor_shard.h), positions 0..T-1;
// llama rotates q and k with the tables' first T rows.
class CausalSelfAttention final : public TrainingAttention {
 public:
  // rope_cos, rope_sin: (>= T, HS/2) f32 (model/rope_tables.h), or undefined for gpt2.
  CausalSelfAttention(kernels::AttentionHeads heads, int64_t batch, int64_t seq_len, Tensor rope_cos,
                      Tensor rope_sin);
  void forward(Tensor qkv, Tensor atty, Tensor lse) override;
  void rerun(Tensor qkv, Tensor atty, Tensor lse) override;
  void backward(Tensor dqkv, Tensor datty, Tensor qkv, Tensor atty, Tensor lse) override;

 private:
  kernels::AttentionHeads heads_;
  int64_t B_, T_;
  Tensor cos_, sin_;  // rows [0, T)
};

}  // namespace dt
