// GGUF export (ckpt/gguf_export.h) read back by the gguf package (llama.cpp's Python reader,
// tests/reference/gguf_read.py): every tensor under llama.cpp's name with its dimensions and
// type, its values dequantized by the package equal to ours bit for bit (f32, f16, Q8_0, Q4_0),
// Llama's q and k rows in llama.cpp's order, the tokenizer and the description in the metadata;
// and the models and types it cannot write refused before anything is written.
#include "ckpt/gguf_export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/dtype.h"
#include "kernels/weight_quant.h"
#include "tests/testing.h"

namespace dt::ckpt {
namespace {

constexpr int kTokenizerVocab = 300, kModelVocab = 320;  // the model's last 20 rows: unused tokens

ModelConfig gpt2_config() {
  return {.family = ModelFamily::gpt2, .n_layer = 2, .d_model = 64, .n_head = 2, .vocab_size = kModelVocab,
          .max_seq_len = 32};
}

// Grouped-query attention, untied output and Llama 3's frequency scaling: everything the
// llama architecture's file carries.
ModelConfig llama_config() {
  return {.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 4, .n_kv_head = 2,
          .ffn_hidden_size = 96, .vocab_size = kModelVocab, .max_seq_len = 32, .tied_embeddings = false,
          .rope_theta = 10000, .rope_scaling_factor = 8, .rope_low_freq_factor = 1, .rope_high_freq_factor = 8,
          .rope_original_max_seq_len = 64};
}

Tokenizer small_tokenizer(const testing::TempDir& dir, PreTokenizerPattern pattern) {
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir.file("text.txt")) << text.substr(0, 20000);
  return train_tokenizer({dir.file("text.txt")}, kTokenizerVocab, {"<|endoftext|>"}, pattern);
}

// What the file read back should hold: `values` (rows × cols, the file's row order) in `type`,
// dequantized.
std::vector<float> as_stored(std::vector<float> values, int64_t rows, GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      break;
    case GgmlType::f16:
      for (float& v : values) v = f16_to_float(float_to_f16(v));
      break;
    case GgmlType::q8_0:
      kernels::fake_quantize(kernels::WeightFormat::q8_0, values, rows, values);
      break;
    case GgmlType::q4_0:
      kernels::fake_quantize(kernels::WeightFormat::q4_0, values, rows, values);
      break;
  }
  return values;
}

// Rows [begin, begin + rows) of a parameter, and for q and k the order llama.cpp rotates
// (convert_hf_to_gguf.py's permute: reshape(heads, 2, hs / 2, cols), swap axes 1 and 2).
std::vector<float> file_rows(const Tensor& param, int64_t begin, int64_t rows, int64_t cols, int heads) {
  const float* p = param.ptr<float>() + begin * cols;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const int64_t hs = heads > 0 ? rows / heads : rows;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t source = r;
    if (heads > 0) {
      const int64_t head = r / hs, within = r % hs;  // (head, i, h) with within = 2i + h
      source = head * hs + (within % 2) * (hs / 2) + within / 2;
    }
    std::memcpy(out.data() + r * cols, p + source * cols, static_cast<size_t>(cols) * sizeof(float));
  }
  return out;
}

struct Expected {
  std::string name;
  std::string param;
  int64_t begin, rows;
  int heads = 0;
};

// The file's tensors for the two test models, written out by hand from llama.cpp's names.
std::vector<Expected> expected_tensors(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.ffn_hidden(), V = c.vocab_size, hs = c.head_size();
  const int64_t q = c.n_head * hs, kv = c.kv_heads() * hs;
  std::vector<Expected> e;
  if (c.family == ModelFamily::gpt2) {
    e = {{"token_embd.weight", "wte", 0, V}, {"position_embd.weight", "wpe", 0, c.max_seq_len},
         {"output_norm.weight", "ln_f.weight", 0, C}, {"output_norm.bias", "ln_f.bias", 0, C}};
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string b = str("blk.", l, "."), h = str("h.", l, ".");
      for (const auto& [gguf, ours, rows] : std::vector<std::tuple<std::string, std::string, int64_t>>{
               {"attn_norm.weight", "ln_1.weight", C}, {"attn_norm.bias", "ln_1.bias", C},
               {"attn_qkv.weight", "attn.qkv.weight", 3 * C}, {"attn_qkv.bias", "attn.qkv.bias", 3 * C},
               {"attn_output.weight", "attn.proj.weight", C}, {"attn_output.bias", "attn.proj.bias", C},
               {"ffn_norm.weight", "ln_2.weight", C}, {"ffn_norm.bias", "ln_2.bias", C},
               {"ffn_up.weight", "mlp.fc.weight", F}, {"ffn_up.bias", "mlp.fc.bias", F},
               {"ffn_down.weight", "mlp.proj.weight", C}, {"ffn_down.bias", "mlp.proj.bias", C}})
        e.push_back({b + gguf, h + ours, 0, rows});
    }
    return e;
  }
  e = {{"token_embd.weight", "wte", 0, V}, {"output_norm.weight", "ln_f.weight", 0, C},
       {"output.weight", "lm_head", 0, V}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = str("blk.", l, "."), h = str("h.", l, ".");
    e.push_back({b + "attn_norm.weight", h + "ln_1.weight", 0, C});
    e.push_back({b + "attn_q.weight", h + "attn.qkv.weight", 0, q, c.n_head});
    e.push_back({b + "attn_k.weight", h + "attn.qkv.weight", q, kv, c.kv_heads()});
    e.push_back({b + "attn_v.weight", h + "attn.qkv.weight", q + kv, kv});
    e.push_back({b + "attn_output.weight", h + "attn.proj.weight", 0, C});
    e.push_back({b + "ffn_norm.weight", h + "ln_2.weight", 0, C});
    e.push_back({b + "ffn_gate.weight", h + "mlp.fc.weight", 0, F});
    e.push_back({b + "ffn_up.weight", h + "mlp.fc.weight", F, F});
    e.push_back({b + "ffn_down.weight", h + "mlp.proj.weight", 0, C});
  }
  return e;
}

struct ReadBack {
  nlohmann::json metadata, types;
  std::unique_ptr<SafetensorsReader> tensors;
};

ReadBack read_with_gguf_package(const testing::TempDir& dir, const std::filesystem::path& file) {
  EXPECT_EQ(testing::run_reference_script("gguf_read.py", str(file.string(), " ", dir.path().string())), 0);
  ReadBack r;
  r.metadata = nlohmann::json::parse(testing::file_bytes(dir.file("metadata.json")));
  r.types = nlohmann::json::parse(testing::file_bytes(dir.file("types.json")));
  r.tensors = std::make_unique<SafetensorsReader>(dir.file("tensors.safetensors"));
  return r;
}

class GgufExport : public ::testing::TestWithParam<std::tuple<ModelFamily, GgmlType>> {};

TEST_P(GgufExport, TheGgufPackageReadsEveryTensorAsWeWroteIt) {
  const auto [family, type] = GetParam();
  const testing::TempDir dir;
  const ModelConfig config = family == ModelFamily::gpt2 ? gpt2_config() : llama_config();
  const Tokenizer tokenizer = small_tokenizer(
      dir, family == ModelFamily::gpt2 ? PreTokenizerPattern::gpt2 : PreTokenizerPattern::llama3);
  const ParameterLayout layout(config);
  FlatTensors params(layout, MemTag::parameters);
  init_parameters(params, 3);
  export_gguf(params, tokenizer, type, dir.file("model.gguf"));
  const ReadBack back = read_with_gguf_package(dir, dir.file("model.gguf"));

  // Every tensor, and nothing else but Llama 3's rope factors.
  const std::vector<Expected> expected = expected_tensors(config);
  std::set<std::string> names;
  for (const auto& [name, info] : back.types.items()) names.insert(name);
  std::set<std::string> expected_names = {"rope_freqs.weight"};
  if (family == ModelFamily::gpt2) expected_names.clear();
  for (const Expected& e : expected) expected_names.insert(e.name);
  EXPECT_EQ(names, expected_names);

  for (const Expected& e : expected) {
    const Tensor param = params.unpadded(e.param);
    const bool matrix = param.shape.ndim() == 2;
    const int64_t cols = matrix ? param.shape[1] : 1;
    const bool quantized = type == GgmlType::q8_0 || type == GgmlType::q4_0;
    const bool embedding = e.param == "wte" || e.param == "wpe";
    const GgmlType stored = !matrix ? GgmlType::f32 : quantized && embedding ? GgmlType::f16 : type;
    const nlohmann::json& info = back.types[e.name];
    static const char* kTypeNames[] = {"F32", "F16", "Q4_0"};
    EXPECT_EQ(info["type"], stored == GgmlType::q8_0 ? "Q8_0" : kTypeNames[static_cast<int>(stored)]) << e.name;
    const nlohmann::json dims = matrix ? nlohmann::json{cols, e.rows} : nlohmann::json{e.rows};
    EXPECT_EQ(info["dims"], dims) << e.name;
    const std::vector<float> want = as_stored(file_rows(param, e.begin, e.rows, cols, e.heads), e.rows, stored);
    const LoadedTensor got = back.tensors->read(e.name, MemTag::workspace);
    ASSERT_EQ(got.tensor.numel(), static_cast<int64_t>(want.size())) << e.name;
    EXPECT_EQ(std::memcmp(got.tensor.data, want.data(), want.size() * sizeof(float)), 0) << e.name;
  }

  const nlohmann::json& m = back.metadata;
  const std::string arch = family == ModelFamily::gpt2 ? "gpt2" : "llama";
  EXPECT_EQ(m["general.architecture"], arch);
  EXPECT_EQ(m[arch + ".block_count"], 2);
  EXPECT_EQ(m[arch + ".embedding_length"], 64);
  EXPECT_EQ(m[arch + ".feed_forward_length"], config.ffn_hidden());
  EXPECT_EQ(m[arch + ".context_length"], 32);
  EXPECT_EQ(m[arch + ".attention.head_count"], config.n_head);
  if (family == ModelFamily::llama) {
    EXPECT_EQ(m["llama.attention.head_count_kv"], 2);
    EXPECT_EQ(m["llama.rope.dimension_count"], 16);
    EXPECT_EQ(m["llama.rope.freq_base"], 10000.0);
    // Wavelengths 2π · 10000^(2i / 16): the shortest (6.3) under 64 / 8 unscaled, the longest
    // (19,869) over 64 / 1 divided by the factor.
    const LoadedTensor factors = back.tensors->read("rope_freqs.weight", MemTag::workspace);
    ASSERT_EQ(factors.tensor.numel(), 8);
    EXPECT_EQ(factors.tensor.ptr<float>()[0], 1.0f);
    EXPECT_EQ(factors.tensor.ptr<float>()[7], 8.0f);
  }
  EXPECT_EQ(m["tokenizer.ggml.model"], "gpt2");
  EXPECT_EQ(m["tokenizer.ggml.pre"], family == ModelFamily::gpt2 ? "gpt-2" : "llama-bpe");
  const auto& tokens = m["tokenizer.ggml.tokens"];
  const auto& token_types = m["tokenizer.ggml.token_type"];
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kModelVocab));
  EXPECT_EQ(tokens[33], "!");                              // byte 33 is its own character
  EXPECT_EQ(tokens[static_cast<size_t>(' ')], "\u0120");     // the space byte, as GPT-2 spells it
  const int32_t eot = tokenizer.eot_token();
  EXPECT_EQ(tokens[eot], "<|endoftext|>");
  EXPECT_EQ(token_types[eot], 3);
  EXPECT_EQ(tokens[kModelVocab - 1], str("[PAD", kModelVocab - 1, "]"));
  EXPECT_EQ(token_types[kModelVocab - 1], 5);
  EXPECT_EQ(m["tokenizer.ggml.merges"].size(), tokenizer.parts().merges.size());
  EXPECT_EQ(m["tokenizer.ggml.eos_token_id"], eot);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufExport,
                         ::testing::Combine(::testing::Values(ModelFamily::gpt2, ModelFamily::llama),
                                            ::testing::Values(GgmlType::f32, GgmlType::f16, GgmlType::q8_0,
                                                              GgmlType::q4_0)));

TEST(GgufExportErrors, AQuantizedTypeNeedsRowsOfWholeBlocks) {
  const testing::TempDir dir;
  ModelConfig config = gpt2_config();
  config.d_model = 48, config.n_head = 3;  // rows of 48: not whole blocks of 32
  const ParameterLayout layout(config);
  FlatTensors params(layout, MemTag::parameters);
  const Tokenizer tokenizer = small_tokenizer(dir, PreTokenizerPattern::gpt2);
  const std::string e = testing::error_of([&] { export_gguf(params, tokenizer, GgmlType::q4_0, dir.file("m.gguf")); });
  EXPECT_NE(e.find("GGUF export: Q4_0 quantizes rows in blocks of 32, and these weights' rows are not a multiple of "
                   "32 long: h.0.attn.qkv.weight (144 x 48), h.0.attn.proj.weight (48 x 48), h.0.mlp.fc.weight "
                   "(192 x 48), h.1.attn.qkv.weight (144 x 48)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("; export as f16 or f32, or train a model whose dimensions are multiples of 32"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.gguf")));
  EXPECT_EQ(testing::error_of([] { parse_gguf_type("q4_k"); }), "unknown GGUF type 'q4_k': use f32, f16, q8_0 or q4_0");
}

TEST(GgufExportErrors, ExpertsAreRefusedNamingTheWayOut) {
  const testing::TempDir dir;
  const ModelConfig config = model_preset("moe-tiny");
  const ParameterLayout layout(config);
  FlatTensors params(layout, MemTag::parameters);
  const Tokenizer tokenizer = small_tokenizer(dir, PreTokenizerPattern::gpt2);
  EXPECT_NE(testing::error_of([&] { export_gguf(params, tokenizer, GgmlType::f16, dir.file("m.gguf")); })
                .find("GGUF export writes dense models; this one has experts"),
            std::string::npos);
}

}  // namespace
}  // namespace dt::ckpt
