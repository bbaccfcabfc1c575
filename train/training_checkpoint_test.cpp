// A training checkpoint gives back the model, the optimizer and the progress it saved.
#include "train/training_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

TEST(TrainingCheckpoint, RoundTripsModelOptimizerScalerAndProgressForBothFamilies) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    testing::TempDir dir;
    const ModelConfig config = model_preset(preset);
    Transformer saved(config, 1, 8);
    init_parameters(saved.params(), 5);
    AdamW saved_optimizer(saved.layout(), OptimizerParts::whole(saved), {});
    FlatTensors m(saved.layout(), MemTag::workspace), v(saved.layout(), MemTag::workspace);
    init_parameters(m, 6);
    init_parameters(v, 7);
    saved_optimizer.take_moment(AdamW::Moment::first, m.all());
    saved_optimizer.take_moment(AdamW::Moment::second, v.all());
    saved_optimizer.restore_steps_taken(12);
    LossScaler saved_scaler({.initial_scale = 1024, .growth_interval = 5});
    saved_scaler.update(false, 1);
    saved_scaler.update(true, 2);
    save_training_checkpoint(dir.path(), 2, saved.params(), saved_optimizer, &saved_scaler, {12, {1, 34}});

    const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(dir.path()));
    EXPECT_EQ(model_description(model_config_of(checkpoint)), model_description(config)) << preset;
    Transformer loaded(model_config_of(checkpoint), 1, 8);
    AdamW optimizer(loaded.layout(), OptimizerParts::whole(loaded), {});
    LossScaler scaler({.initial_scale = 1024, .growth_interval = 5});
    const TrainingProgress progress = load_training_checkpoint(checkpoint, loaded.params(), optimizer, &scaler);
    EXPECT_EQ(progress.step, 12);
    EXPECT_EQ(progress.loader, (DataLoaderState{1, 34}));
    EXPECT_EQ(optimizer.steps_taken(), 12);
    EXPECT_EQ(scaler.scale(), saved_scaler.scale());
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.state().finite_in_a_row, 1);
    EXPECT_TRUE(same_bytes(loaded.params().all(), saved.params().all())) << preset;
    EXPECT_TRUE(same_bytes(optimizer.moment_parts(AdamW::Moment::first).at(0), m.all())) << preset;
    EXPECT_TRUE(same_bytes(optimizer.moment_parts(AdamW::Moment::second).at(0), v.all())) << preset;
  }
}

TEST(TrainingCheckpoint, ADifferentModelIsRefusedWithEveryDifferingField) {
  testing::TempDir dir;
  Transformer saved(model_preset("gpt2-tiny"), 1, 8);
  AdamW saved_optimizer(saved.layout(), OptimizerParts::whole(saved), {});
  save_training_checkpoint(dir.path(), 1, saved.params(), saved_optimizer, nullptr, {3, {}});
  ModelConfig other = model_preset("gpt2-tiny");
  other.n_layer = 3;
  other.vocab_size = 1000;
  Transformer model(other, 1, 8);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(dir.path()));
  const std::string message = testing::error_message([&] { load_training_checkpoint(checkpoint, model.params(), optimizer, nullptr); });
  for (const char* expected : {"was saved by a different model", "model.n_layer: checkpoint 2, config 3",
                               "model.vocab_size: checkpoint 997, config 1000"})
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\n" << message;
}

}  // namespace
}  // namespace dt
