// Transformer::training_bytes, the estimate a GPU run is checked against before it allocates,
// is what a CPU run of the same shape really allocates.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace dt {
namespace {

TEST(TrainingBytes, EqualWhatTheModelAndOptimizerAllocate) {
  for (const DType precision : {DType::f32, DType::bf16})
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const ModelConfig config = model_preset("gpt2-tiny");  // gpt2: no rope table beside the estimate
      const size_t before = memory_stats(Device::cpu).total_current_bytes;
      const Transformer model(config, 4, 32, recompute, precision);
      const AdamW optimizer(model.layout(), {});
      const size_t allocated = memory_stats(Device::cpu).total_current_bytes - before;
      EXPECT_EQ(Transformer::training_bytes(config, 4, 32, recompute, precision), allocated)
          << dtype_name(precision) << " " << recompute_name(recompute);
    }
}

}  // namespace
}  // namespace dt
