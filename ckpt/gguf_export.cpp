#include "ckpt/gguf_export.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>

#include "ckpt/hf_checkpoint.h"
#include "core/dtype.h"
#include "core/error.h"
#include "data/byte_unicode.h"
#include "kernels/weight_quant.h"
#include "model/quantized_weights.h"

namespace dt::ckpt {

namespace {

// llama.cpp's names for Hugging Face's: the model's own tensors, then a block's (blk.N.).
const std::map<std::string, std::string> kModelNames = {
    {"transformer.wte.weight", "token_embd.weight"},  {"transformer.wpe.weight", "position_embd.weight"},
    {"transformer.ln_f.weight", "output_norm.weight"}, {"transformer.ln_f.bias", "output_norm.bias"},
    {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
const std::map<std::string, std::string> kBlockNames = {
    // gpt2
    {"ln_1.weight", "attn_norm.weight"}, {"ln_1.bias", "attn_norm.bias"},
    {"attn.c_attn.weight", "attn_qkv.weight"}, {"attn.c_attn.bias", "attn_qkv.bias"},
    {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
    {"ln_2.weight", "ffn_norm.weight"}, {"ln_2.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight"}, {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight"}, {"mlp.c_proj.bias", "ffn_down.bias"},
    // llama
    {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

std::string gguf_name(const std::string& hf_name) {
  if (const auto it = kModelNames.find(hf_name); it != kModelNames.end()) return it->second;
  for (const std::string prefix : {"transformer.h.", "model.layers."}) {
    if (!hf_name.starts_with(prefix)) continue;
    const size_t dot = hf_name.find('.', prefix.size());
    if (const auto it = kBlockNames.find(hf_name.substr(dot + 1)); it != kBlockNames.end())
      return str("blk.", hf_name.substr(prefix.size(), dot - prefix.size()), ".", it->second);
  }
  throw Error(str("GGUF export: llama.cpp has no name for tensor ", hf_name, " here"));
}

uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 0;
    case GgmlType::f16:
      return 1;
    case GgmlType::q4_0:
      return 2;
    case GgmlType::q8_0:
      return 7;
  }
  return 0;
}

// One tensor of the file: rows [row_begin, row_begin + rows) of a parameter, and for Llama's q
// and k the heads whose rows are reordered.
struct Piece {
  std::string name;
  const ParamInfo* param;
  int64_t row_begin, rows, cols;
  int permuted_heads;  // 0: rows as they are
  GgmlType type;
};

// Rotate-half order to interleaved pairs, head by head: row 2i + h of a head of `hs` rows is
// row h · hs/2 + i of Hugging Face's.
void permute_rows(const float* in, float* out, int heads, int64_t rows, int64_t cols) {
  const int64_t hs = rows / heads, half = hs / 2;
  for (int head = 0; head < heads; ++head)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t h = 0; h < 2; ++h)
        std::memcpy(out + (head * hs + 2 * i + h) * cols, in + (head * hs + h * half + i) * cols,
                    static_cast<size_t>(cols) * sizeof(float));
}

void check_exportable(const ModelConfig& config) {
  if (config.moe.experts > 0)
    throw Error("GGUF export writes dense models; this one has experts (llama.cpp's MoE tensors are not written yet): "
                "export it with --hf instead");
  if (config.qk_norm)
    throw Error("GGUF export writes llama.cpp's llama architecture, which has no qk-norm; this model has "
                "model.qk_norm = true: export it with --hf instead");
}

std::string pre_tokenizer(const Tokenizer& tokenizer) {
  if (tokenizer.parts().pattern == kGpt2Pattern) return "gpt-2";
  if (tokenizer.parts().pattern == kLlama3Pattern) return "llama-bpe";
  throw Error(str("GGUF export: tokenizer ", tokenizer.source(), " pre-tokenizes with a regex llama.cpp has no name "
                  "for; it knows GPT-2's and Llama 3's"));
}

void add_tokenizer(GgufWriter& gguf, const Tokenizer& tokenizer, int64_t model_vocab) {
  const TokenizerParts& parts = tokenizer.parts();
  if (tokenizer.vocab_size() > model_vocab)
    throw Error(str("GGUF export: ", tokenizer.source(), " has ", tokenizer.vocab_size(), " tokens but the model's "
                    "vocab_size is ", model_vocab, "; give the tokenizer the model was trained with"));
  // llama.cpp's token types.
  constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;
  std::vector<std::string> tokens(static_cast<size_t>(model_vocab));
  std::vector<int32_t> types(static_cast<size_t>(model_vocab), kNormal);
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) tokens[id] = bytes_to_unicode(parts.token_bytes[id]);
  for (const AddedToken& added : parts.added) {
    tokens[added.id] = added.content;
    types[added.id] = added.special ? kControl : kUserDefined;
  }
  for (int64_t id = tokenizer.vocab_size(); id < model_vocab; ++id) {
    tokens[id] = str("[PAD", id, "]");
    types[id] = kUnused;
  }
  std::vector<std::string> merges;
  for (const auto& [left, right] : parts.merges)
    merges.push_back(bytes_to_unicode(parts.token_bytes[left]) + " " + bytes_to_unicode(parts.token_bytes[right]));
  const int32_t eot = tokenizer.eot_token();
  gguf.add_metadata("tokenizer.ggml.model", std::string("gpt2"));
  gguf.add_metadata("tokenizer.ggml.pre", pre_tokenizer(tokenizer));
  gguf.add_metadata("tokenizer.ggml.tokens", std::move(tokens));
  gguf.add_metadata("tokenizer.ggml.token_type", std::move(types));
  gguf.add_metadata("tokenizer.ggml.merges", std::move(merges));
  gguf.add_metadata("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(eot));
  gguf.add_metadata("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eot));
  // Documents are prepared as end-of-text then text (`dtrain data prepare`): nothing to add.
  gguf.add_metadata("tokenizer.ggml.add_bos_token", false);
}

void add_description(GgufWriter& gguf, const ModelConfig& c, GgmlType type) {
  const std::string arch = c.family == ModelFamily::gpt2 ? "gpt2" : "llama";
  gguf.add_metadata("general.architecture", arch);
  gguf.add_metadata("general.name", str("dtrain ", arch));
  gguf.add_metadata("general.file_type", file_type(type));
  gguf.add_metadata("general.quantization_version", uint32_t{2});
  gguf.add_metadata(arch + ".context_length", static_cast<uint32_t>(c.max_seq_len));
  gguf.add_metadata(arch + ".embedding_length", static_cast<uint32_t>(c.d_model));
  gguf.add_metadata(arch + ".feed_forward_length", static_cast<uint32_t>(c.ffn_hidden()));
  gguf.add_metadata(arch + ".block_count", static_cast<uint32_t>(c.n_layer));
  gguf.add_metadata(arch + ".attention.head_count", static_cast<uint32_t>(c.n_head));
  if (c.family == ModelFamily::gpt2) {
    gguf.add_metadata(arch + ".attention.layer_norm_epsilon", c.norm_eps);
    return;
  }
  gguf.add_metadata(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.kv_heads()));
  gguf.add_metadata(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  gguf.add_metadata(arch + ".rope.freq_base", static_cast<float>(c.rope_theta));
  gguf.add_metadata(arch + ".rope.dimension_count", static_cast<uint32_t>(c.head_size()));
  gguf.add_metadata(arch + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
}

// Llama 3's frequency scaling as llama.cpp takes it: a factor per rotary frequency, dividing it
// (what convert_hf_to_gguf.py computes from rope_scaling).
std::vector<float> rope_factors(const ModelConfig& c) {
  const int dim = c.head_size();
  const double low_wavelen = c.rope_original_max_seq_len / c.rope_low_freq_factor;
  const double high_wavelen = c.rope_original_max_seq_len / c.rope_high_freq_factor;
  std::vector<float> factors;
  for (int i = 0; i < dim; i += 2) {
    const double wavelen = 2 * std::numbers::pi * std::pow(c.rope_theta, static_cast<double>(i) / dim);
    if (wavelen < high_wavelen) {
      factors.push_back(1);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(c.rope_scaling_factor));
    } else {
      const double smooth = (c.rope_original_max_seq_len / wavelen - c.rope_low_freq_factor) /
                            (c.rope_high_freq_factor - c.rope_low_freq_factor);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / c.rope_scaling_factor + smooth)));
    }
  }
  return factors;
}

// The piece's values in the file's row order, then in `type`.
void fill_piece(const FlatTensors& params, const Piece& piece, std::vector<uint8_t>& bytes) {
  const float* rows = params.unpadded(*piece.param).ptr<float>() + piece.row_begin * piece.cols;
  const size_t n = static_cast<size_t>(piece.rows * piece.cols);
  std::span<const float> values(rows, n);
  std::vector<float> permuted;  // copied only when reordered: the largest tensor is not held twice
  if (piece.permuted_heads > 0) {
    permuted.resize(n);
    permute_rows(rows, permuted.data(), piece.permuted_heads, piece.rows, piece.cols);
    values = permuted;
  }
  switch (piece.type) {
    case GgmlType::f32:
      std::memcpy(bytes.data(), values.data(), n * sizeof(float));
      return;
    case GgmlType::f16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_f16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      return;
    case GgmlType::q8_0:
      kernels::quantize_q8_0(values, {reinterpret_cast<kernels::BlockQ8_0*>(bytes.data()), n / kernels::kGgufBlock});
      return;
    case GgmlType::q4_0:
      kernels::quantize_q4_0(values, {reinterpret_cast<kernels::BlockQ4_0*>(bytes.data()), n / kernels::kGgufBlock});
      return;
  }
}

}  // namespace

GgmlType parse_gguf_type(std::string_view name) {
  if (name == "f32") return GgmlType::f32;
  if (name == "f16") return GgmlType::f16;
  if (name == "q8_0") return GgmlType::q8_0;
  if (name == "q4_0") return GgmlType::q4_0;
  throw Error(str("unknown GGUF type '", name, "': use f32, f16, q8_0 or q4_0"));
}

void export_gguf(const FlatTensors& params, const Tokenizer& tokenizer, GgmlType type, const std::filesystem::path& out) {
  const ModelConfig& config = params.layout().config();
  check_exportable(config);
  const bool quantized = type == GgmlType::q8_0 || type == GgmlType::q4_0;
  if (quantized) {
    const kernels::WeightFormat format = type == GgmlType::q8_0 ? kernels::WeightFormat::q8_0 : kernels::WeightFormat::q4_0;
    if (const std::string misfits = weights_not_in_blocks(params.layout(), format); !misfits.empty())
      throw Error(str("GGUF export: ", (type == GgmlType::q4_0 ? "Q4_0" : "Q8_0"), " quantizes rows in blocks of 32, "
                      "and these weights' rows are not a multiple of 32 long: ", misfits,
                      "; export as f16 or f32, or train a model whose dimensions are multiples of 32"));
  }
  std::vector<Piece> pieces;
  for (const ParamInfo& p : params.layout().params())
    for (const HfPiece& hf : hf_pieces(config, p)) {
      const int64_t cols = p.shape.ndim() >= 2 ? p.shape[p.shape.ndim() - 1] : 1;
      const bool q = hf.hf_name.ends_with("q_proj.weight") || hf.hf_name.ends_with("q_proj.bias");
      const bool k = hf.hf_name.ends_with("k_proj.weight") || hf.hf_name.ends_with("k_proj.bias");
      // Quantized types for the quantized weights; f16 for the other matrices of a quantized
      // file (the embeddings), f32 for norms and biases.
      const GgmlType piece_type = !p.is_matrix            ? GgmlType::f32
                                  : is_quantized_weight(p) ? type
                                  : quantized              ? GgmlType::f16
                                                           : type;
      pieces.push_back({gguf_name(hf.hf_name), &p, hf.row_begin, hf.rows, cols,
                        q ? config.n_head : k ? config.kv_heads() : 0, piece_type});
    }

  GgufWriter gguf;
  add_description(gguf, config, type);
  add_tokenizer(gguf, tokenizer, config.vocab_size);
  for (const Piece& piece : pieces) {
    const std::vector<int64_t> dims = piece.param->is_matrix ? std::vector<int64_t>{piece.cols, piece.rows}
                                                             : std::vector<int64_t>{piece.rows};
    gguf.add_tensor(piece.name, dims, piece.type,
                    [&params, piece](std::vector<uint8_t>& bytes) { fill_piece(params, piece, bytes); });
  }
  if (config.rope_scaling_factor > 0) {
    const std::vector<float> factors = rope_factors(config);
    gguf.add_tensor("rope_freqs.weight", {static_cast<int64_t>(factors.size())}, GgmlType::f32,
                    [factors](std::vector<uint8_t>& bytes) { std::memcpy(bytes.data(), factors.data(), bytes.size()); });
  }
  gguf.write(out);
}

}  // namespace dt::ckpt
