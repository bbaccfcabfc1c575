// The decoder-only transformer of both families: forward and backward written by hand,
// block by block.
//
//   gpt2:   x0 = wte[tokens] + wpe[0:T]
//           block l:  x' = x + attn.proj(attention(attn.qkv(ln_1(x))))
//                     x  = x' + mlp.proj(gelu(mlp.fc(ln_2(x'))))
//           logits = ln_f(x_L) @ wte^T                 (tied input and output embedding)
//   llama:  x0 = wte[tokens]
//           block l:  x' = x + attn.proj(attention(rope(attn.qkv(rmsnorm_1(x)))))
//                     x  = x' + mlp.proj(swiglu(mlp.fc(rmsnorm_2(x'))))
//           logits = rmsnorm_f(x_L) @ (lm_head or wte)^T
//   both:   losses[n] = cross_entropy(logits[n], targets[n])
//
// LayerNorm and linear layers carry biases in gpt2 only; attention is grouped-query
// (n_kv_head key/value heads) in llama. Shapes: tokens, targets (B, T) i32; activations
// (B*T, width); logits (B*T, Vp) internally.
// The model owns its parameters, gradients (each one flat buffer, model/parameters.h) and one
// stage covering every unit (model/stage.h), which holds the activations of one micro-batch of
// at most (batch_size, seq_len) tokens, allocated once.
// Not thread-safe: one model per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/float8_recipe.h"
#include "model/linear_state.h"
#include "model/parameters.h"
#include "model/recompute.h"
#include "model/stage.h"
#include "model/unit_hooks.h"

namespace dt {


// The stages of the model one rank runs: a single one covering every unit, or under pipeline
// parallelism the schedule's stages placed on this rank (parallel/pipeline/).
struct RankStages {
  std::vector<StageUnits> all;    // every stage of the model, by index; none: one stage of every unit
  std::vector<int> held;          // the indices of this rank's
  bool deferred_weights = false;  // zero-bubble schedules run backward's weight pass apart
};

class Transformer {
 public:
  // Validates the config and the sizes, then allocates; parameters start at zero until
  // init_parameters() or a load fills them.
  // precision: how activations and the weights the kernels read are stored, f32, bf16 or f16.
  // With bf16 or f16, params() stays the f32 master copy (tagged optimizer_state, as ZeRO
  // counts it) that the optimizer updates, init fills and checkpoints save; the optimizer rounds
  // it into the 16-bit compute copy (tagged parameters) after each update and after the
  // parameters are set (AdamW::round_weights, optim/adamw.h): forward reads the copy as it is.
  // Gradients are f32. Without master weights (storage.master_weights false: ZeRO keeps them,
  // sharded) params() holds nothing.
  // device: where every buffer lives and every kernel runs; tokens and targets given to
  // forward() are on it too.
  // storage: the parameter layout's unit multiple and how parameters and gradients are held
  // (model/parameters.h): ZeroPolicy::storage under ZeRO, else one process's.
  // A run checks its memory before it makes the model (plan/memory.h).
  // regions: how the model communicates under tensor parallelism (model/parallel_regions.h;
  // parallel/tensor/tensor_parallel.h), which must outlive it: the model is then this rank's
  // shard (regions->shard(), model/tensor_shard.h). None: one rank's, the whole model.
  // stages: under pipeline parallelism, the stages this rank runs; the model then holds only
  // their units (HeldUnits, model/parameters.h) and runs them through stage(), not forward().
  // scope: under context parallelism (parallel/context/), where this rank's seq_len tokens lie in
  // their sequences and how they attend across the cp group; it must outlive the model.
  // linear_states: the per-linear state kinds its blocks' linear layers carry
  // (model/linear_state.h), besides the model's own (an expert bias, model/expert_balance.h),
  // laid out over the blocks it holds, on `device`, tagged parameters; none by default, which
  // allocates nothing.
  // experts: under expert parallelism (parallel/expert/expert_parallel.h), where an expert block's
  // rows travel to their experts; the model then holds this rank's experts (experts->shard()). It
  // must outlive the model. None: every expert here.
  // float8: FP8 training (model/float8_recipe.h): its linear layers' products in FP8, with the
  // recipe's per-linear state; it must outlive the model. None: the products in `precision`.
  // qat: quantization-aware training's recipe, the format the linear layers' weights are
  // fake-quantized in (model/quantized_weights.h says which) and whether their inputs are; none by
  // default.
  Transformer(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute = Recompute::none,
              DType precision = DType::f32, Device device = Device::cpu, const ParameterStorage& storage = {},
              ParallelRegions* regions = nullptr, const RankStages& stages = {},
              const AttentionScope* scope = nullptr, const std::vector<LinearStateDeclaration>& linear_states = {},
              ExpertExchange* experts = nullptr, const Float8Training* float8 = nullptr,
              std::optional<QatRecipe> qat = std::nullopt);
  ~Transformer();

  // The flat buffers such a model makes, each with its tag, dtype and storage: the f32
  // parameters (a 16-bit run's master weights, tagged optimizer_state and held only where kept
  // here), the f32 gradients, and in 16-bit the compute copy. The constructor makes exactly these;
  // plan/memory.h counts them.
  struct FlatBufferSpec {
    MemTag tag;
    DType dtype;
    Storage storage;
  };
  struct ParameterBuffers {
    FlatBufferSpec params, grads;
    std::optional<FlatBufferSpec> weights;
  };
  static ParameterBuffers parameter_buffers(DType precision, const ParameterStorage& storage);

  const ModelConfig& config() const { return layout_.config(); }
  const ParameterLayout& layout() const { return layout_; }
  // How the model communicates: ParallelRegions::single_rank() unless tensor-parallel.
  ParallelRegions& regions() const { return regions_; }
  // Where its expert blocks' rows travel to their experts (one rank's without expert parallelism).
  ExpertExchange& experts() const { return experts_; }
  FlatTensors& params() { return params_; }
  FlatTensors& grads() { return grads_; }
  // Its linear layers' per-linear state: what checkpoints save and load (train/training_checkpoint.h).
  LinearStates& linear_states() { return linear_states_; }
  const LinearStates& linear_states() const { return linear_states_; }
  // The weights the kernels read: the 16-bit compute copy, or the f32 parameters themselves.
  FlatTensors& weights() { return compute_weights_ ? *compute_weights_ : params_; }
  const FlatTensors& weights() const { return compute_weights_ ? *compute_weights_ : params_; }
  int batch_size() const { return batch_size_; }
  int seq_len() const { return seq_len_; }
  Recompute recompute() const { return recompute_; }
  DType precision() const { return precision_; }
  Device device() const { return device_; }
  // Whether a 16-bit run's f32 master weights are kept here (params()).
  bool keeps_master_weights() const { return master_weights_; }

  // The model's stages by index: this rank's, nullptr for the others'.
  std::vector<Stage*> stages() const;
  // Whether the model is one stage of every unit (forward() and forward_backward() run it).
  bool single_stage() const { return stages_.size() == 1; }

  // Runs the forward pass on tokens (B, T) and returns the sum of per-token losses over the
  // targets that are not ignore_index (kernels/cross_entropy.h). targets may be undefined:
  // then only logits are computed and 0 is returned. Logits are kept (copy_logits).
  double forward(Tensor tokens, Tensor targets);

  // Forward and backward of loss_scale * (sum of per-token losses): adds the gradient of every
  // parameter into grads() (accumulation over micro-batches is the caller's zeroing policy).
  // Returns the unscaled sum of losses. The logits buffer holds their gradient afterwards.
  double forward_backward(Tensor tokens, Tensor targets, float loss_scale);

  // The hooks every pass calls for each unit (model/unit_hooks.h), or none (nullptr).
  void set_unit_hooks(UnitHooks* hooks);

  // Copies the last forward's logits, without vocabulary padding, into out (B, T, V) f32 on
  // the CPU. One rank's model only.
  void copy_logits(Tensor out) const;
  // Per-token losses of the last forward, (B, T) f32.
  Tensor losses() const;
  // Number of targets in (B, T) that are not ignore_index: the loss's denominator.
  static int64_t count_targets(Tensor targets);

 private:
  // The config and sizes checked, and on a GPU a head size the attention kernels take.
  static const ModelConfig& validated(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                                      Device device);
  void check_inputs(Tensor tokens, Tensor targets) const;

  ParallelRegions& regions_;
  ExpertExchange& experts_;
  ParameterLayout layout_;
  FlatTensors params_;
  FlatTensors grads_;
  LinearStates linear_states_;  // before the stages, whose layers view it
  Recompute recompute_;
  DType precision_;
  Device device_;
  std::optional<FlatTensors> compute_weights_;
  bool master_weights_ = false;  // a 16-bit run's f32 master weights are here (params_)
  int batch_size_;
  int seq_len_;
  // The single stage's micro-batch 0 is the last forward's.
  Stage& single() const;
  std::vector<std::unique_ptr<Stage>> stages_;  // by index: this rank's, null for others'
};

}  // namespace dt
