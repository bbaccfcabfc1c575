// Ring attention: the causal attention of sequences whose tokens are spread over the ranks of a
// context-parallel group (context_layout.h), each rank holding its chunks' queries, keys and
// values. The keys and values travel around the ring: at step s rank r holds the block of rank
// r − s, sends it on to rank r + 1 and receives the next from rank r − 1 while it computes its
// queries' attention against the block in hand (kernels/attention_block.h) — in full against a
// chunk that lies before the query chunk, causally against the same chunk, not at all against a
// later one — and merges it into the running output and log-sum-exp. After cp steps every query
// has seen every key it attends to. Only the key/value heads travel (grouped-query attention
// sends NKV of the NH + 2·NKV heads' columns).
//
// Backward runs the ring again with the blocks and, beside each, the gradient of its keys and
// values: each rank adds its queries' share into the block's gradient and passes both on; after
// the last step one more hop brings every block's gradient home. The query gradients stay local.
// Everything is accumulated in f32 (f64 for f64) and rounded once into the storage type, and
// sums run in the ring's order, the same on every run. Each step's compute is a span of the trace
// (core/trace.h), so a trace shows how much of the ring's communication it hides.
//
// It is the block's attention core (model/attention_core.h): llama's rotary angles are those of
// the rank's tokens' positions in the whole sequence. The lse it keeps is laid out per chunk —
// (B, local chunks, NH, chunk length) — for its own backward.
#pragma once

#include <array>
#include <cstdint>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "kernels/attention_block.h"
#include "model/attention_core.h"
#include "parallel/context/context_layout.h"

namespace dt {

class RingAttention final : public TrainingAttention {
 public:
  // `group`: the cp group, its rank order the layout's. rope_cos, rope_sin: the whole sequence's
  // tables (>= layout.seq_len rows, model/rope_tables.h), or undefined for gpt2.
  RingAttention(Communicator& group, ContextLayout layout, kernels::AttentionHeads heads, int64_t batch,
                Tensor rope_cos, Tensor rope_sin);
  void forward(Tensor qkv, Tensor atty, Tensor lse) override;
  void rerun(Tensor qkv, Tensor atty, Tensor lse) override;
  void backward(Tensor dqkv, Tensor datty, Tensor qkv, Tensor atty, Tensor lse) override;
  // The most one call allocates beside its arguments, for `batch` sequences of `local_len` tokens
  // of this rank, heads of `head_size` in `storage` (plan/memory.h counts it): activations, the
  // key/value blocks in hand and arriving, and their f32 gradients (backward's); workspace, the
  // rotary rows of this rank's chunks (with `rope`), and beside them forward's f32 output with
  // 16-bit storage, or backward's f32 query gradient and then with 16-bit storage the rounded
  // gradients; the block kernels' scratch (`kernels`: the CPU's for one chunk's queries) during
  // the blocks. On a GPU, not counted: cuDNN's blocks' own output or gradients in the storage
  // dtype (kernels/cuda/attention_block.cu; one chunk's, a few MiB) and cuDNN's workspace.
  struct CallBytes {
    size_t activations = 0, workspace = 0;
  };
  static CallBytes call_bytes(int64_t batch, int64_t local_len, int64_t head_size, kernels::AttentionHeads heads,
                              DType storage, bool rope, kernels::cpu::BlockScratchBytes kernels = {});
  // The bytes this object has sent so far: the key/value blocks, and in backward their gradients.
  int64_t bytes_sent() const { return bytes_sent_; }

 private:
  // Runs fn(b, query chunk a, block chunk c, mask) for every pair of this rank's query chunks and
  // the chunks of rank `owner`'s block that they attend to (local indices).
  template <typename Fn>
  void for_each_pair(int owner, Fn&& fn) const;
  // Sequence b's rows of local chunk `chunk` of t (B·local tokens, width), as (1, chunk, width).
  Tensor rows(const Tensor& t, int64_t b, int64_t chunk) const;
  // The lse kept for sequence b's local chunk `chunk`, as (1, NH, chunk length).
  Tensor lse_rows(const Tensor& lse, int64_t b, int64_t chunk) const;
  // The block in hand and the one arriving: this rank's keys and values (qkv's columns from A on)
  // in the first.
  std::array<Buffer, 2> key_value_blocks(const Tensor& qkv, int64_t A) const;
  // llama's rotation of q and k at this rank's positions, or its backward; nothing for gpt2.
  void rotate(Tensor qkv, bool backward) const;

  Communicator& group_;
  ContextLayout layout_;
  kernels::AttentionHeads heads_;
  int64_t B_, Tl_, Tc_;
  Buffer cos_, sin_;  // the rotary tables' rows of this rank's positions
  int64_t bytes_sent_ = 0;
};

}  // namespace dt
