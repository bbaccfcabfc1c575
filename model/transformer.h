// GPT-2: forward and backward written by hand, block by block.
//
//   x0 = wte[tokens] + wpe[0:T]
//   block l:  x' = x + attn.proj(attention(attn.qkv(ln_1(x))))
//             x  = x' + mlp.proj(gelu(mlp.fc(ln_2(x'))))
//   logits = ln_f(x_L) @ wte^T                    (tied input and output embedding)
//   losses[n] = cross_entropy(logits[n], targets[n])
//
// Shapes: tokens, targets (B, T) i32; activations (B*T, C); logits (B*T, Vp) internally.
// The model owns its parameters, gradients (each one flat buffer, model/parameters.h) and the
// activations for one micro-batch of at most (batch_size, seq_len) tokens, allocated once.
// Not thread-safe: one model per thread.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "model/config.h"
#include "model/parameters.h"

namespace dt {

class GPT2 {
 public:
  // Validates the config and the sizes, then allocates; parameters start at zero until
  // init_parameters() or a load fills them.
  GPT2(const ModelConfig& config, int batch_size, int seq_len);
  ~GPT2();

  const ModelConfig& config() const { return layout_.config(); }
  const ParameterLayout& layout() const { return layout_; }
  FlatTensors& params() { return params_; }
  FlatTensors& grads() { return grads_; }
  int batch_size() const { return batch_size_; }
  int seq_len() const { return seq_len_; }

  // Runs the forward pass on tokens (B, T) and returns the sum of per-token losses over the
  // targets that are not ignore_index (kernels/cross_entropy.h). targets may be undefined:
  // then only logits are computed and 0 is returned. Logits are kept (copy_logits).
  double forward(Tensor tokens, Tensor targets);

  // Forward and backward of loss_scale * (sum of per-token losses): adds the gradient of every
  // parameter into grads() (accumulation over micro-batches is the caller's zeroing policy).
  // Returns the unscaled sum of losses. The logits buffer holds their gradient afterwards.
  double forward_backward(Tensor tokens, Tensor targets, float loss_scale);

  // Copies the last forward's logits, without vocabulary padding, into out (B, T, V) f32.
  void copy_logits(Tensor out) const;
  // Per-token losses of the last forward, (B, T) f32.
  Tensor losses() const;
  // Number of targets in (B, T) that are not ignore_index: the loss's denominator.
  static int64_t count_targets(Tensor targets);

 private:
  struct Activations;
  static const ModelConfig& validated(const ModelConfig& config, int batch_size, int seq_len);
  void check_inputs(Tensor tokens, Tensor targets) const;
  void forward_blocks(Tensor tokens);
  void backward_blocks(Tensor tokens);

  ParameterLayout layout_;
  FlatTensors params_;
  FlatTensors grads_;
  int batch_size_;
  int seq_len_;
  int current_batch_ = 0;  // B and T of the last forward (at most batch_size_, seq_len_)
  int current_seq_ = 0;
  std::unique_ptr<Activations> acts_;
};

}  // namespace dt
