#include "ckpt/hf_checkpoint.h"

#include <algorithm>
#include <map>
#include <set>

#include "ckpt/safetensors.h"
#include "core/dtype.h"

namespace dt::ckpt {

namespace {

// Our per-layer suffix -> Hugging Face's, for the tensors that map one to one.
const std::map<std::string, std::string>& gpt2_layer_names() {
  static const std::map<std::string, std::string> names = {
      {"ln_1.weight", "ln_1.weight"},           {"ln_1.bias", "ln_1.bias"},
      {"attn.qkv.weight", "attn.c_attn.weight"}, {"attn.qkv.bias", "attn.c_attn.bias"},
      {"attn.proj.weight", "attn.c_proj.weight"}, {"attn.proj.bias", "attn.c_proj.bias"},
      {"ln_2.weight", "ln_2.weight"},           {"ln_2.bias", "ln_2.bias"},
      {"mlp.fc.weight", "mlp.c_fc.weight"},     {"mlp.fc.bias", "mlp.c_fc.bias"},
      {"mlp.proj.weight", "mlp.c_proj.weight"}, {"mlp.proj.bias", "mlp.c_proj.bias"}};
  return names;
}

std::vector<HfPiece> gpt2_pieces(const ParamInfo& p) {
  const int64_t rows = p.shape[0];
  if (p.name == "wte" || p.name == "wpe") return {{"transformer." + p.name + ".weight", 0, rows, false}};
  if (p.name.rfind("ln_f.", 0) == 0) return {{"transformer." + p.name, 0, rows, false}};
  // h.<l>.<suffix>
  const size_t dot = p.name.find('.', 2);
  const std::string layer = p.name.substr(0, dot), suffix = p.name.substr(dot + 1);
  const bool conv1d_weight = suffix.ends_with(".weight") && p.shape.ndim() == 2;
  return {{str("transformer.", layer, ".", gpt2_layer_names().at(suffix)), 0, rows, conv1d_weight}};
}

std::vector<HfPiece> llama_pieces(const ModelConfig& c, const ParamInfo& p) {
  const int64_t rows = p.shape[0];
  if (p.name == "wte") return {{"model.embed_tokens.weight", 0, rows, false}};
  if (p.name == "lm_head") return {{"lm_head.weight", 0, rows, false}};
  if (p.name == "ln_f.weight") return {{"model.norm.weight", 0, rows, false}};
  const size_t dot = p.name.find('.', 2);
  const std::string prefix = str("model.layers.", p.name.substr(2, dot - 2), ".");
  const std::string suffix = p.name.substr(dot + 1);
  if (suffix == "ln_1.weight") return {{prefix + "input_layernorm.weight", 0, rows, false}};
  if (suffix == "ln_2.weight") return {{prefix + "post_attention_layernorm.weight", 0, rows, false}};
  if (suffix == "attn.proj.weight") return {{prefix + "self_attn.o_proj.weight", 0, rows, false}};
  if (suffix == "mlp.proj.weight") return {{prefix + "mlp.down_proj.weight", 0, rows, false}};
  if (suffix == "attn.qkv.weight") {
    const int64_t q = static_cast<int64_t>(c.n_head) * c.head_size(), kv = static_cast<int64_t>(c.kv_heads()) * c.head_size();
    return {{prefix + "self_attn.q_proj.weight", 0, q, false},
            {prefix + "self_attn.k_proj.weight", q, kv, false},
            {prefix + "self_attn.v_proj.weight", q + kv, kv, false}};
  }
  DT_CHECK(suffix == "mlp.fc.weight", "no Hugging Face name for ", p.name);
  const int64_t F = c.ffn_hidden();
  return {{prefix + "mlp.gate_proj.weight", 0, F, false}, {prefix + "mlp.up_proj.weight", F, F, false}};
}

// The shape of a piece in the file.
Shape file_shape(const ParamInfo& p, const HfPiece& piece) {
  if (p.shape.ndim() == 1) return {piece.rows};
  return piece.transposed ? Shape{p.shape[1], piece.rows} : Shape{piece.rows, p.shape[1]};
}

// Guesses the family of a file from a tensor only one family has.
std::string family_of_file(const SafetensorsReader& reader) {
  for (const auto& name : reader.names()) {
    if (name.rfind("model.layers.", 0) == 0 || name == "model.embed_tokens.weight") return "llama";
    if (name.find("attn.c_attn.") != std::string::npos) return "gpt2";
  }
  return "";
}

}  // namespace

std::vector<HfPiece> hf_pieces(const ModelConfig& config, const ParamInfo& p) {
  return config.family == ModelFamily::gpt2 ? gpt2_pieces(p) : llama_pieces(config, p);
}

void save_hf_safetensors(const FlatTensors& params, const std::filesystem::path& path) {
  const ModelConfig& config = params.layout().config();
  // Pieces that are not a plain row range of our tensor are copied out first.
  std::vector<Buffer> copies;
  SafetensorsWriter writer;
  for (const ParamInfo& p : params.layout().params()) {
    const Tensor unpadded = params.unpadded(p);
    for (const HfPiece& piece : hf_pieces(config, p)) {
      const Shape shape = file_shape(p, piece);
      const int64_t cols = p.shape.ndim() == 2 ? p.shape[1] : 1;
      if (!piece.transposed) {
        writer.add(piece.hf_name, Tensor{.data = unpadded.ptr<float>() + piece.row_begin * cols, .dtype = DType::f32,
                                         .shape = shape, .device = Device::cpu});
        continue;
      }
      Buffer& copy = copies.emplace_back(static_cast<size_t>(piece.rows * cols) * sizeof(float), MemTag::workspace);
      float* out = static_cast<float*>(copy.data());
      const float* in = unpadded.ptr<float>() + piece.row_begin * cols;
      for (int64_t r = 0; r < piece.rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * piece.rows + r] = in[r * cols + c];
      writer.add(piece.hf_name, copy.view(DType::f32, shape));
    }
  }
  writer.set_metadata("format", "pt");  // what transformers' save_pretrained writes
  writer.write(path);
}

void load_hf_safetensors(FlatTensors& params, const std::filesystem::path& path) {
  const ModelConfig& config = params.layout().config();
  const SafetensorsReader reader(path);
  const std::string family = std::string(model_family_name(config.family));
  const auto fail = [&](const std::string& what) {
    throw Error(str("Hugging Face checkpoint '", path.string(), "': ", what));
  };
  if (const std::string found = family_of_file(reader); !found.empty() && found != family)
    fail(str("holds a ", found, " model, but the model being loaded is ", family,
             "; choose a ", found, " model description or another file"));
  // GPT-2 files saved from GPT2Model have no "transformer." prefix.
  const bool unprefixed = config.family == ModelFamily::gpt2 && reader.contains("wte.weight");
  const auto file_name = [&](const std::string& hf_name) {
    return unprefixed && hf_name.rfind("transformer.", 0) == 0 ? hf_name.substr(12) : hf_name;
  };

  // Check everything before reading anything.
  std::set<std::string> expected;
  for (const ParamInfo& p : params.layout().params())
    for (const HfPiece& piece : hf_pieces(config, p)) {
      const std::string name = file_name(piece.hf_name);
      expected.insert(name);
      const StoredTensorInfo& stored = reader.info(name);  // names file and tensor when absent
      const Shape shape = file_shape(p, piece);
      if (!(stored.shape == shape))
        fail(str("tensor '", name, "' has shape ", stored.shape.to_string(), " but the model needs ", shape.to_string(),
                 " for ", p.name, "; the file was written for a model of another size"));
      if (stored.dtype != DType::f32 && stored.dtype != DType::bf16 && stored.dtype != DType::f16)
        fail(str("tensor '", name, "' is ", safetensors_dtype_name(stored.dtype), "; only F32, BF16 and F16 load"));
    }
  for (const std::string& name : reader.names()) {
    // GPT-2 checkpoints may carry the attention mask buffers, which are not parameters, and
    // lm_head.weight, which GPT-2 ties to wte.
    const bool gpt2_extra =
        name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name == "lm_head.weight";
    if (expected.count(name) || (config.family == ModelFamily::gpt2 && gpt2_extra)) continue;
    fail(str("tensor '", name, "' has no place in this ", family, " model",
             name == "lm_head.weight" ? " (the file's output embedding is untied; set tied_embeddings = false)" : ""));
  }

  params.zero();  // padding rows and alignment gaps
  for (const ParamInfo& p : params.layout().params()) {
    const Tensor unpadded = params.unpadded(p);
    const int64_t cols = p.shape.ndim() == 2 ? p.shape[1] : 1;
    for (const HfPiece& piece : hf_pieces(config, p)) {
      const std::string name = file_name(piece.hf_name);
      const LoadedTensor loaded = reader.read(name, MemTag::workspace);
      // Element i of the file's tensor, widened exactly to f32.
      const auto value = [&](int64_t i) -> float {
        switch (loaded.tensor.dtype) {
          case DType::bf16:
            return bf16_to_float(loaded.tensor.ptr<uint16_t>()[i]);
          case DType::f16:
            return f16_to_float(loaded.tensor.ptr<uint16_t>()[i]);
          default:
            return loaded.tensor.ptr<float>()[i];
        }
      };
      float* out = unpadded.ptr<float>() + piece.row_begin * cols;
      for (int64_t r = 0; r < piece.rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out[r * cols + c] = piece.transposed ? value(c * piece.rows + r) : value(r * cols + c);
    }
  }
}

}  // namespace dt::ckpt
