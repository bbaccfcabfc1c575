// Model weights under Hugging Face's tensor names and layouts, in safetensors files.
//
//   gpt2 (GPT2LMHeadModel):   transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...
//       Its linear layers are Conv1D modules whose weight is (in, out): the transpose of ours.
//       Files saved from GPT2Model (the hub's "gpt2") lack the "transformer." prefix; both load.
//   llama (LlamaForCausalLM): model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ...
//       Our fused attn.qkv stacks q_proj, k_proj and v_proj by rows, and mlp.fc stacks gate_proj
//       over up_proj; lm_head.weight exists only when the embeddings are untied.
//
// Loading checks every tensor a model needs before reading any (name, dtype, shape) and
// rejects tensors the model has no place for, so a file of the other family, of another size,
// or with a tensor missing stops with a message naming the file and the tensor. F32, BF16 and
// F16 files load (reduced precision is widened exactly); saving writes F32. A linear layer's
// weight may instead be quantized, in compressed-tensors' layout (ckpt/compressed_tensors.h):
// saving writes every quantized weight (model/quantized_weights.h) so when given a format, and
// loading dequantizes any weight stored so.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernels/weight_quant.h"
#include "model/parameters.h"

namespace dt::ckpt {

// One Hugging Face tensor and where it sits in ours: rows [row_begin, row_begin + rows) of our
// (out, in) parameter, transposed in the file when `transposed` (GPT-2's Conv1D).
struct HfPiece {
  std::string hf_name;
  int64_t row_begin = 0;
  int64_t rows = 0;
  bool transposed = false;
};

// The Hugging Face tensors that make up parameter `p`, in row order.
std::vector<HfPiece> hf_pieces(const ModelConfig& config, const ParamInfo& p);

void save_hf_safetensors(const FlatTensors& params, const std::filesystem::path& path,
                         std::optional<kernels::WeightFormat> quantized = std::nullopt);
void load_hf_safetensors(FlatTensors& params, const std::filesystem::path& path);

}  // namespace dt::ckpt
