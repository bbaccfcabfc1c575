#include "ckpt/hf_checkpoint.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "ckpt/compressed_tensors.h"
#include "ckpt/safetensors.h"
#include "core/dtype.h"
#include "model/quantized_weights.h"

namespace dt::ckpt {

namespace {

// `name` with "{e}" replaced by expert e's index.
std::string expert_name(const std::string& name, int64_t e) {
  const size_t at = name.find("{e}");
  return at == std::string::npos ? name : str(name.substr(0, at), e, name.substr(at + 3));
}

// The pieces of block parameter `p` ("h.<l>.<layer>.<weight|bias>") from its layer's declaration:
// a norm's one tensor; a linear layer's tensors, each covering spans of its split dimension; an
// expert layer's, expert by expert, its (E, out, in) weight read as (E · out, in) rows.
std::vector<HfPiece> block_pieces(const ModelConfig& c, const ParamInfo& p) {
  const size_t dot = p.name.find('.', 2), last = p.name.rfind('.');
  const BlockDeclaration& block = declare_block(c, std::stoi(p.name.substr(2, dot - 2)));
  const std::string prefix = str(block.hf.block_prefix, p.name.substr(2, dot - 2), ".");
  const std::string layer = p.name.substr(dot + 1, last - dot - 1), kind = p.name.substr(last);  // ".weight"
  for (const auto& declared : block.layers) {
    if (const auto* norm = std::get_if<NormDeclaration>(&declared); norm != nullptr && norm->name == layer)
      return {{prefix + norm->hf + kind, 0, p.shape[0], false}};
    const auto* linear = std::get_if<LinearDeclaration>(&declared);
    if (linear == nullptr || linear->name != layer) continue;
    const bool transposed = c.traits().hf_transposed_weights && p.shape.ndim() == 2;
    const int64_t experts = linear->per_expert ? p.shape[0] : 1, out = linear->per_expert ? p.shape[1] : 0;
    std::vector<HfPiece> pieces;
    for (int64_t e = 0; e < experts; ++e) {
      // A row-parallel layer's rows are the model width, whole in one tensor, as is its bias.
      if (linear->style == LinearStyle::row) {
        pieces.push_back({prefix + expert_name(linear->hf.front().name, e) + kind, e * out,
                          linear->per_expert ? out : p.shape[0], transposed});
        continue;
      }
      int64_t row = e * out;
      size_t span = 0;
      for (const HfTensor& tensor : linear->hf) {
        int64_t rows = 0;
        for (int i = 0; i < tensor.spans; ++i) rows += span_width(c, linear->spans.at(span++));
        pieces.push_back({prefix + expert_name(tensor.name, e) + kind, row, rows, transposed});
        row += rows;
      }
    }
    return pieces;
  }
  DT_CHECK(false, "no Hugging Face name for ", p.name);
  return {};
}

// The shape of a piece in the file.
Shape file_shape(const ParamInfo& p, const HfPiece& piece) {
  if (p.shape.ndim() == 1) return {piece.rows};
  const int64_t columns = p.shape[p.shape.ndim() - 1];
  return piece.transposed ? Shape{columns, piece.rows} : Shape{piece.rows, columns};
}

// "P.weight" -> "P": the prefix of a weight's compressed tensors.
std::string weight_prefix(const std::string& hf_name) {
  DT_CHECK(hf_name.ends_with(".weight"), hf_name, " is not a weight");
  return hf_name.substr(0, hf_name.size() - 7);
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
  const HfNames& hf = declare_block(config, 0).hf;
  const int64_t rows = p.shape[0];
  if (p.name == "wte") return {{hf.wte, 0, rows, false}};
  if (p.name == "wpe") return {{hf.wpe, 0, rows, false}};
  if (p.name == "lm_head") return {{hf.lm_head, 0, rows, false}};
  if (p.name.starts_with("ln_f.")) return {{hf.ln_f + p.name.substr(4), 0, rows, false}};
  return block_pieces(config, p);
}

void save_hf_safetensors(const FlatTensors& params, const std::filesystem::path& path,
                         std::optional<kernels::WeightFormat> quantized) {
  const ModelConfig& config = params.layout().config();
  // Pieces that are not a plain row range of our tensor are copied out first.
  std::deque<Buffer> copies;
  SafetensorsWriter writer;
  for (const ParamInfo& p : params.layout().params()) {
    const Tensor unpadded = params.unpadded(p);
    for (const HfPiece& piece : hf_pieces(config, p)) {
      const Shape shape = file_shape(p, piece);
      const int64_t cols = p.shape.ndim() >= 2 ? p.shape[p.shape.ndim() - 1] : 1;
      if (quantized && is_quantized_weight(p)) {
        DT_CHECK(!piece.transposed, "a quantized weight must be (out, in) in the file: ", piece.hf_name);
        const float* rows = unpadded.ptr<float>() + piece.row_begin * cols;
        add_compressed_weight(writer, copies, weight_prefix(piece.hf_name), *quantized,
                              std::span(rows, static_cast<size_t>(piece.rows * cols)), piece.rows, cols);
        continue;
      }
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
      const Shape shape = file_shape(p, piece);
      if (p.shape.ndim() >= 2 && holds_compressed_weight(reader, weight_prefix(name))) {
        if (piece.transposed)
          fail(str("tensor '", name, "' is quantized, but GPT-2's Conv1D weights load only unquantized"));
        for (std::string& compressed : check_compressed_weight(reader, weight_prefix(name), shape[0], shape[1]))
          expected.insert(std::move(compressed));
        continue;
      }
      expected.insert(name);
      const StoredTensorInfo& stored = reader.info(name);  // names file and tensor when absent
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
    const int64_t cols = p.shape.ndim() >= 2 ? p.shape[p.shape.ndim() - 1] : 1;
    for (const HfPiece& piece : hf_pieces(config, p)) {
      const std::string name = file_name(piece.hf_name);
      float* out = unpadded.ptr<float>() + piece.row_begin * cols;
      if (p.shape.ndim() >= 2 && holds_compressed_weight(reader, weight_prefix(name))) {
        read_compressed_weight(reader, weight_prefix(name), piece.rows, cols,
                               std::span(out, static_cast<size_t>(piece.rows * cols)));
        continue;
      }
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
      for (int64_t r = 0; r < piece.rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out[r * cols + c] = piece.transposed ? value(c * piece.rows + r) : value(r * cols + c);
    }
  }
}

}  // namespace dt::ckpt
