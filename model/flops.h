// The FLOPs of a forward pass, per token, counted from the architecture (multiply-add = 2):
//   per block   2 C (q + k + v widths)            the fused qkv projection (grouped-query: k, v
//                                                 have n_kv_head heads)
//             + 2 C C                             the attention output projection
//             + 2 C F_in + 2 F C                  the MLP (F_in = 2F for SwiGLU's gate and up);
//                                                 a mixture of experts': the router's 2 C E,
//                                                 top_k experts' 2 C 2F_e + 2 F_e C, and a shared
//                                                 expert's and its gate's as a dense MLP's
//             + 2 C (T + 1)                       causal attention: QK^T and PV against the
//                                                 (T + 1) / 2 keys a position sees on average
//   the head    2 C V                             the output projection (unpadded vocabulary)
// The embeddings' lookup and the norms are memory-bound and not counted. What MFU counts
// (train/throughput.h), what the planner predicts (plan/step_time.h) and what the pipeline's
// stages are balanced by (parallel/pipeline/partition.h).
//
// A training step is three forward passes' worth (backward computes two products per forward
// one). Model FLOPs are what MFU counts; hardware FLOPs add the work recomputation repeats (the
// attention core for selective, every block's forward up to the MLP's activation for full), and
// give HFU. Neither counts the scores that flash attention recomputes inside its backward
// kernel, as FlashAttention's own figures do not. (PaLM's 6N + 12 L C T per token counts every
// embedding row and the full T x T score matrix; it reads about 5-30% higher at small sizes.)
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/recompute.h"

namespace dt {

// The attention core's (QK^T and PV, causal) per token and block, in sequences of seq_len.
double attention_core_flops(const ModelConfig& model, int seq_len);
// Block `layer`'s whole forward per token.
double block_flops(const ModelConfig& model, int layer, int seq_len);
// The head's: the output projection.
double head_flops(const ModelConfig& model);
// The whole model's forward per token: every block and the head.
double forward_flops_per_token(const ModelConfig& model, int seq_len);

struct StepFlops {
  double model = 0;     // what the architecture needs: MFU's numerator
  double hardware = 0;  // plus what the recomputation policy repeats: HFU's numerator
};

// FLOPs of a training step (forward and backward) over `tokens` tokens in sequences of seq_len.
StepFlops training_flops(const ModelConfig& model, int seq_len, int64_t tokens, Recompute recompute);

}  // namespace dt
