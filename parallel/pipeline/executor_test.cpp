// The executor runs every schedule on real stages — all ranks in one process, in turn — and gives
// the whole model's losses and gradients: bit for bit where every weight belongs to one stage
// (llama-tiny, untied), and with gpt2-tiny's tied embedding (on the first and the last stage)
// the two stages' shares of its gradient summed in another order.
#include "parallel/pipeline/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "comm/mpi.h"
#include "core/rng.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule_check.h"
#include "tests/cuda_testing.h"
#include "tests/gradcheck.h"
#include "tests/mpi_testing.h"

namespace dt::pipeline {
namespace {

using testing::OwnedTensor;

constexpr int kB = 2, kT = 8;

OwnedTensor ids(const ModelConfig& config, uint64_t seed, int batch = kB, int seq = kT) {
  OwnedTensor t = testing::zeros(DType::i32, {batch, seq});
  const ElementRng rng(seed, "executor ids");
  for (int64_t i = 0; i < int64_t{batch} * seq; ++i)
    t.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(i) * config.vocab_size);
  return t;
}

struct Case {
  const char* schedule;
  int ranks, micro_batches, virtual_stages;
};

void expect_whole_models_numbers(const char* preset, const Case& c) {
  const Schedule schedule = make_schedule(c.schedule, c.ranks, c.micro_batches, c.virtual_stages);
  ASSERT_TRUE(check_schedule(schedule).ok());
  ModelConfig config = model_preset(preset);
  config.n_layer = schedule.stages() + 1;  // a stage of two blocks somewhere
  SCOPED_TRACE(str(preset, " ", c.schedule, " p ", c.ranks, " m ", c.micro_batches, " v ", c.virtual_stages));
  const ParameterLayout layout(config);
  FlatTensors weights(layout, MemTag::parameters);
  init_parameters(weights, 3);
  std::vector<OwnedTensor> tokens, targets;
  for (int k = 0; k < c.micro_batches; ++k) tokens.push_back(ids(config, 2 * k)), targets.push_back(ids(config, 2 * k + 1));
  const float scale = 1.0f / static_cast<float>(c.micro_batches * kB * kT);

  // One stage over the whole model, the micro-batches one after another.
  FlatTensors expected(layout, MemTag::gradients);
  expected.zero();
  Stage whole(layout, StageUnits::whole(config), Recompute::none, DType::f32, Device::cpu, kB, kT);
  std::vector<double> expected_losses;
  for (int k = 0; k < c.micro_batches; ++k) {
    whole.forward(k, tokens[k].t, weights, true);
    expected_losses.push_back(whole.loss(k, targets[k].t, scale, true));
    whole.backward(k, Tensor{}, tokens[k].t, weights, expected);
    whole.release(k);
  }

  // The pipeline: the stages the partition gives, each on its rank.
  const bool split = std::string(c.schedule).starts_with("zb");
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageUnits& units : partition_stages(config, schedule.stages(), kT))
    stages.push_back(std::make_unique<Stage>(layout, units, Recompute::none, DType::f32, Device::cpu, kB, kT,
                                             ParallelRegions::single_rank(), split));
  FlatTensors grads(layout, MemTag::gradients);
  grads.zero();
  InProcessTransport transport;
  std::vector<MicroBatch> data;
  for (int k = 0; k < c.micro_batches; ++k) data.push_back({tokens[k].t, targets[k].t});
  std::vector<PipelineRank> ranks;
  for (int r = 0; r < c.ranks; ++r) {
    std::vector<Stage*> mine(static_cast<size_t>(schedule.stages()), nullptr);
    for (int s = 0; s < schedule.stages(); ++s)
      if (schedule.stage_rank[s] == r) mine[s] = stages[s].get();
    ranks.emplace_back(schedule, r, mine, weights, grads, transport, data, scale);
  }
  run_in_turn(ranks);
  const int last = schedule.stage_rank[schedule.stages() - 1];
  for (int k = 0; k < c.micro_batches; ++k) EXPECT_EQ(ranks[last].losses()[k], expected_losses[k]) << "micro-batch " << k;
  for (const ParamInfo& p : layout.params()) {
    const Tensor got = grads.unpadded(p), want = expected.unpadded(p);
    if (p.name != "wte" || !config.tied_embeddings) {
      EXPECT_EQ(std::memcmp(got.data, want.data, got.bytes()), 0) << p.name;
      continue;
    }
    // The tied embedding's gradient: the lookup's (first stage) and the output projection's
    // (last stage) shares, added in the schedule's order instead of one micro-batch's after the
    // other's: f32 rounding of sums of a few terms.
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got.ptr<float>()[i] - want.ptr<float>()[i])));
      largest = std::max(largest, static_cast<double>(std::fabs(want.ptr<float>()[i])));
    }
    EXPECT_LE(worst, 1e-6 * largest) << p.name;
  }
}

TEST(Executor, EveryScheduleGivesTheWholeModelsNumbers) {
  for (const char* preset : {"llama-tiny", "gpt2-tiny"})
    for (const Case& c : {Case{"afab", 2, 4, 1}, Case{"1f1b", 3, 5, 1}, Case{"1f1b", 4, 4, 1},
                          Case{"interleaved", 2, 4, 2}, Case{"zb-h1", 3, 5, 1}, Case{"zb-v", 2, 4, 1}})
      expect_whole_models_numbers(preset, c);
}

}  // namespace
}  // namespace dt::pipeline

namespace dt::pipeline {
namespace {

// The boundary tensors a rank holds at once, worked by hand for 1F1B over two ranks. A sent copy
// goes once the receiver's next message back arrives (send_releases): rank 0's copy of micro-
// batch k's activation with the gradient of k, rank 1's copy of k's input gradient with the
// activation of k + 2. A received activation is freed once its forward has copied it in, before
// the loss (PipelineRank::run). One micro-batch: rank 0 holds its copy and the received gradient
// (2); rank 1 the received activation, then its input gradient and that gradient's copy (2, the
// input gradient freed after the copy is made), and nothing at the loss (0). Four: rank 0 holds
// two copies (0 and 1) when the gradient of 0 arrives (3); rank 1 two copies when the activation
// of 2 arrives, before the copy of 0 goes (3), and at the loss of micro-batch k >= 1 the copy of
// k - 1 (1: the copy of k - 2 went on the arrival of k). Every rank's measured peak is checked
// against this in plan/run_memory_test.cpp.
TEST(Executor, BoundaryBuffersHeldAtOnceAreCountedFromTheSchedule) {
  const auto expect = [](int micro_batches, int rank, int peak, int at_loss) {
    const BoundaryBuffers held = boundary_buffers(make_schedule("1f1b", 2, micro_batches), rank);
    EXPECT_EQ(held.peak, peak) << micro_batches << " micro-batches, rank " << rank;
    EXPECT_EQ(held.at_loss, at_loss) << micro_batches << " micro-batches, rank " << rank;
  };
  expect(1, 0, 2, 0);
  expect(1, 1, 2, 0);
  expect(4, 0, 3, 0);
  expect(4, 1, 3, 1);
}

// The same over MPI: ctest runs these as Mpi.np2 to Mpi.np4 (MpiCuda.np2 with CUDA buffers), the
// world being the pipeline's ranks.
//
// Runs `schedule` over the world's ranks (the pipeline's), each holding the whole model's parameters but
// running only its stages on micro-batches of (batch, seq) tokens, and expects its stages'
// gradients and the last stage's losses to be one rank's, bit for bit (`config` untied: every
// weight in one stage).
void expect_ranks_give_the_whole_models_numbers(Communicator& world, const Schedule& schedule,
                                                const ModelConfig& config, int batch, int seq) {
  const int rank = world.rank(), m = schedule.micro_batches;
  const Device device = world.device();
  SCOPED_TRACE(str(schedule.name, " p ", schedule.ranks, " m ", m, " rank ", rank, " on ", device_name(device)));
  const ParameterLayout layout(config);
  FlatTensors weights(layout, MemTag::parameters, device);
  init_parameters(weights, 3);
  std::vector<OwnedTensor> tokens, targets;
  std::vector<MicroBatch> data;
  for (int k = 0; k < m; ++k) {
    tokens.push_back(testing::copy_to(ids(config, 2 * k, batch, seq).t, device));
    targets.push_back(testing::copy_to(ids(config, 2 * k + 1, batch, seq).t, device));
    data.push_back({tokens.back().t, targets.back().t});
  }
  const float scale = 1.0f / static_cast<float>(m * batch * seq);
  FlatTensors expected(layout, MemTag::gradients, device);
  expected.zero();
  Stage whole(layout, StageUnits::whole(config), Recompute::none, DType::f32, device, batch, seq);
  std::vector<double> expected_losses;
  for (int k = 0; k < m; ++k) {
    whole.forward(k, data[k].tokens, weights, true);
    expected_losses.push_back(whole.loss(k, data[k].targets, scale, true));
    whole.backward(k, Tensor{}, data[k].tokens, weights, expected);
    whole.release(k);
  }
  const std::vector<StageUnits> parts = partition_stages(config, schedule.stages(), seq);
  std::vector<std::unique_ptr<Stage>> owned;
  std::vector<Stage*> mine(static_cast<size_t>(schedule.stages()), nullptr);
  std::vector<bool> my_units(layout.units().size(), false);
  for (int s = 0; s < schedule.stages(); ++s) {
    if (schedule.stage_rank[s] != rank) continue;
    owned.push_back(std::make_unique<Stage>(layout, parts[s], Recompute::none, DType::f32, device, batch, seq,
                                            ParallelRegions::single_rank(),
                                            schedule.name.starts_with("zb")));
    mine[s] = owned.back().get();
    if (parts[s].embeddings) my_units[0] = true;
    for (int l = parts[s].first_block; l < parts[s].end_block; ++l) my_units[static_cast<size_t>(l) + 1] = true;
    if (parts[s].head) my_units.back() = true;
  }
  FlatTensors grads(layout, MemTag::gradients, device);
  grads.zero();
  CommunicatorTransport transport(world, schedule.stage_rank);
  PipelineRank me(schedule, rank, mine, weights, grads, transport, data, scale);
  run_alone(me);
  transport.finish();
  if (schedule.stage_rank.back() == rank) {
    for (int k = 0; k < m; ++k) EXPECT_EQ(me.losses()[k], expected_losses[k]) << "micro-batch " << k;
  }
  for (const ParamInfo& p : layout.params()) {
    if (!my_units[layout.unit_of(p)]) continue;
    EXPECT_EQ(host_values<float>(grads.unpadded(p)), host_values<float>(expected.unpadded(p))) << p.name;
  }
  world.barrier().wait();
}

TEST(Mpi, PipelineRanksInTheirOwnProcessesGiveTheWholeModelsGradients) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int p = world->size();
  for (const Case& c : {Case{"afab", p, 3, 1}, Case{"1f1b", p, 5, 1}, Case{"interleaved", p, 2 * p, 2},
                        Case{"zb-h1", p, 5, 1}, Case{"zb-v", p, 4, 1}}) {
    const Schedule schedule = make_schedule(c.schedule, c.ranks, c.micro_batches, c.virtual_stages);
    ModelConfig config = model_preset("llama-tiny");
    config.n_layer = schedule.stages() + 1;
    // Messages of 2 × 16 rows of 48 floats, 6 KiB: above Open MPI's 4 KiB shared-memory eager
    // size, where an MPI send completes only once received (as paired sends are waited for).
    expect_ranks_give_the_whole_models_numbers(*world, schedule, config, kB, 2 * kT);
  }
}

// 1F1B with boundary messages of 4 MiB and more, above NCCL's eager size, where a send waits for
// its receive: the steady state's sends and receives go out in exchanges (Schedule::exchanges).
// A narrow model over many rows keeps the compute small; through MPI on the CPU, and with CUDA
// buffers (MpiCuda).
void expect_wide_messages_give_the_whole_models_numbers(Device device) {
  const std::unique_ptr<Communicator> world = mpi_world(device);
  ModelConfig config = model_preset("llama-tiny");
  config.n_layer = world->size();
  config.vocab_size = 128;
  constexpr int64_t kMessageBytes = int64_t{4} << 20;
  const int64_t row_bytes = int64_t{config.d_model} * static_cast<int64_t>(sizeof(float));
  const int seq = config.max_seq_len, batch = static_cast<int>((kMessageBytes + seq * row_bytes - 1) / (seq * row_bytes));
  ASSERT_GE(int64_t{batch} * seq * row_bytes, kMessageBytes);
  expect_ranks_give_the_whole_models_numbers(*world, make_schedule("1f1b", world->size(), 2), config, batch, seq);
}

TEST(Mpi, PipelineMessagesOfMebibytesGiveTheWholeModelsNumbers) {
  DT_SKIP_WITHOUT_MPIRUN();
  expect_wide_messages_give_the_whole_models_numbers(Device::cpu);
}

TEST(MpiCuda, PipelineMessagesOfMebibytesGiveTheWholeModelsNumbers) {
  DT_SKIP_WITHOUT_MPIRUN();
  DT_SKIP_WITHOUT_CUDA();
  expect_wide_messages_give_the_whole_models_numbers(Device::cuda);
}

}  // namespace
}  // namespace dt::pipeline
