// Running a trained model forward one token at a time, for text generation, with a key/value
// cache: the keys and values of every position seen so far are kept per layer, so each new
// token costs one row through the blocks and one attention over the cache, not a rerun of the
// whole sequence.
//
//   prefill(prompt)  appends the prompt's tokens (in chunks of kPrefillChunk rows)
//   next(token)      appends one token
//   both return the logits (V) of the last position appended: the distribution of the token
//   after it.
//
// The math is the training forward's: the same blocks (model/block.h), in f32 on the CPU,
// for one sequence (batch 1). Per layer the cache holds (max_tokens, 2*NKV*HS) f32: at each
// position the NKV key heads, rotated for llama at that position, then the NKV value heads
// (kernels/attention_decode.h). Memory: n_layer * max_tokens * 2*NKV*HS floats for the cache,
// plus activations of kPrefillChunk rows.
// Not thread-safe: one session per thread; several sessions may share one params.
#pragma once

#include <cstdint>
#include <span>

#include "core/buffer.h"
#include "model/block.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/parameters.h"
#include "model/rope_tables.h"

namespace dt {

class InferenceSession {
 public:
  // Prompt rows run through the blocks together: enough for the linear layers' GEMMs to run at
  // speed, few enough that the activations stay small beside the weights whatever max_tokens is.
  static constexpr int kPrefillChunk = 128;

  // params: f32 parameters on the CPU (a Transformer's params(), or loaded from a checkpoint);
  // the model is params.layout().config(). They are read, not copied, and must outlive the
  // session. max_tokens: the cache's capacity, prompt and generated tokens together, in
  // [1, model.max_seq_len]. Throws dt::Error naming a bad value.
  InferenceSession(const FlatTensors& params, int max_tokens);

  const ModelConfig& config() const { return params_.layout().config(); }
  int max_tokens() const { return max_tokens_; }
  int size() const { return size_; }  // tokens in the cache: the position the next one takes

  // Appends prompt (at least one token) to the sequence; an empty session starts it at position
  // 0. The returned logits are valid until the next call. Throws dt::Error, before anything is
  // changed, for an id outside [0, V) or when the cache cannot hold the tokens.
  std::span<const float> prefill(std::span<const int32_t> prompt);
  std::span<const float> next(int32_t token) { return prefill({&token, 1}); }
  // Empties the cache for a new sequence (no memory is freed or allocated).
  void reset() { size_ = 0; }

 private:
  class CachedAttention;
  void check_tokens(std::span<const int32_t> tokens) const;
  // Runs M <= kPrefillChunk tokens at positions size_.. size_ + M - 1 and appends them.
  void forward_chunk(std::span<const int32_t> tokens);
  // Copies the k and v heads of qkv's rows into layer l's cache at the rows' positions, and the
  // q heads into q (M, NH*HS).
  void append_to_cache(int layer, Tensor qkv, Tensor q);
  Tensor cache(int layer) const;  // (max_tokens, 2*NKV*HS)

  const FlatTensors& params_;
  int max_tokens_;
  int chunk_rows_;  // activation rows: min(max_tokens, kPrefillChunk)
  int size_ = 0;
  Embedding embedding_;
  std::vector<Block> blocks_;
  Norm ln_f_;
  ColumnParallelLinear output_;
  Buffer cache_;
  Buffer acts_;
  // Views of acts_: (chunk_rows_, width) each; the residual stream x is updated in place.
  Tensor ids_, x_, ln_, mean_, rstd_, qkv_, q_, atty_, proj_out_, fch_, fch_act_;
  Tensor logits_;  // (1, Vp) of the last position
  // The expert blocks' (model/block_tensors.h), for R rows and R·top_k assignments; empty for a
  // dense model.
  ExpertActivations experts_;
  QkActivations qk_;  // where the model has query and key norms
  RopeTables rope_;  // llama only: positions [0, max_tokens)
};

}  // namespace dt
