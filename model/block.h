// One transformer block's forward and the family-specific pieces around it, written once for
// the two callers that run the model: training (model/transformer.h keeps every activation for
// backward) and generation (model/inference.h keeps only keys and values, in a cache). They
// differ in where activations live and in the attention core; the math is model/transformer.h's:
//
//   block l:  x' = x + attn.proj(attention(attn.qkv(norm_1(x))))
//             x  = x' + mlp.proj(act(mlp.fc(norm_2(x'))))
//
// with LayerNorm, biases and GELU for gpt2, RMSNorm, no biases and SwiGLU for llama.
// Weights are the stored views of a FlatTensors (model/parameters.h) in the activations' dtype.
#pragma once

#include <functional>
#include <string>

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/parameters.h"

namespace dt {

// The family's norm of parameter prefix `name` ("h.3.ln_1", "ln_f"): sets out (N, C) and rstd
// (N), and mean (N) for gpt2's LayerNorm (RMSNorm has none; mean is not read for llama).
void norm_forward(const ModelConfig& config, const FlatTensors& weights, const std::string& name, Tensor out,
                  Tensor mean, Tensor rstd, Tensor inp);
// The residual add fused with the norm after it: res = a + b, then the family's norm of res
// into out, mean and rstd, with the bits of the two ops one after the other (kernels/
// layernorm.h). res may be a or b.
void add_norm_forward(const ModelConfig& config, const FlatTensors& weights, const std::string& name, Tensor res,
                      Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b);
// `name`.bias of `tensors` where the family has biases (gpt2), else an undefined tensor.
Tensor family_bias(const ModelConfig& config, const FlatTensors& tensors, const std::string& name);
// The output projection's parameter: wte when the embeddings are tied, else lm_head.
const char* output_weight_name(const ModelConfig& config);

// llama's rotary tables for positions [0, rows): cos and sin, (rows, HS/2) f32 each, in one
// buffer (kernels/rope.h). Rows [p, p + T) of them rotate T positions starting at position p.
struct RopeTables {
  Buffer buffer;
  Tensor cos, sin;
};
RopeTables make_rope_tables(const ModelConfig& config, int rows);

// One block's activations for N rows, (N, width) views that block_forward sets. mean views are
// gpt2's only. res2 and res3 may be the same tensor as the block's input x (generation updates
// the residual stream in place; kernels/add.h allows it); the others must be distinct.
// proj_out is scratch for both branches' output projections.
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, proj_out, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, res3;
};

// The attention core: sets atty (N, NH*HS) from qkv (N, (NH + 2*NKV) * HS), which it may modify
// in place (llama rotates q and k). Training runs kernels/attention.h over the micro-batch;
// generation appends k and v to its cache and runs kernels/attention_decode.h.
using AttentionCore = std::function<void(Tensor qkv, Tensor atty)>;

// Block `layer` from its input x (N, C): sets every activation in `a`, the output in a.res3.
void block_forward(const ModelConfig& config, const FlatTensors& weights, int layer, Tensor x,
                   const BlockActivations& a, const AttentionCore& attention);

}  // namespace dt
