// The sizes of a GPT-2 model worked out by hand from its dimensions alone: the expectations of
// the memory tests (plan/memory_test.cpp, parallel/data_parallel_test.cpp,
// train/run_config_test.cpp), written without model/parameters.h or model/transformer.h, whose
// sizes those tests check.
//
// They hold for shapes whose every tensor is whole 16-element groups (C a multiple of 16; the
// stored vocabulary is one of 128), so that the layout has no gaps between tensors, and for
// micro-batches of a multiple of 32 rows, so that every activation region is whole 64-byte lines.
#pragma once

#include <cstdint>

namespace dt::testing {

struct Gpt2Shape {
  int64_t layers;        // L
  int64_t width;         // C
  int64_t heads;         // NH
  int64_t stored_vocab;  // Vp: the vocabulary padded to a multiple of 128 rows
  int64_t positions;     // rows of the position embedding
};

// Ψ: the elements of the flat parameter buffer, every unit (the embeddings wte and wpe, each
// block, the head's ln_f; the output projection is wte) padded to a multiple of `unit_multiple`:
// 16 for one process, 16 × ranks under ZeRO.
int64_t gpt2_stored_elements(const Gpt2Shape& shape, int64_t unit_multiple = 16);

// The bytes a micro-batch of `rows` tokens keeps for backward (tag activations): values in the
// model's precision of `element_bytes`, per-row statistics in f32. Under full recomputation one
// block's regions are shared by every block and only each block's output is kept.
int64_t gpt2_saved_activation_bytes(const Gpt2Shape& shape, int64_t rows, int64_t element_bytes, bool full_recompute);

// The bytes of backward's working gradients, shared by every block (tag workspace).
int64_t gpt2_backward_scratch_bytes(const Gpt2Shape& shape, int64_t rows, int64_t element_bytes);

}  // namespace dt::testing
