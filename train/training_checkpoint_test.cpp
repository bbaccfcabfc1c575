// A training checkpoint gives back the model, the optimizer, the per-linear states and the
// progress it saved, under any layout.
#include "train/training_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

#include "comm/mpi.h"
#include "comm/single_process.h"
#include "parallel/parallel_run.h"
#include "tests/mpi_testing.h"
#include "tests/storage_testing.h"
#include "tests/linear_state_testing.h"
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

using testing::fp8_like_states;
using testing::three_blocks;

// Element i of state `name` under `seed`: a hash of the name (FNV-1a), then i, so that every
// entry holds other values and any layout knows what each should read back.
float state_value(const std::string& name, int64_t i, uint32_t seed) {
  uint32_t h = 2166136261u ^ seed;
  for (const char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return static_cast<float>(h % 1000003u) / 7.0f + static_cast<float>(i) * 0.25f;
}

// Sets every state held (on the CPU) to its values under `seed`: what each holder writes alike.
void fill_states(const LinearStates& states, uint32_t seed) {
  for (const LinearStates::Entry& e : states.entries()) {
    float* values = states.at(e).ptr<float>();
    for (int64_t i = 0; i < e.count; ++i) values[i] = state_value(e.name, i, seed);
  }
}

// The first state held whose bits are not its values under `seed`, or "" when none.
std::string first_differing(const LinearStates& states, uint32_t seed) {
  for (const LinearStates::Entry& e : states.entries())
    for (int64_t i = 0; i < e.count; ++i) {
      const float expected = state_value(e.name, i, seed);
      if (std::memcmp(states.at(e).ptr<float>() + i, &expected, sizeof(float)) != 0) return str(e.name, "[", i, "]");
    }
  return "";
}

// How many of a checkpoint's tensors are named `name`.
int64_t saved_times(const ckpt::Checkpoint& checkpoint, const std::string& name) {
  const std::vector<std::string> names = checkpoint.tensor_names();
  return std::ranges::count(names, name);
}

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(TrainingCheckpoint, LinearStatesRoundTripByNameAndLoadUnderAnotherLayout) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    testing::TempDir dir;
    const ModelConfig config = three_blocks(preset);
    Transformer saved(config, 1, 8, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr, fp8_like_states());
    init_parameters(saved.params(), 5);
    fill_states(saved.linear_states(), 1);
    AdamW saved_optimizer(saved.layout(), OptimizerParts::whole(saved), {});
    save_training_checkpoint(dir.path(), 1, saved.params(), saved_optimizer, nullptr, {3, {}}, &saved.linear_states());

    // Each state once, under linear_state.NAME.
    const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(dir.path()));
    for (const std::string& name : saved.linear_states().model_names())
      EXPECT_EQ(saved_times(checkpoint, "linear_state." + name), 1) << name;
    // A resume gives back the states with the rest.
    Transformer loaded(config, 1, 8, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr, fp8_like_states());
    AdamW optimizer(loaded.layout(), OptimizerParts::whole(loaded), {});
    load_training_checkpoint(checkpoint, loaded.params(), optimizer, nullptr, &loaded.linear_states());
    EXPECT_EQ(first_differing(loaded.linear_states(), 1), "") << preset;
    EXPECT_TRUE(same_bytes(loaded.params().all(), saved.params().all())) << preset;
    // Another layout reads its own by name: tp rank 1 of 2 holding blocks 1 and 2.
    const ParameterLayout stage(config, kParamAlignment, TensorShard{.rank = 1, .size = 2},
                                HeldUnits::of({StageUnits{.embeddings = false, .first_block = 1, .end_block = 3,
                                                          .head = true}},
                                              config.n_layer));
    LinearStates held(stage, fp8_like_states(), Device::cpu);
    load_linear_states(checkpoint, held);
    EXPECT_EQ(held.entries().size(), 2 * saved.linear_states().entries().size() / 3);
    EXPECT_EQ(first_differing(held, 1), "") << preset;
  }
}

TEST(TrainingCheckpoint, AMissingOrAnExtraLinearStateIsNamedWithItsFileAndTheFix) {
  const ModelConfig config = model_preset("gpt2-tiny");
  const std::vector<LinearStateDeclaration> history = {{.name = "amax_history", .count = 4, .linears = {}, .initial = 0}};
  testing::TempDir without_states, with_states;
  Transformer plain(config, 1, 8);
  AdamW plain_optimizer(plain.layout(), OptimizerParts::whole(plain), {});
  save_training_checkpoint(without_states.path(), 1, plain.params(), plain_optimizer, nullptr, {1, {}});
  Transformer declared(config, 1, 8, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr, history);
  AdamW declared_optimizer(declared.layout(), OptimizerParts::whole(declared), {});
  save_training_checkpoint(with_states.path(), 1, declared.params(), declared_optimizer, nullptr, {1, {}},
                           &declared.linear_states());
  const ckpt::Checkpoint lacking(ckpt::Checkpoint::latest(without_states.path()));
  const ckpt::Checkpoint holding(ckpt::Checkpoint::latest(with_states.path()));

  // A model that declares states, from a checkpoint without them: the first tensor it lacks,
  // the manifest that does not list it, and what to do.
  const std::string missing = testing::error_of(
      [&] { load_training_checkpoint(lacking, declared.params(), declared_optimizer, nullptr, &declared.linear_states()); });
  for (const std::string& expected :
       {std::string("lacks per-linear state this model declares"), std::string("'linear_state.h.0.attn.qkv.amax_history'"),
        (lacking.directory() / "manifest.json").string(), std::string("(8 of 8 missing)"),
        std::string("resume with the configuration that saved it, or start a new run in another checkpoint.dir")})
    EXPECT_NE(missing.find(expected), std::string::npos) << expected << "\n" << missing;
  // A model that declares none, from a checkpoint with them: the tensor and the file holding it.
  const std::string extra =
      testing::error_of([&] { load_training_checkpoint(holding, plain.params(), plain_optimizer, nullptr); });
  for (const std::string& expected :
       {std::string("holds per-linear state this model does not declare (it declares none"),
        str("'linear_state.h.0.attn.qkv.amax_history' in '", (holding.directory() / "tensors.safetensors").string(), "'"),
        std::string("8 tensors"), std::string("resume with the configuration that saved it")})
    EXPECT_NE(extra.find(expected), std::string::npos) << expected << "\n" << extra;
  // A kind declared on fewer layers: the others' are extra.
  LinearStates fewer(declared.layout(), {{.name = "amax_history", .count = 4, .linears = {"attn.qkv"}, .initial = 0}},
                     Device::cpu);
  const std::string partly = testing::error_of([&] { load_linear_states(holding, fewer); });
  EXPECT_NE(partly.find("'linear_state.h.0.attn.proj.amax_history'"), std::string::npos) << partly;
  EXPECT_NE(partly.find("6 tensors"), std::string::npos) << partly;
}

// With no state declared nothing is added: the names are the three buffers' of every parameter
// (whole or in pieces, NAME[...]) and no other, and the files are the bytes a save without the
// seam writes, through the one-process save and through the share a parallel run passes.
TEST(TrainingCheckpoint, WithoutLinearStateTheCheckpointHoldsWhatItDidBefore) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig config = model_preset(preset);
    Transformer model(config, 1, 8);
    init_parameters(model.params(), 9);
    AdamW optimizer(model.layout(), OptimizerParts::whole(model), {});
    testing::TempDir before, one_process, shared;
    save_training_checkpoint(before.path(), 1, model.params(), optimizer, nullptr, {2, {}});
    save_training_checkpoint(one_process.path(), 1, model.params(), optimizer, nullptr, {2, {}},
                             &model.linear_states());
    {
      SingleProcessCommunicator group(Device::cpu, "dp"), control(Device::cpu, "control");
      DataParallel dp(model, group, 25, ZeroPolicy::of(0, DType::f32, 1));
      save_training_checkpoint(shared.path(), 1, control, model.layout(),
                               checkpoint_share(dp, model.params(), &model.linear_states()), dp.optimizer(), nullptr,
                               {2, {}});
    }
    std::vector<std::string> expected;
    for (const char* buffer : {"model", "adamw.m", "adamw.v"})
      for (const ParamInfo& p : model.layout().params()) expected.push_back(str(buffer, ".", p.name));
    std::ranges::sort(expected);
    for (const testing::TempDir* dir : {&before, &one_process, &shared}) {
      const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(dir->path()));
      std::vector<std::string> names;
      for (const std::string& name : checkpoint.tensor_names()) names.push_back(name.substr(0, name.find('[')));
      std::ranges::sort(names);
      names.erase(std::unique(names.begin(), names.end()), names.end());
      EXPECT_EQ(names, expected) << preset;
      for (const char* file : {"tensors.safetensors", "manifest.json"})
        EXPECT_EQ(file_bytes(checkpoint.directory() / file),
                  file_bytes(ckpt::Checkpoint::latest(before.path()) / file))
            << preset << " " << file;
    }
  }
}

// The directory rank 0 made, named to every rank of `control` (the ranks of one machine share it).
std::filesystem::path shared_directory(Communicator& control, const testing::TempDir* made) {
  constexpr int64_t kLongest = 1024;
  const Buffer buffer(kLongest * sizeof(int32_t), MemTag::workspace, Device::cpu);
  const Tensor chars = buffer.view(DType::i32, {kLongest});
  if (made != nullptr) {
    const std::string path = made->path().string();
    DT_CHECK(static_cast<int64_t>(path.size()) < kLongest, "a temporary directory of ", path.size(), " characters");
    for (size_t i = 0; i < path.size(); ++i) chars.ptr<int32_t>()[i] = path[i];
  }
  control.broadcast(chars, 0).wait();
  std::string path;
  for (int64_t i = 0; i < kLongest && chars.ptr<int32_t>()[i] != 0; ++i) path += static_cast<char>(chars.ptr<int32_t>()[i]);
  return path;
}

// A parallel run saves its per-linear states once each, one process reads every one back, and
// what one process saves every rank of the layout reads for its blocks: bit for bit, by name.
// Then a max over ProcessGroups::stage_replica_groups is the max over the ranks of the stage.
// 2 ranks: tp 2; 3: dp 3 at ZeRO 1; 4: tp 2 × pp 2.
TEST(Mpi, LinearStatesMoveBetweenOneProcessAndAParallelLayoutBitForBit) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> control = mpi_world(Device::cpu, "control");
  const int ranks = control->size(), rank = control->rank();
  ParallelOptions options;
  options.model = three_blocks("llama-tiny");
  options.seq_len = 8;
  options.micro_batches = 2;
  options.dims = ranks == 4 ? ParallelDims{.tp = 2, .pp = 2} : ranks == 3 ? ParallelDims{.dp = 3} : ParallelDims{.tp = ranks};
  options.zero = ZeroPolicy::of(ranks == 3 ? 1 : 0, DType::f32, options.dims.dp);
  options.linear_states = fp8_like_states();
  ParallelRun run(options, *control);
  LinearStates& states = run.model().linear_states();
  ASSERT_FALSE(states.empty());
  std::optional<testing::TempDir> made;
  if (rank == 0) made.emplace();
  const std::filesystem::path root = shared_directory(*control, made ? &*made : nullptr);

  // Saved from the layout: every holder has the same values; one writes them.
  fill_states(states, 1);
  save_training_checkpoint(root / "parallel", 1, *control, run.model().layout(),
                           checkpoint_share(run.data_parallel(), run.model().params(), &states),
                           run.data_parallel().optimizer(), nullptr, {1, {}});
  if (rank == 0) {
    const ckpt::Checkpoint checkpoint(ckpt::Checkpoint::latest(root / "parallel"));
    for (const std::string& name : states.model_names())
      EXPECT_EQ(saved_times(checkpoint, "linear_state." + name), 1) << name;
    // One process reads them all; then saves other values for the layout to read.
    Transformer whole(options.model, 1, 8, Recompute::none, DType::f32, Device::cpu, {}, nullptr, {}, nullptr,
                      fp8_like_states());
    load_linear_states(checkpoint, whole.linear_states());
    EXPECT_EQ(first_differing(whole.linear_states(), 1), "");
    fill_states(whole.linear_states(), 2);
    AdamW optimizer(whole.layout(), OptimizerParts::whole(whole), {});
    save_training_checkpoint(root / "one", 1, whole.params(), optimizer, nullptr, {1, {}}, &whole.linear_states());
  }
  control->barrier().wait();
  load_training_checkpoint(ckpt::Checkpoint(ckpt::Checkpoint::latest(root / "one")), run.model().params(),
                           run.data_parallel().optimizer(), nullptr, &states);
  EXPECT_EQ(first_differing(states, 2), "") << "rank " << rank;

  // Each rank's own values, then their max over the stage's ranks.
  const ParallelDims& dims = run.groups().dims;
  for (const LinearStates::Entry& e : states.entries())
    for (int64_t i = 0; i < e.count; ++i) states.at(e).ptr<float>()[i] = static_cast<float>(rank * 100 + i + e.offset);
  states.reduce_max("amax_history", run.groups().stage_replica_groups());
  int last_of_stage = 0;  // the stage's highest rank
  for (int r = 0; r < ranks; ++r)
    if (dims.coords_of(r).pp == run.groups().coords.pp) last_of_stage = r;
  for (const LinearStates::Entry& e : states.entries()) {
    const bool reduced = states.declared()[e.kind].name == "amax_history";
    for (int64_t i = 0; i < e.count; ++i)
      EXPECT_EQ(states.at(e).ptr<float>()[i], static_cast<float>((reduced ? last_of_stage : rank) * 100 + i + e.offset))
          << "rank " << rank << " " << e.name << "[" << i << "]";
  }
  control->barrier().wait();  // before rank 0 removes the directory
}

}  // namespace
}  // namespace dt
