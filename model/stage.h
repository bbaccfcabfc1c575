// A contiguous range of the layout's units — optionally the embeddings, blocks [first, end),
// optionally the head (the final norm, the output projection and the loss) — run forward and
// backward one micro-batch at a time. The whole model is one stage covering every unit
// (model/transformer.h); pipeline parallelism gives each rank a stage, and a schedule decides
// the order of the micro-batches' forward and backward.
//
//   forward(k, in)     in: tokens (B, T) i32 when the stage has the embeddings, else the previous
//                      stage's output for tokens of shape (B, T): (boundary_rows(B*T), C) — all
//                      B*T rows, or with sequence parallelism this rank's part. Returns the
//                      logits (B*T, Vp) when it has the head, else its output, of that shape.
//   loss(k, targets)   the head's: the sum of the per-token losses, and with a gradient the
//                      loss's gradient in place of the logits.
//   backward(k, ...)   from the loss's gradient (the head) or the output's gradient; adds every
//                      parameter's gradient and returns the input's gradient (B, T, C), or none
//                      when the stage has the embeddings.
//   backward_weight(k) for a stage made to defer them (zero-bubble pipeline schedules): backward
//                      with weights_now false gives the input's gradient and adds only the
//                      norms' gradients, keeping what the weight pass reads with micro-batch k's
//                      activations; backward_weight(k) then adds the linear layers', the output
//                      projection's and the embeddings' gradients, each tensor's the same bits as
//                      at once when the micro-batches' weight passes run in their backwards' order.
//
// Micro-batch k's activations live in the stage's ActivationStore (model/activation_store.h)
// from its forward until release(k): several micro-batches may be held at once. The stage calls
// the unit hooks (model/unit_hooks.h) for each of its units as the passes reach them.
// Weights are read from `weights` and gradients added into `grads`, flat buffers of the layout
// the stage was made with. Under tensor parallelism that layout is this rank's shard
// (model/tensor_shard.h), the logits are this rank's vocabulary rows, and the stage's blocks,
// embeddings and head communicate through `regions` (model/parallel_regions.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "model/activation_store.h"
#include "model/block.h"
#include "model/layers.h"
#include "model/rope_tables.h"
#include "model/unit_hooks.h"

namespace dt {

// One micro-batch of a step.
struct MicroBatch {
  Tensor tokens;   // (B, T) i32
  Tensor targets;  // (B, T) i32, kernels::kIgnoreIndex where there is no target
};

// A stage's activation memory: kept per micro-batch in flight, shared and scratch once.
struct ActivationBytes {
  int64_t kept = 0, shared = 0, scratch = 0;
  int64_t with_micro_batches(int64_t held) const { return kept * held + shared + scratch; }
};

class Stage {
 public:
  // Micro-batches of at most (batch_size, seq_len) tokens, activations in `precision` on `device`.
  // `regions` must outlive the stage. With `deferred_weights` each micro-batch also keeps what a
  // deferred weight pass reads (no recomputation, no unit hooks). `scope` (which must outlive the
  // stage) says where its tokens lie in their sequences and makes its attention core: under
  // context parallelism seq_len is this rank's tokens of each sequence. `states` (which must
  // outlive the stage) holds its blocks' per-linear state (model/linear_state.h). `experts` (which
  // must outlive the stage, holding the layout's experts) is where its expert blocks' rows travel.
  Stage(const ParameterLayout& layout, StageUnits units, Recompute recompute, DType precision, Device device,
        int batch_size, int seq_len, ParallelRegions& regions = ParallelRegions::single_rank(),
        bool deferred_weights = false, const AttentionScope& scope = AttentionScope::local(),
        const LinearStates& states = LinearStates::none(), ExpertExchange& experts = ExpertExchange::single_rank());
  ~Stage();
  // The activation memory such a stage lays out, without making one, on tensor-parallel rank
  // `shard`, with or without sequence parallelism, holding expert-parallel rank `experts`'s experts.
  static ActivationBytes activation_bytes(const ModelConfig& config, StageUnits units, Recompute recompute,
                                          DType precision, int batch_size, int seq_len, TensorShard shard = {},
                                          bool sequence_parallel = false, bool deferred_weights = false,
                                          ExpertShard experts = {});

  const StageUnits& units() const { return units_; }
  // Its blocks, first_block first.
  const std::vector<Block>& blocks() const { return blocks_; }
  // What block i's forwards counted since the last reset (model/block_tensors.h): for an expert
  // block its (E) loads and routers' losses; empty loads for a dense one (model/expert_balance.h).
  const ExpertRecord& expert_record(size_t i) const { return expert_records_[i]; }
  void reset_expert_records();
  // The scale the token losses' gradient carries into backward (loss()'s loss_scale, the head's):
  // the routers' losses' gradients take it too (model/moe_mlp.h). Whoever runs the passes sets it
  // before a backward of a model with those losses.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  // The hook calls a stage over `units` of `layout` makes for one micro-batch: its forward with
  // backward following, then its backward (weights now). What the passes do, as data: plan/
  // walks it to size the units data parallelism holds at once.
  static std::vector<UnitHookCall> unit_hook_calls(const ParameterLayout& layout, StageUnits units);

  // tokens: the micro-batch's shape (B, T), when `in` is activations.
  Tensor forward(int k, Tensor in, const FlatTensors& weights, bool backward_follows, Shape tokens = {});
  // The rows of activations that enter and leave the stage for `tokens` tokens on this rank.
  int64_t boundary_rows(int64_t tokens) const;
  double loss(int k, Tensor targets, float loss_scale, bool with_gradient);
  // dout: the output's gradient (boundary_rows, C), undefined when the stage has the head. tokens: the
  // micro-batch's, when the stage has the embeddings. The returned gradient is valid until the
  // next backward.
  Tensor backward(int k, Tensor dout, Tensor tokens, const FlatTensors& weights, const FlatTensors& grads,
                  bool weights_now = true);
  // The weight pass backward(k, ..., weights_now = false) deferred; tokens: the micro-batch's, when
  // the stage has the embeddings.
  void backward_weight(int k, Tensor tokens, const FlatTensors& grads);
  void release(int k) {
    store_.release(k);
    shapes_.erase(k);
  }

  // Micro-batch k's logits (B*T, this rank's stored vocabulary rows) and per-token losses (B, T):
  // the head's.
  Tensor logits(int k) const;
  Tensor losses(int k) const;

 private:
  struct ActivationRegions;
  struct Tokens {
    int64_t B = 0, T = 0;
  };
  BlockActivations block_activations(int k, size_t i, int64_t N) const;
  // Block i's gradients for a deferred weight pass, kept with micro-batch k.
  BlockGradients deferred_gradients(int k, size_t i, int64_t N) const;
  // Block i's expert gradients (none for a dense block): working space, but for what a deferred
  // weight pass reads, kept with micro-batch k.
  ExpertGradients expert_gradients(int k, size_t i, int64_t N, bool deferred) const;
  Tensor block_input(int k, size_t i, int64_t N) const;
  Tensor region(int k, const ActivationRegion& r, int64_t N) const { return store_.view(k, r, N); }
  // Region r as per-row statistics (N), or none for a norm that keeps none (RMSNorm's mean).
  Tensor rows(int k, const ActivationRegion& r, int64_t N) const;
  // The rows this rank's experts receive at most when each rank routes P.
  int64_t received_rows(int64_t P) const {
    return config_.moe.received_rows(P, dims_.local_experts.size(), dims_.expert_ranks);
  }
  // The order the passes reach the stage's units of the layout.
  struct UnitOrder {
    UnitOrder(const ParameterLayout& layout, StageUnits units);
    // The unit after u whose weights a pass reads next: forward goes up to the head, backward
    // down to the first block (the lookup's backward reads no weights).
    std::optional<size_t> forward_next(size_t u) const;
    std::optional<size_t> backward_next(size_t u) const;
    // Whether the output projection reads the embeddings' wte, which forward then holds to the end.
    bool tied_here() const { return embeddings && head && output_unit == 0; }

    std::vector<size_t> forward;  // forward's order
    bool embeddings, head;
    size_t head_unit = 0, output_unit = 0;  // the output projection's: the head's, or the embeddings' when tied
  };
  void weights_needed(size_t u, std::optional<size_t> next) const;
  void weights_done(size_t u) const;
  void gradients_needed(size_t u) const;
  void gradients_final(size_t u) const;

  const ModelConfig& config_;
  const ShardDims& dims_;
  StageUnits units_;
  ParallelRegions& parallel_;
  const AttentionScope& scope_;
  std::vector<Block> blocks_;
  std::vector<ExpertRecord> expert_records_;  // by block
  std::optional<float> loss_scale_;
  float loss_scale() const;
  std::optional<Embedding> embedding_;
  std::optional<Norm> ln_f_;
  std::optional<ColumnParallelLinear> output_;
  UnitOrder order_;
  std::unique_ptr<ActivationRegions> activation_regions_;
  ActivationStore store_;
  std::map<int, Tokens> shapes_;  // of each micro-batch held
  RopeTables rope_;              // llama: positions [0, seq_len)
  UnitHooks* hooks_ = nullptr;
  bool deferred_weights_;
};

}  // namespace dt
