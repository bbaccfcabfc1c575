// What quantization applies to, post-training quantization, and quantization-aware training's
// forward and backward (model/quantized_weights.h, LinearProduct in model/layers.h): a QAT model's
// loss and gradients are, bit for bit, those of a plain model whose weights are the fake-quantized
// ones — the values the exporter writes — with the gradient reaching each weight unchanged (the
// straight-through estimator); embeddings, norms and biases are not quantized.
#include "model/quantized_weights.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/transformer.h"
#include "tests/testing.h"

namespace dt {
namespace {

using kernels::WeightFormat;

ModelConfig untied_llama() {
  return {.family = ModelFamily::llama, .n_layer = 2, .d_model = 64, .n_head = 4, .n_kv_head = 2,
          .ffn_hidden_size = 96, .vocab_size = 300, .max_seq_len = 32, .tied_embeddings = false};
}
ModelConfig gpt2() {
  return {.family = ModelFamily::gpt2, .n_layer = 2, .d_model = 64, .n_head = 2, .vocab_size = 300, .max_seq_len = 32};
}

TEST(QuantizedWeights, EveryLinearLayersWeightAndNothingElse) {
  const ParameterLayout llama(untied_llama());
  std::vector<std::string> quantized;
  for (const ParamInfo& p : llama.params())
    if (is_quantized_weight(p)) quantized.push_back(p.name);
  EXPECT_EQ(quantized, (std::vector<std::string>{"h.0.attn.qkv.weight", "h.0.attn.proj.weight", "h.0.mlp.fc.weight",
                                                 "h.0.mlp.proj.weight", "h.1.attn.qkv.weight", "h.1.attn.proj.weight",
                                                 "h.1.mlp.fc.weight", "h.1.mlp.proj.weight", "lm_head"}));
  const ParameterLayout tied(gpt2());
  for (const ParamInfo& p : tied.params())
    EXPECT_EQ(is_quantized_weight(p), p.name.find("weight") != std::string::npos && p.shape.ndim() == 2 &&
                                          p.name != "wte" && p.name != "wpe")
        << p.name;
}

void fill_batch(Tensor tokens, Tensor targets, int vocab) {
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
    targets.ptr<int32_t>()[i] = static_cast<int32_t>((i * 53 + 5) % vocab);
  }
}

class Qat : public ::testing::TestWithParam<std::tuple<ModelFamily, WeightFormat>> {};

TEST_P(Qat, LossAndGradientsAreThoseOfTheFakeQuantizedWeights) {
  const auto [family, format] = GetParam();
  const ModelConfig config = family == ModelFamily::gpt2 ? gpt2() : untied_llama();
  constexpr int B = 2, T = 16;
  Transformer qat(config, B, T, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr, {}, nullptr,
                  nullptr, format);
  Transformer plain(config, B, T);
  init_parameters(qat.params(), 5);
  std::memcpy(plain.params().all().data, qat.params().all().data, qat.params().all().bytes());
  fake_quantize_weights(plain.params(), format);

  Buffer token_buffer(2 * B * T * sizeof(int32_t), MemTag::workspace);
  const Tensor tokens = token_buffer.view(DType::i32, {B, T}), targets = token_buffer.view(DType::i32, {B, T}, B * T * 4);
  fill_batch(tokens, targets, config.vocab_size);
  qat.grads().zero();
  plain.grads().zero();
  const double qat_loss = qat.forward_backward(tokens, targets, 1.0f);
  const double plain_loss = plain.forward_backward(tokens, targets, 1.0f);
  EXPECT_EQ(qat_loss, plain_loss);
  EXPECT_EQ(std::memcmp(qat.grads().all().data, plain.grads().all().data, qat.grads().all().bytes()), 0);
  // The weights themselves are untouched: QAT keeps the f32 master weights.
  EXPECT_NE(std::memcmp(qat.params().all().data, plain.params().all().data, qat.params().all().bytes()), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, Qat,
                         ::testing::Combine(::testing::Values(ModelFamily::gpt2, ModelFamily::llama),
                                            ::testing::Values(WeightFormat::int8, WeightFormat::q8_0,
                                                              WeightFormat::q4_0)));

}  // namespace
}  // namespace dt
