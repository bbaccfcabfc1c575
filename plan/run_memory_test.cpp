// The planner against the allocator, rank by rank and tag by tag: each cell trains a small model
// with `dtrain train`'s own code (run_training) under a parallel layout — dp with each ZeRO
// stage, tp with and without sp, pp under four schedules (two with two stages a rank), cp,
// recomputation, bf16 and their compositions, and a mixture of experts — and every rank compares the peak bytes it held
// under each tag during the run with what plan/memory.h predicted for that rank from the
// configuration alone, with the host staging of an asynchronous save after each step. ctest
// runs each cell under mpirun as MpiMemoryCell.npN.<cell>
// (CMakeLists.txt); run without mpirun, they skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

#include "comm/world.h"
#include "core/allocator.h"
#include "data/token_shard.h"
#include "tests/layout_cell.h"
#include "tests/mpi_testing.h"
#include "tests/testing.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace dt {
namespace {

using testing::LayoutCell;

// Rank 0's `path`, on every rank of `world`.
std::string rank0_path(Communicator& world, const std::string& path) {
  std::vector<int32_t> text(4096, 0);
  std::copy(path.begin(), path.end(), text.begin());
  world.broadcast({text.data(), DType::i32, Shape{static_cast<int64_t>(text.size())}}, 0).wait();
  return {text.begin(), std::find(text.begin(), text.end(), 0)};
}

// The run's configuration: two steps of the cell's layout over the GPL's bytes (vocabulary 256),
// micro-batches of 4 sequences of 32 bytes, 4 of them per step under pp (the schedule's count),
// else 2; under pp a layer more than the stages (an interleaved or V schedule has two a rank);
// no validation shards or tokenizer: no evaluation or samples.
std::string run_toml(const LayoutCell& cell, int world, const std::string& data_dir) {
  const int tp = world / (cell.dp * cell.pp * cell.cp);
  const int accumulation = cell.pp > 1 ? 4 : 2;
  const int stages = cell.pp * (cell.schedule == "zb_v" ? 2 : cell.virtual_stages);
  std::string schedule = cell.schedule;  // the cell's name for it has _ for the configuration's -
  std::replace(schedule.begin(), schedule.end(), '_', '-');
  const char* preset = cell.family == "gpt2" ? "gpt2-tiny" : cell.family == "moe" ? "moe-tiny" : "llama-tiny";
  return str("[model]\npreset = \"", preset, "\"\nvocab_size = 256\n",
             cell.family == "llama_tied" ? "tied_embeddings = true\n" : "",
             cell.family == "moe" ? "moe_bias_update_rate = 0.01\nmoe_aux_loss_coef = 0.1\nmoe_z_loss_coef = 0.01\n"
                                     "moe_shared_hidden = 24\nmoe_shared_gate = true\n"
                                     "moe_capacity_factor = 1.25\n"
                                   : "",
             cell.pp > 1 ? str("n_layer = ", stages + 1, "\n") : "", "[data]\ndir = \"", data_dir,
             "\"\nseq_len = 32\n[train]\nsteps = 2\nmicro_batch_size = 4\nglobal_batch_size = ",
             4 * cell.dp * accumulation, "\nprecision = \"", dtype_name(cell.precision), "\"\nfp8 = \"", float8_scaling_name(cell.fp8),
             "\"\nrecompute = \"", recompute_name(cell.recompute), "\"\nqat = \"", cell.qat,
             "\"\nqat_activations = \"", cell.qat_activations ? "int8" : "none", "\"\n[optim]\nwarmup_steps = 1\n",
             "[parallel]\ndp = ", cell.dp, "\ntp = ", tp, "\npp = ", cell.pp, "\ncp = ", cell.cp, "\nep = ", cell.ep,
             "\nsp = ", cell.sp ? "true" : "false", "\nzero_stage = ", cell.zero, "\npp_schedule = \"", schedule,
             "\"\npp_virtual = ", cell.virtual_stages, "\n[log]\nprogress = \"plain\"\n", "[fp8]\nblock = 8\n");
}

class MpiMemoryCell : public ::testing::TestWithParam<LayoutCell> {};

TEST_P(MpiMemoryCell, PeakIsPlanned) {
  DT_SKIP_WITHOUT_MPIRUN();
  const LayoutCell& cell = GetParam();
  std::unique_ptr<Communicator> job = make_world(Device::cpu);
  const int rank = job->rank(), world = job->size();
  std::optional<testing::TempDir> dir;
  if (rank == 0) {
    dir.emplace();
    std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    std::filesystem::create_directories(dir->path() / "data");
    TokenShardWriter writer(dir->file("data/train_000000.bin"), 256);
    std::vector<uint32_t> tokens(text.begin(), text.begin() + 24000);
    for (uint32_t& t : tokens) t &= 0xff;
    writer.append(tokens);
    writer.finish();
    std::ofstream(dir->file("run.toml")) << run_toml(cell, world, dir->file("data"));
  }
  const std::string path = rank0_path(*job, rank == 0 ? dir->path().string() : "");
  RunConfig config = load_run_config(std::filesystem::path(path) / "run.toml");
  config.log.run_dir.clear();  // no metrics: the peaks are the steps' and the saves'
  // An asynchronous save after each step: its host staging is planned too.
  config.checkpoint.dir = std::filesystem::path(path) / "checkpoints";
  config.checkpoint.every = 1;
  config.checkpoint.async = true;

  const MemoryStats before = memory_stats(Device::cpu);
  run_training(config);
  const MemoryStats after = memory_stats(Device::cpu);
  const MemoryPlan plan = run_memory_plan(config, config.dims().coords_of(rank));
  for (int t = 0; t < kNumMemTags; ++t) {
    const auto tag = static_cast<MemTag>(t);
    const size_t measured = after.peak(tag) - before.current(tag), planned = plan.peak(tag);
    const std::string what = str("rank ", rank, " ", mem_tag_name(tag), ": measured ", measured, " bytes, planned ",
                                 planned, " (", plan.during_step[static_cast<size_t>(t)], " of them during a step)");
    std::printf("%s\n", what.c_str());
    // The plan sizes every buffer with its constructor's own function, and walks the passes'
    // and the schedule's own orders for what they hold at once: within 5%, the planner's promise
    // (exact in every cell today but moe_f32_dp2_zero0_ep2, whose communication is planned 1.6%
    // over: at ZeRO 0 its units reduce as two buckets each, the experts' over a group of one, and
    // a bucket done early may lend its kept result buffer to a later one that the plan counts apart;
    // and moe_bf16_dp2_zero0_ep2_fp8blockwise, whose workspace is planned 1.2-1.9% over: an FP8
    // product's rows are bounded, not known, where the routing decides them).
    EXPECT_NEAR(static_cast<double>(planned), static_cast<double>(measured), 0.05 * static_cast<double>(measured))
        << what;
    // The staging is what the rank writes, counted from the layout as checkpoint_share picks it.
    if (tag == MemTag::checkpoint) {
      EXPECT_EQ(planned, measured) << what;
    }
    // A QAT product's weight copy is 3.5% of the one-rank cell's workspace, inside the 5%: exact.
    if (tag == MemTag::workspace && cell.qat != "none") {
      EXPECT_EQ(planned, measured) << what;
    }
  }
  job->barrier().wait();  // rank 0's directory outlives every rank's run
}

std::vector<LayoutCell> cells() {
  std::vector<LayoutCell> out;
  // One rank: recomputation in each precision.
  out.push_back({.family = "gpt2", .precision = DType::bf16, .recompute = Recompute::full});
  out.push_back({.family = "llama", .recompute = Recompute::selective});
  for (const int zero : {0, 1, 2, 3}) out.push_back({.family = "llama", .dp = 2, .zero = zero});
  out.push_back({.family = "gpt2", .precision = DType::bf16, .dp = 2, .zero = 1});
  out.push_back({.family = "gpt2", .dp = 2, .zero = 2, .recompute = Recompute::full});
  out.push_back({.family = "llama"});  // tp 2
  out.push_back({.family = "gpt2", .sp = true});
  out.push_back({.family = "llama", .precision = DType::bf16, .sp = true, .recompute = Recompute::selective});
  out.push_back({.family = "gpt2", .pp = 2});
  out.push_back({.family = "llama", .pp = 2, .schedule = "zb_h1"});
  out.push_back({.family = "llama_tied", .pp = 2, .schedule = "interleaved", .virtual_stages = 2});
  out.push_back({.family = "gpt2", .pp = 2, .schedule = "zb_v"});
  out.push_back({.family = "llama", .cp = 2});
  out.push_back({.family = "llama", .precision = DType::bf16, .cp = 2});
  out.push_back({.family = "gpt2", .dp = 2, .zero = 1, .cp = 2});  // dp 2 × cp 2
  out.push_back({.family = "llama", .dp = 2, .zero = 1, .sp = true});  // dp 2 × tp 2
  out.push_back({.family = "gpt2", .sp = true, .pp = 2});              // tp 2 × pp 2
  // Experts: their activations at top_k rows a token (none dropped), the backward's scratch, the
  // zero-bubble schedule's kept gradients, and the balancing bias.
  out.push_back({.family = "moe", .precision = DType::bf16});
  out.push_back({.family = "moe", .dp = 2, .zero = 3});
  out.push_back({.family = "moe", .pp = 2, .schedule = "zb_h1"});
  // Expert parallelism: each rank's experts, and their rows sized for every rank's (dropless) or
  // every rank's capacities, with the all-to-alls' staging.
  out.push_back({.family = "moe", .dp = 2, .ep = 2});
  out.push_back({.family = "moe", .dp = 2, .zero = 3, .ep = 2});
  // Under tensor and sequence parallelism, every rank routing all the rows: tp 2 with sp, and
  // dp 2 × tp 2 with ep 2.
  out.push_back({.family = "moe", .sp = true});
  out.push_back({.family = "moe", .dp = 2, .zero = 1, .sp = true, .ep = 2});
  // OLMoE's query and key norms: their inputs and statistics, rebuilt under full recomputation,
  // and their working space.
  out.push_back({.family = "olmoe", .precision = DType::bf16, .recompute = Recompute::full});
  // FP8: each product's quantized operands, and delayed scaling's state.
  out.push_back({.family = "gpt2", .precision = DType::bf16, .fp8 = Float8Scaling::tensorwise});
  out.push_back({.family = "llama", .precision = DType::bf16, .sp = true, .fp8 = Float8Scaling::delayed});
  out.push_back({.family = "moe", .precision = DType::bf16, .dp = 2, .ep = 2, .fp8 = Float8Scaling::blockwise});
  // Quantization-aware training: each product's fake-quantized weight, the untied output
  // projection's the largest, and in bf16 its widened values; under tp 2 each rank's slices; with
  // the inputs quantized too, their copies.
  out.push_back({.family = "llama", .qat = "int8"});
  out.push_back({.family = "llama", .precision = DType::bf16, .sp = true, .qat = "int8"});
  out.push_back({.family = "llama", .qat = "int8", .qat_activations = true});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiMemoryCell, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return testing::cell_name(info.param); });

}  // namespace
}  // namespace dt
