#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::ckpt {
namespace {

using testing::error_of;

using testing::OwnedTensor;
using testing::TempDir;

struct State {
  OwnedTensor weights = testing::random_normal(DType::f32, {17, 5}, 1);
  OwnedTensor moments = testing::random_normal(DType::f32, {85}, 2);
  CheckpointContent content(int64_t step) const {
    return {.step = step,
            .model = {{"family", "gpt2"}, {"n_layer", 2}},
            .state = {{"loader", {{"epoch", 1}, {"position", step * 8}}}},
            .tensors = {{"param.w", weights.t}, {"adamw.m", moments.t}}};
  }
};

TEST(Checkpoint, SavesLoadsAndKeepsTheNewestK) {
  TempDir dir;
  State state;
  for (int64_t step : {100, 200, 300}) {
    state.weights.ptr<float>()[0] = static_cast<float>(step);
    save_checkpoint(dir.path(), state.content(step), /*keep_last=*/2);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "step_000000100"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "step_000000200"));
  const Checkpoint latest(Checkpoint::latest(dir.path()));
  EXPECT_EQ(latest.step(), 300);
  EXPECT_EQ(latest.model()["n_layer"], 2);
  EXPECT_EQ(latest.state()["loader"]["position"], 2400);
  OwnedTensor w = testing::zeros(DType::f32, {17, 5}), m = testing::zeros(DType::f32, {85});
  latest.read_into("param.w", w.t);
  latest.read_into("adamw.m", m.t);
  EXPECT_EQ(std::memcmp(w.t.data, state.weights.t.data, w.t.bytes()), 0);
  EXPECT_EQ(std::memcmp(m.t.data, state.moments.t.data, m.t.bytes()), 0);
  latest.verify();
}

// A removal a crash interrupted (step_N.old, some files gone: cli/rank_faults_cli_test.cpp's
// kills found one before removals were renamed first) is not a checkpoint: not the previous one
// a corrupt checkpoint's error points to, and removed by the next save.
TEST(Checkpoint, ARemovalACrashInterruptedIsNoCheckpointAndIsFinishedLater) {
  TempDir dir;
  State state;
  save_checkpoint(dir.path(), state.content(100), 1);
  save_checkpoint(dir.path(), state.content(200), 1);
  // Step 100's removal as a crash leaves it: renamed, its tensors deleted, the manifest left.
  std::filesystem::create_directory(dir.path() / "step_000000100.old");
  std::ofstream(dir.path() / "step_000000100.old" / "manifest.json") << "{}";
  std::filesystem::create_directory(dir.path() / "step_000000150.tmp");  // a save a crash interrupted
  {
    std::fstream file(dir.path() / "step_000000200" / "tensors.safetensors",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('\x7f');
  }
  const std::string error = error_of([&] { Checkpoint(Checkpoint::latest(dir.path())).verify(); });
  EXPECT_NE(error.find("No earlier checkpoint is kept"), std::string::npos) << error;
  save_checkpoint(dir.path(), state.content(300), 1);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "step_000000100.old"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "step_000000200"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "step_000000200.old"));
  EXPECT_EQ(Checkpoint(Checkpoint::latest(dir.path())).step(), 300);
}

TEST(Checkpoint, AFlippedByteNamesTheTensorAndThePreviousCheckpoint) {
  TempDir dir;
  const State state;
  save_checkpoint(dir.path(), state.content(1), 3);
  const auto second = save_checkpoint(dir.path(), state.content(2), 3);
  {
    // Flip one byte of adamw.m's data (the last tensor: the end of the file).
    std::fstream file(second / "tensors.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    const char byte = static_cast<char>(file.get());
    file.seekp(-3, std::ios::end);
    file.put(static_cast<char>(byte ^ 0x10));
  }
  const Checkpoint broken(second);
  const std::string message = error_of([&] { broken.verify(); });
  EXPECT_NE(message.find("tensor 'adamw.m' fails its checksum"), std::string::npos) << message;
  EXPECT_NE(message.find("Resume from the previous checkpoint '" + (dir.path() / "step_000000001").string()),
            std::string::npos)
      << message;
}

TEST(Checkpoint, AFailedSaveLeavesTheLastGoodCheckpointTheLatest) {
  TempDir dir;
  const State state;
  save_checkpoint(dir.path(), state.content(1), 3);
  // A crash mid-save leaves a temporary directory behind; it must not be mistaken for a step.
  std::filesystem::create_directories(dir.path() / "step_000000002.tmp");
  std::ofstream(dir.path() / "step_000000002.tmp" / "tensors.safetensors") << "partial";
  EXPECT_EQ(Checkpoint(Checkpoint::latest(dir.path())).step(), 1);
  // A failure while replacing the pointer (injected: its temporary path is taken by a
  // non-empty directory) leaves the pointer on the previous checkpoint.
  std::filesystem::create_directories(dir.path() / "latest.tmp" / "occupied");
  EXPECT_THROW(save_checkpoint(dir.path(), state.content(2), 3), Error);
  EXPECT_EQ(Checkpoint(Checkpoint::latest(dir.path())).step(), 1);
  Checkpoint(Checkpoint::latest(dir.path())).verify();
  // Once the obstacle is gone, saving works and cleans up.
  std::filesystem::remove_all(dir.path() / "latest.tmp");
  save_checkpoint(dir.path(), state.content(2), 3);
  EXPECT_EQ(Checkpoint(Checkpoint::latest(dir.path())).step(), 2);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "step_000000002.tmp"));
}

TEST(Checkpoint, MissingCheckpointsAndTensorsAreNamed) {
  TempDir dir;
  EXPECT_NE(error_of([&] { Checkpoint::latest(dir.path()); }).find("no checkpoint under"), std::string::npos);
  const State state;
  const Checkpoint saved(save_checkpoint(dir.path(), state.content(5), 1));
  OwnedTensor x = testing::zeros(DType::f32, {3});
  const std::string message = error_of([&] { saved.read_into("param.v", x.t); });
  EXPECT_NE(message.find("has no tensor 'param.v'; it was saved by a different model"), std::string::npos) << message;
}

// A checkpoint written by several processes, each its own file (as ZeRO's ranks save their
// shards), reads like one written by one; without one of its files it is refused whole, naming
// the file, before anything is read.
TEST(Checkpoint, OneWrittenByThreeProcessesNeedsEveryFile) {
  TempDir dir;
  State first, second;
  second.weights.ptr<float>()[0] = 42;
  const OwnedTensor third = testing::random_normal(DType::f32, {7}, 3);
  CheckpointContent content = first.content(4);
  content.tensors.clear();
  begin_checkpoint(dir.path(), 4);
  write_checkpoint_file(dir.path(), 4, shard_file_name(0, 3), first.content(4).tensors);
  write_checkpoint_file(dir.path(), 4, shard_file_name(1, 3), {{"param.w.1", second.weights.t}});
  // Finishing before every process has written is an error naming the file.
  const std::vector<std::string> files = {shard_file_name(0, 3), shard_file_name(1, 3), shard_file_name(2, 3)};
  const std::string early = error_of([&] { finish_checkpoint(dir.path(), content, files, 2); });
  EXPECT_NE(early.find("tensors_00002_of_00003.safetensors' was not written"), std::string::npos) << early;
  write_checkpoint_file(dir.path(), 4, shard_file_name(2, 3), {{"rank2.x", third.t}});
  const std::filesystem::path step = finish_checkpoint(dir.path(), content, files, 2);

  const Checkpoint whole(step);
  EXPECT_EQ(whole.tensor_names().size(), 4u);
  OwnedTensor w = testing::zeros(DType::f32, {17, 5}), x = testing::zeros(DType::f32, {7});
  whole.read_into("param.w.1", w.t);
  whole.read_into("rank2.x", x.t);
  EXPECT_EQ(w.ptr<float>()[0], 42);
  EXPECT_EQ(std::memcmp(x.t.data, third.t.data, x.t.bytes()), 0);
  whole.verify();

  std::filesystem::remove(step / shard_file_name(1, 3));
  const std::string message = error_of([&] { Checkpoint incomplete(step); });
  EXPECT_NE(message.find(str("checkpoint '", step.string(), "' is incomplete: its manifest names 3 tensor files and "
                             "these are missing:\n  tensors_00001_of_00003.safetensors (1 tensor)")),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("copy the whole step directory. No earlier checkpoint is kept"), std::string::npos) << message;
}

}  // namespace
}  // namespace dt::ckpt
