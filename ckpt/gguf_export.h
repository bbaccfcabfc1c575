// A model as one GGUF file (ckpt/gguf.h) that llama.cpp runs with no other file: the model's
// description, its tokenizer and its weights, in llama.cpp's names and layouts.
//
//   metadata   general.architecture "gpt2" or "llama", the sizes llama.cpp reads
//              (<arch>.block_count, .embedding_length, .feed_forward_length, .context_length,
//              .attention.head_count[_kv], the norm's epsilon, rotary's base and dimensions),
//              general.file_type, and the tokenizer: tokenizer.ggml.model "gpt2" (byte-level
//              BPE), .pre "gpt-2" or "llama-bpe" (its pre-tokenizer regex), .tokens (each as
//              GPT-2's byte-to-unicode text, the padded vocabulary's rows as unused tokens),
//              .token_type, .merges, .bos_token_id and .eos_token_id (the end-of-text token)
//   tensors    token_embd, position_embd (gpt2), blk.N.attn_norm, attn_qkv (gpt2) or attn_q,
//              attn_k, attn_v (llama), attn_output, ffn_norm, ffn_up, ffn_gate (llama), ffn_down,
//              output_norm, output (untied only), rope_freqs (Llama 3's frequency scaling), with
//              .weight and .bias as the model has them
//
// Llama's q and k rows are permuted per head from Hugging Face's rotate-half order to the
// interleaved pairs llama.cpp rotates (as its convert_hf_to_gguf.py does). A weight matrix of
// (out, in) is stored with dimensions [in, out]: our row-major layout as it is. In f32 and f16
// files every matrix is of that type; in q8_0 and q4_0 files the linear layers' weights are
// (model/quantized_weights.h, along each row, which must be a multiple of 32 long) and the
// embeddings f16. Norms and biases stay f32, as llama.cpp's converter keeps them. Dense models
// only: experts and qk-norm are refused, naming what is missing.
#pragma once

#include <filesystem>

#include "ckpt/gguf.h"
#include "data/tokenizer.h"
#include "model/parameters.h"

namespace dt::ckpt {

// The types a GGUF export writes its matrices in: f32, f16, q8_0, q4_0.
GgmlType parse_gguf_type(std::string_view name);

// Writes `params` (whole, on the host) with `tokenizer` as `out`; throws dt::Error before
// writing anything when the model or a matrix cannot be exported in `type`.
void export_gguf(const FlatTensors& params, const Tokenizer& tokenizer, GgmlType type, const std::filesystem::path& out);

}  // namespace dt::ckpt
