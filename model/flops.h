// The FLOPs of a forward pass, per token, counted from the architecture (multiply-add = 2):
//   per block   2 C (q + k + v widths)            the fused qkv projection (grouped-query: k, v
//                                                 have n_kv_head heads)
//             + 2 C C                             the attention output projection
//             + 2 C F_in + 2 F C                  the MLP (F_in = 2F for SwiGLU's gate and up)
//             + 2 C (T + 1)                       causal attention: QK^T and PV against the
//                                                 (T + 1) / 2 keys a position sees on average
//   the head    2 C V                             the output projection (unpadded vocabulary)
// The embeddings' lookup and the norms are memory-bound and not counted. What MFU counts
// (train/throughput.h) and what the pipeline's stages are balanced by (parallel/pipeline/partition.h).
#pragma once

#include "model/config.h"

namespace dt {

// The attention core's (QK^T and PV, causal) per token and block, in sequences of seq_len.
double attention_core_flops(const ModelConfig& model, int seq_len);
// One block's whole forward per token.
double block_flops(const ModelConfig& model, int seq_len);
// The head's: the output projection.
double head_flops(const ModelConfig& model);
// The whole model's forward per token: every block and the head.
double forward_flops_per_token(const ModelConfig& model, int seq_len);

}  // namespace dt
