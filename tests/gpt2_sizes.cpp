#include "tests/gpt2_sizes.h"

namespace dt::testing {

int64_t gpt2_stored_elements(const Gpt2Shape& s, int64_t unit_multiple) {
  const auto padded = [unit_multiple](int64_t elements) {
    return (elements + unit_multiple - 1) / unit_multiple * unit_multiple;
  };
  const int64_t C = s.width;
  const int64_t embeddings = s.stored_vocab * C + s.positions * C;  // wte, wpe
  // ln_1 and ln_2 (weight and bias, C each), attn.qkv (3C x C, 3C), attn.proj (C x C, C),
  // mlp.fc (4C x C, 4C), mlp.proj (C x 4C, C).
  const int64_t block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  const int64_t head = 2 * C;  // ln_f
  return padded(embeddings) + s.layers * padded(block) + padded(head);
}

int64_t gpt2_saved_activation_bytes(const Gpt2Shape& s, int64_t rows, int64_t element_bytes, bool full_recompute) {
  const int64_t C = s.width, L = s.layers;
  const int64_t blocks_kept = full_recompute ? 1 : L;
  // Per row, in the model's precision: the embeddings' sum; per block ln_1 (C), qkv (3C), the
  // attention's output (C), the residual after it (C), ln_2 (C), fc (4C) and its GELU (4C), and
  // the block's output (C, kept for every block); ln_f (C) and the logits (Vp).
  const int64_t values = C + blocks_kept * 15 * C + L * C + C + s.stored_vocab;
  // In f32: per block both norms' mean and rstd and the attention's log-sum-exp per head;
  // ln_f's mean and rstd, and the token's loss.
  const int64_t statistics = blocks_kept * (4 + s.heads) + 3;
  return rows * (values * element_bytes + statistics * 4);
}

int64_t gpt2_backward_scratch_bytes(const Gpt2Shape& s, int64_t rows, int64_t element_bytes) {
  // Per row: the residual's gradient and a temporary (C each), qkv's (3C), fc's and the GELU's (4C each).
  return rows * element_bytes * 13 * s.width;
}

}  // namespace dt::testing
