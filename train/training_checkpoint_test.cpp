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

// Whole flat tensors of `layout` with every unpadded element set from `seed`.
FlatTensors filled(const ParameterLayout& layout, uint64_t seed) {
  FlatTensors t(layout, MemTag::workspace);
  init_parameters(t, seed);
  return t;
}

// A checkpoint as a 2-rank ZeRO 1 run of an earlier version wrote it: the moments as each rank's
// part of each unit of a layout padded for 2 ranks (BUFFER.unit.U.part.R), the parameters whole
// by name in rank 0's file, and the sharding in the state. It still loads, in one process.
TEST(TrainingCheckpoint, AnEarlierVersionsUnitShardedCheckpointLoads) {
  testing::TempDir dir;
  const ModelConfig config = model_preset("gpt2-tiny");
  const ParameterLayout padded(config, 32), plain(config);
  const FlatTensors params = filled(plain, 1), m = filled(padded, 2), v = filled(padded, 3);
  std::vector<std::pair<std::string, Tensor>> files[2];
  for (const ParamInfo& p : plain.params()) files[0].emplace_back("model." + p.name, params.unpadded(p));
  for (const auto& [buffer, whole] : {std::pair{"adamw.m", &m}, std::pair{"adamw.v", &v}})
    for (size_t u = 0; u < padded.units().size(); ++u) {
      const kernels::FlatRange unit = padded.units()[u];
      for (int r = 0; r < 2; ++r)
        files[r].emplace_back(str(buffer, ".unit.", u, ".part.", r),
                              whole->all().slice_rows(unit.begin + r * unit.size() / 2, unit.size() / 2));
    }
  ckpt::begin_checkpoint(dir.path(), 7);
  for (int r = 0; r < 2; ++r) ckpt::write_checkpoint_file(dir.path(), 7, ckpt::shard_file_name(r, 2), files[r]);
  const nlohmann::json state = {{"adamw_steps", 7},
                                {"loader", {{"epoch", 0}, {"position", 3}}},
                                {"sharding", {{"ranks", 2}, {"unit_multiple", 32}, {"buffers", {"adamw.m", "adamw.v"}}}}};
  ckpt::finish_checkpoint(dir.path(), {.step = 7, .model = model_description(config), .state = state, .tensors = {}},
                          {ckpt::shard_file_name(0, 2), ckpt::shard_file_name(1, 2)}, 1);

  Transformer model(config, 1, 8);
  AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
  const TrainingProgress progress =
      load_training_checkpoint(ckpt::Checkpoint(ckpt::Checkpoint::latest(dir.path())), model.params(), optimizer, nullptr);
  EXPECT_EQ(progress.step, 7);
  EXPECT_EQ(optimizer.steps_taken(), 7);
  for (const ParamInfo& p : plain.params()) {
    EXPECT_TRUE(same_bytes(model.params().unpadded(p), params.unpadded(p))) << p.name;
    EXPECT_TRUE(same_bytes(optimizer.moment(AdamW::Moment::first, p), m.unpadded(p.name))) << p.name;
    EXPECT_TRUE(same_bytes(optimizer.moment(AdamW::Moment::second, p), v.unpadded(p.name))) << p.name;
  }
}

// Pieces of a tensor (NAME[B:E]) load as the whole tensor; a gap among them is named.
TEST(TrainingCheckpoint, PiecesOfATensorLoadWholeAndAGapIsNamed) {
  const ModelConfig config = model_preset("gpt2-tiny");
  const ParameterLayout layout(config);
  const FlatTensors params = filled(layout, 1), moments = filled(layout, 2);
  const ParamInfo& wte = layout.find("wte");
  for (const bool gap : {false, true}) {
    testing::TempDir dir;
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const ParamInfo& p : layout.params()) {
      tensors.emplace_back("model." + p.name, params.unpadded(p));
      tensors.emplace_back("adamw.v." + p.name, moments.unpadded(p));
      if (&p != &wte) {
        tensors.emplace_back("adamw.m." + p.name, moments.unpadded(p));
        continue;
      }
      // wte's first moments in three pieces, the middle one left out for `gap`.
      const Tensor flat = moments.unpadded(p).reshape({p.numel()});
      const int64_t a = 1000, b = 2000;
      tensors.emplace_back(str("adamw.m.wte[0:", a, "]"), flat.slice_rows(0, a));
      if (!gap) tensors.emplace_back(str("adamw.m.wte[", a, ":", b, "]"), flat.slice_rows(a, b - a));
      tensors.emplace_back(str("adamw.m.wte[", b, ":", p.numel(), "]"), flat.slice_rows(b, p.numel() - b));
    }
    ckpt::save_checkpoint(dir.path(),
                          {.step = 1,
                           .model = model_description(config),
                           .state = {{"adamw_steps", 1}, {"loader", {{"epoch", 0}, {"position", 0}}}},
                           .tensors = tensors},
                          1);
    Transformer model(config, 1, 8);
    AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
    const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(dir.path()));
    if (gap) {
      const std::string message = testing::error_message(
          [&] { load_training_checkpoint(checkpoint, model.params(), optimizer, nullptr); });
      EXPECT_NE(message.find("tensor 'adamw.m.wte' is missing elements from 1000 of 47856"), std::string::npos)
          << message;
      continue;
    }
    load_training_checkpoint(checkpoint, model.params(), optimizer, nullptr);
    EXPECT_TRUE(same_bytes(optimizer.moment(AdamW::Moment::first, wte), moments.unpadded(wte)));
  }
}

}  // namespace
}  // namespace dt
