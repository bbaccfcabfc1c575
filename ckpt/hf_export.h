// A model as a Hugging Face directory that transformers loads with AutoModelForCausalLM and
// AutoTokenizer:
//   config.json              the model description (ckpt/hf_config.h), torch_dtype float32
//   model.safetensors        the weights in Hugging Face's names and layouts (ckpt/hf_checkpoint.h);
//                            quantized, the linear layers' weights in compressed-tensors' layout
//                            (ckpt/compressed_tensors.h), described by config.json's
//                            quantization_config, which vLLM reads
//   generation_config.json   bos/eos token ids and the sampling defaults
//   tokenizer.json           the tokenizer, copied as it is (already Hugging Face's format)
//   tokenizer_config.json    PreTrainedTokenizerFast over tokenizer.json, with its special tokens
// The directory is written beside OUT as OUT.tmp and renamed into place, so a failed export
// leaves nothing that looks complete; an OUT that exists and is not empty is refused.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "kernels/weight_quant.h"
#include "model/parameters.h"

namespace dt::ckpt {

struct HfTokenizerFiles {
  std::filesystem::path tokenizer_json;
  std::string eos_token;  // the end-of-text token's text, e.g. "<|endoftext|>"
  int eos_token_id = 0;
};

struct HfGenerationDefaults {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
};

// `quantized`: the linear layers' weights in that format. A Llama-family model only: GPT-2's
// Conv1D weights are (in, out), which compressed-tensors and its runtimes do not quantize. Every
// refusal comes before anything is written.
void export_hf(const FlatTensors& params, const std::optional<HfTokenizerFiles>& tokenizer,
               const HfGenerationDefaults& generation, const std::filesystem::path& out,
               std::optional<kernels::WeightFormat> quantized = std::nullopt);

}  // namespace dt::ckpt
