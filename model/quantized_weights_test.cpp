// What quantization applies to, post-training quantization, and quantization-aware training's
// forward and backward (model/quantized_weights.h, LinearProduct in model/layers.h): a QAT model's
// loss and gradients are, bit for bit, those of a plain model whose weights are the fake-quantized
// ones — the values the exporter writes — with the gradient reaching each weight unchanged (the
// straight-through estimator); embeddings, norms and biases are not quantized.
#include "model/quantized_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/linear.h"
#include "model/layers.h"
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
                  nullptr, QatRecipe{.weights = format});
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

// With the recipe's activations, a linear layer's forward is the product of its input's int8
// values (per row) and its weight's values in the format; its input's gradient is dout times the
// quantized weight (the input's quantizer passed straight through); its weight's gradient is
// dout's against the quantized input.
TEST(QatActivations, ALinearLayerMultipliesTheInputsInt8ValuesAndPassesItsGradientThrough) {
  const ParameterLayout layout(untied_llama());
  const ParamInfo& fc = layout.find("h.0.mlp.fc.weight");  // (192, 64)
  FlatTensors weights(layout, MemTag::parameters), grads(layout, MemTag::gradients);
  init_parameters(weights, 3);
  grads.zero();
  const int64_t N = 5, in = fc.shape[1], out = fc.shape[0];
  const auto filled = [](int64_t n, float scale, int seed) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(static_cast<float>(i * seed % 97) + 0.5f * seed);
    return v;
  };
  std::vector<float> x = filled(N * in, 2.0f, 7), dout = filled(N * out, 0.1f, 5);
  const auto tensor = [](std::vector<float>& v, int64_t rows, int64_t cols) {
    return Tensor{.data = v.data(), .dtype = DType::f32, .shape = {rows, cols}, .device = Device::cpu};
  };
  const LinearProduct product(&fc, nullptr, false, std::nullopt,
                              QatRecipe{.weights = WeightFormat::q4_0, .activations = true});
  std::vector<float> y(static_cast<size_t>(N * out)), dx(static_cast<size_t>(N * in));
  product.forward(weights, tensor(y, N, out), tensor(x, N, in));
  product.backward_input(weights, tensor(dx, N, in), tensor(dout, N, out));
  product.backward_weight(grads, tensor(dout, N, out), tensor(x, N, in));

  // The same with the quantized values made here, by the formats' own functions.
  std::vector<float> xq(x.size()), wq(static_cast<size_t>(out * in));
  kernels::fake_quantize(WeightFormat::int8, x, N, xq);
  const Tensor w = weights.stored(fc);
  kernels::fake_quantize(WeightFormat::q4_0, {w.ptr<float>(), wq.size()}, out, wq);
  std::vector<float> y_ref(y.size()), dx_ref(dx.size()), dw_ref(wq.size(), 0.0f);
  kernels::linear_forward(tensor(y_ref, N, out), tensor(xq, N, in), tensor(wq, out, in), Tensor{});
  kernels::linear_backward_input(tensor(dx_ref, N, in), tensor(dout, N, out), tensor(wq, out, in));
  kernels::linear_backward_weight(tensor(dw_ref, out, in), Tensor{}, tensor(dout, N, out), tensor(xq, N, in));
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(dx, dx_ref);
  const Tensor dw = grads.stored(fc);
  EXPECT_EQ(std::vector<float>(dw.ptr<float>(), dw.ptr<float>() + dw.numel()), dw_ref);
  EXPECT_NE(xq, x);  // the input was quantized: the check above is not of the unquantized product
}

INSTANTIATE_TEST_SUITE_P(Formats, Qat,
                         ::testing::Combine(::testing::Values(ModelFamily::gpt2, ModelFamily::llama),
                                            ::testing::Values(WeightFormat::int8, WeightFormat::q8_0,
                                                              WeightFormat::q4_0)));

}  // namespace
}  // namespace dt
