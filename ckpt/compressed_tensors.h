// Quantized linear weights in safetensors, in compressed-tensors' layout: what vLLM and
// transformers read as quant_method "compressed-tensors", and what `dtrain export --hf
// --quantize` writes. A weight "P.weight" (rows × cols, Hugging Face's (out, in)) becomes:
//
//   int8  (format int-quantized, strategy channel)  P.weight I8 [rows, cols], P.weight_scale F32 [rows, 1]
//   q8_0  (format int-quantized, group of 32)       P.weight I8 [rows, cols], P.weight_scale F32 [rows, cols / 32]
//   q4_0  (format pack-quantized, 4 bits, group 32) P.weight_packed I32 [rows, cols / 8],
//                                                   P.weight_scale F32 [rows, cols / 32], P.weight_shape I64 [2]
//
// Every format is symmetric (no zero point) and dequantizes as w = q · scale. The values q and
// scales are kernels/weight_quant.h's, so the file holds exactly what post-training
// quantization evaluates and quantization-aware training trains with. The fp16 scales of q8_0
// and q4_0 are stored widened to F32, exactly: a runtime that computes q · scale in the scale's
// dtype then rounds nothing, and reading the file back gives our values bit for bit. Packed
// 4-bit values are stored offset by 8 (0..15), eight to an int32, column 8k + j in bits 4j..4j+3
// of element k (compressed-tensors' pack_to_int32).
//
// Reading takes what other tools write too: int-quantized I8 and pack-quantized 4- or 8-bit
// weights, per channel or per group (as the scale's shape says), scales in F32, BF16 or F16,
// and an optional I8 zero point: w = (q - zero point) · scale, in f32.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/buffer.h"
#include "kernels/weight_quant.h"

namespace dt::ckpt {

// Adds the tensors of weight `prefix` ("model.layers.0.self_attn.q_proj"), w (rows × cols, f32)
// quantized in `format`, to `writer`; their memory lives in `storage` until the writer writes.
void add_compressed_weight(SafetensorsWriter& writer, std::deque<Buffer>& storage, const std::string& prefix,
                           kernels::WeightFormat format, std::span<const float> w, int64_t rows, int64_t cols);

// config.json's "quantization_config" for a model whose Linear modules hold their weights in
// `format`, but for the modules named in `ignored` (a tied lm_head).
nlohmann::json compressed_tensors_config(kernels::WeightFormat format, const std::vector<std::string>& ignored);

// Whether `reader` holds weight `prefix` compressed (it has P.weight_scale).
bool holds_compressed_weight(const SafetensorsReader& reader, const std::string& prefix);
// Checks the tensors of compressed weight `prefix` against the (rows, cols) the model needs and
// returns their names; throws dt::Error naming the file and the tensor.
std::vector<std::string> check_compressed_weight(const SafetensorsReader& reader, const std::string& prefix,
                                                 int64_t rows, int64_t cols);
// Dequantizes weight `prefix` (checked) into out, rows × cols.
void read_compressed_weight(const SafetensorsReader& reader, const std::string& prefix, int64_t rows, int64_t cols,
                            std::span<float> out);

}  // namespace dt::ckpt
