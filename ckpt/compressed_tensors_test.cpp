// Quantized Hugging Face export in compressed-tensors' layout (ckpt/compressed_tensors.h), against
// compressed-tensors' own code (tests/reference/compressed_tensors_read.py): its decompressors
// turn our files into exactly the weights post-training quantization evaluates, which give
// transformers our logits; and we read what its compressors write, zero points included.
#include "ckpt/compressed_tensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/hf_checkpoint.h"
#include "ckpt/hf_export.h"
#include "model/quantized_weights.h"
#include "model/transformer.h"
#include "tests/hf_testing.h"
#include "tests/testing.h"

namespace dt::ckpt {
namespace {

using kernels::WeightFormat;
using testing::TempDir;

constexpr int kSeq = 16;

ModelConfig untied_llama() {
  return {.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 4, .n_kv_head = 2,
          .ffn_hidden_size = 96, .vocab_size = 300, .max_seq_len = 32, .tied_embeddings = false};
}

bool same_bits(const FlatTensors& a, const FlatTensors& b) {
  return std::memcmp(a.all().data, b.all().data, a.all().bytes()) == 0;
}

class QuantizedHfExport : public ::testing::TestWithParam<std::tuple<bool, WeightFormat>> {};

TEST_P(QuantizedHfExport, CompressedTensorsDecompressesOurFileToThePtqWeightsBitForBit) {
  const auto [tied, format] = GetParam();
  ModelConfig config = untied_llama();
  config.tied_embeddings = tied;
  TempDir dir;
  Transformer model(config, 1, kSeq);
  init_parameters(model.params(), 7);
  export_hf(model.params(), std::nullopt, {}, dir.path() / "exported", format);

  // What post-training quantization evaluates: the same weights fake-quantized.
  Transformer quantized(config, 1, kSeq);
  std::memcpy(quantized.params().all().data, model.params().all().data, model.params().all().bytes());
  fake_quantize_weights(quantized.params(), format);

  // config.json says what compressed-tensors needs; the tied lm_head is left out.
  std::ifstream config_file(dir.file("exported/config.json"));
  const nlohmann::json quantization = nlohmann::json::parse(config_file)["quantization_config"];
  EXPECT_EQ(quantization["quant_method"], "compressed-tensors");
  EXPECT_EQ(quantization["ignore"], tied ? nlohmann::json{"lm_head"} : nlohmann::json::array());

  // compressed-tensors' decompressor, with the compressor config.json names.
  const std::string expected_format = format == WeightFormat::q4_0 ? "pack-quantized" : "int-quantized";
  ASSERT_EQ(testing::run_reference_script("compressed_tensors_read.py",
                                          str("decompress ", dir.file("exported"), " ", dir.file("dense.safetensors"),
                                              " ", expected_format)),
            0);
  Transformer theirs(config, 1, kSeq);
  load_hf_safetensors(theirs.params(), dir.file("dense.safetensors"));
  EXPECT_TRUE(same_bits(theirs.params(), quantized.params()));

  // Our own reader gives the same, from the compressed file.
  Transformer ours(config, 1, kSeq);
  load_hf_safetensors(ours.params(), dir.file("exported/model.safetensors"));
  EXPECT_TRUE(same_bits(ours.params(), quantized.params()));

  // transformers on compressed-tensors' weights gives our quantized model's logits.
  const std::string tokens = testing::hf_token_list(config.vocab_size, kSeq);
  ASSERT_EQ(testing::run_reference_script("hf_reference.py",
                                          str("logits ", dir.file("exported"), " ", dir.file("dense.safetensors"), " ",
                                              tokens, " ", dir.file("logits.safetensors"))),
            0);
  const LoadedTensor reference = SafetensorsReader(dir.file("logits.safetensors")).read("logits", MemTag::workspace);
  // fp32 on both sides with different summation orders: hf_checkpoint_test.cpp's bound.
  EXPECT_LE(testing::normalized_max_error(testing::hf_test_logits(quantized, kSeq).t, reference.tensor), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedHfExport,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(WeightFormat::int8, WeightFormat::q8_0,
                                                                                 WeightFormat::q4_0)),
                         [](const auto& info) {
                           return str(std::get<0>(info.param) ? "tied_" : "untied_",
                                      kernels::weight_format_name(std::get<1>(info.param)));
                         });

TEST(CompressedTensors, WeReadWhatItsCompressorsWriteWithZeroPoints) {
  TempDir dir;
  ASSERT_EQ(testing::run_reference_script("compressed_tensors_read.py",
                                          str("compress ", dir.file("compressed.safetensors"), " ",
                                              dir.file("dense.safetensors"))),
            0);
  const SafetensorsReader compressed(dir.file("compressed.safetensors"));
  const SafetensorsReader dense(dir.file("dense.safetensors"));
  for (const std::string prefix : {"int8", "int4"}) {
    SCOPED_TRACE(prefix);
    ASSERT_TRUE(holds_compressed_weight(compressed, prefix));
    const std::vector<std::string> names = check_compressed_weight(compressed, prefix, 6, 64);
    EXPECT_NE(std::find(names.begin(), names.end(), prefix + ".weight_zero_point"), names.end());
    std::vector<float> ours(6 * 64);
    read_compressed_weight(compressed, prefix, 6, 64, ours);
    const LoadedTensor theirs = dense.read(prefix + ".weight", MemTag::workspace);
    EXPECT_EQ(std::memcmp(ours.data(), theirs.tensor.data, ours.size() * sizeof(float)), 0);
  }
}

std::string read_error(const std::function<void(SafetensorsWriter&, std::deque<Buffer>&)>& write) {
  TempDir dir;
  SafetensorsWriter writer;
  std::deque<Buffer> storage;
  write(writer, storage);
  writer.write(dir.file("w.safetensors"));
  try {
    check_compressed_weight(SafetensorsReader(dir.file("w.safetensors")), "w", 4, 64);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CompressedTensors, AWeightThatDoesNotFitTheModelIsNamed) {
  const std::vector<float> wide(4 * 96, 0.5f);
  // Another width: the scales say so.
  EXPECT_NE(read_error([&](SafetensorsWriter& writer, std::deque<Buffer>& storage) {
              add_compressed_weight(writer, storage, "w", WeightFormat::q8_0, wide, 4, 96);
            }).find("'w.weight_scale' has shape (4, 3) but a weight of 4 x 64 needs (4, G) scales"),
            std::string::npos);
  // A 4-bit weight whose recorded shape is not the model's.
  EXPECT_NE(read_error([&](SafetensorsWriter& writer, std::deque<Buffer>& storage) {
              Buffer& packed = storage.emplace_back(4 * 8 * sizeof(int32_t), MemTag::workspace);
              Buffer& scales = storage.emplace_back(4 * 2 * sizeof(float), MemTag::workspace);
              Buffer& shape = storage.emplace_back(2 * sizeof(int64_t), MemTag::workspace);
              static_cast<int64_t*>(shape.data())[0] = 4;
              static_cast<int64_t*>(shape.data())[1] = 60;
              writer.add("w.weight_packed", packed.view(DType::i32, {4, 8}));
              writer.add("w.weight_scale", scales.view(DType::f32, {4, 2}));
              writer.add("w.weight_shape", shape.view(DType::i64, {2}));
            }).find("'w.weight_shape' must be the integers [4, 64], the weight's shape"),
            std::string::npos);
  // Scales of a dtype that is no float.
  EXPECT_NE(read_error([&](SafetensorsWriter& writer, std::deque<Buffer>& storage) {
              Buffer& q = storage.emplace_back(4 * 64, MemTag::workspace);
              Buffer& s = storage.emplace_back(4 * sizeof(int32_t), MemTag::workspace);
              writer.add("w.weight", q.view(DType::i8, {4, 64}));
              writer.add("w.weight_scale", s.view(DType::i32, {4, 1}));
            }).find("'w.weight_scale' is I32; scales load from F32, BF16 or F16"),
            std::string::npos);
}

}  // namespace
}  // namespace dt::ckpt
