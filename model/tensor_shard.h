// Which part of the model one rank of a tensor-parallel group holds: its attention heads, its
// columns of the MLP and its rows of the vocabulary. Every split is as even as possible (6
// heads over 4 ranks: 2, 2, 1, 1; a vocabulary of 997 over 4: 250, 249, 249, 249), so no size
// has to divide the group's.
//
// Attention heads. With at least as many key/value heads as ranks, the key/value heads are split
// and each rank takes the query heads that read them (whole groups of grouped-query attention).
// With fewer, the query heads are split and each rank holds a copy of every key/value head its
// query heads read; the copies' gradients are summed over the ranks holding them
// (parallel/tensor/tensor_parallel.h). A copy is owned — counted once in the gradient norm,
// written once to a checkpoint — by the lowest rank holding it: the one holding its group's
// first query head.
//
// One rank (size 1) holds the whole model, and every size here is the model's own.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/flat_ranges.h"
#include "model/config.h"

namespace dt {

struct TensorShard {
  int rank = 0;
  int size = 1;
};

// Which experts of each mixture of experts one rank of an expert-parallel group holds
// (parallel/expert/expert_parallel.h): rank `rank` of `size`, even_part's share of the E
// experts (8 over 3: 3, 3, 2). Every expert is whole on the rank that holds it.
struct ExpertShard {
  int rank = 0;
  int size = 1;
};

// Part `index` of `count` items split over `parts`: the first count % parts parts one larger.
kernels::FlatRange even_part(int64_t count, int parts, int index);

struct HeadShard {
  int q_begin = 0, q_end = 0;    // the model's query heads [q_begin, q_end)
  int kv_begin = 0, kv_end = 0;  // the key/value heads they read
  int group = 1;                 // query heads per key/value head, the model's
  bool kv_split = true;          // key/value heads split over the ranks (else copied)

  int n_head() const { return q_end - q_begin; }
  int n_kv_head() const { return kv_end - kv_begin; }
  // Local query head i reads local key/value head (i + phase) / group (kernels/attention.h).
  int phase() const { return q_begin % group; }
  // The heads as the attention kernels take them.
  kernels::AttentionHeads attention() const { return {n_head(), n_kv_head(), group, phase()}; }
  // Whether this rank owns key/value head j (of the model's): it holds the group's first query head.
  bool owns_kv(int j) const { return q_begin <= j * group && j * group < q_end; }
};

// The rows of a micro-batch of `rows` that tensor-parallel rank `shard` holds in the norms and
// the residual stream: all of them, or under sequence parallelism its part (even_part's). The
// first rank's part is the largest.
inline int64_t sequence_rows(int64_t rows, TensorShard shard, bool sequence_parallel) {
  return sequence_parallel ? even_part(rows, shard.size, shard.rank).size() : rows;
}

// One rank's sizes: what its parameters' shapes and activations' widths follow.
struct ShardDims {
  HeadShard heads;
  kernels::FlatRange ffn;    // the MLP's hidden columns, of F
  kernels::FlatRange shared_ffn;  // a shared expert's hidden columns, of its F (empty without one)
  int64_t experts = 0;        // E: every rank routes over all of them
  kernels::FlatRange local_experts;  // the experts this rank holds, of E: all of them without expert parallelism
  int expert_ranks = 1;              // the expert-parallel group's size
  int64_t expert_hidden = 0;  // F_e: an expert is whole on every tensor-parallel rank
  kernels::FlatRange vocab;  // the vocabulary's rows, of V
  int64_t padded_vocab = 0;  // rows stored: the vocabulary's rows rounded up to vocab_pad_multiple
  int64_t head_size = 0;

  int64_t qkv_width() const { return (heads.n_head() + 2 * heads.n_kv_head()) * head_size; }
  int64_t attention_width() const { return heads.n_head() * head_size; }  // atty: the rows' heads
  int64_t ffn_hidden() const { return ffn.size(); }
  int64_t ffn_in_width(const ModelConfig& config) const {
    return config.traits().mlp == MlpKind::swiglu ? 2 * ffn.size() : ffn.size();
  }
};

// Whether `config` splits over `tp` ranks (at least one query head, MLP column and vocabulary
// row each): the problem recorded under "parallel.tp", or thrown as dt::ConfigError
// "parallel.tp = N: why; use parallel.tp <= M" after checking the model itself.
void check_tensor_parallel(const ModelConfig& config, int tp, FieldProblems& problems);
void check_tensor_parallel(const ModelConfig& config, int tp);
ShardDims shard_dims(const ModelConfig& config, TensorShard shard, ExpertShard experts = {});

}  // namespace dt
