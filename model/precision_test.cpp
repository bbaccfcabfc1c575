// Mixed precision: what the model stores in 16 bits and what stays f32.
#include <gtest/gtest.h>

#include <array>

#include "core/allocator.h"
#include "model/transformer.h"

namespace dt {
namespace {

size_t current(MemTag tag) { return memory_stats(Device::cpu).current_bytes[static_cast<int>(tag)]; }

TEST(Precision, SixteenBitStorageHalvesActivationsAndWeightsAndKeepsAnF32Master) {
  const ModelConfig config = model_preset("llama-tiny");
  const auto bytes = [&](DType precision) {
    const size_t params = current(MemTag::parameters), optimizer = current(MemTag::optimizer_state),
                 activations = current(MemTag::activations), gradients = current(MemTag::gradients);
    const Transformer model(config, 4, 32, Recompute::none, precision);
    return std::array<size_t, 4>{current(MemTag::parameters) - params, current(MemTag::optimizer_state) - optimizer,
                                 current(MemTag::activations) - activations, current(MemTag::gradients) - gradients};
  };
  const auto f32 = bytes(DType::f32);
  for (DType precision : {DType::bf16, DType::f16}) {
    const auto mixed = bytes(precision);
    EXPECT_EQ(mixed[0], f32[0] / 2) << dtype_name(precision);  // the compute copy
    EXPECT_EQ(mixed[1], f32[0]) << dtype_name(precision);      // the f32 master, as optimizer state
    EXPECT_EQ(mixed[3], f32[3]) << dtype_name(precision);      // gradients stay f32
    // Activations halve, except the f32 per-row statistics (norms, lse, losses) and region
    // rounding to cache lines.
    EXPECT_LT(mixed[2], f32[2] * 0.55) << dtype_name(precision);
    EXPECT_GT(mixed[2], f32[2] * 0.45) << dtype_name(precision);
  }
}

TEST(Precision, OnlyF32Bf16AndF16AreModelPrecisions) {
  try {
    Transformer(model_preset("gpt2-tiny"), 1, 8, Recompute::none, DType::f64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision f64 is not one the model runs in; use f32, bf16 or f16"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dt
