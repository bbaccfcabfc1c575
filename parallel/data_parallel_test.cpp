// Data parallelism against one process: ctest runs the Mpi.* cases on 2, 3 and 4 ranks. Each
// rank also trains the single-process reference itself (the whole global batch, no
// communication), so the comparison needs no files. Run alone, without mpirun, they skip.
#include "parallel/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <optional>
#include <vector>

#include "comm/mpi.h"
#include "tests/mpi_testing.h"
#include "comm/single_process.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "train/step.h"

namespace dt {
namespace {

constexpr int kB = 2, kT = 16, kSteps = 3;

// `sequences` x kT tokens and targets; a third of the targets ignored, unevenly, so that the
// global target count differs from any rank's.
struct GlobalBatch {
  Buffer tokens_memory, targets_memory;
  Tensor tokens, targets;
  GlobalBatch(int sequences, int vocab_size, int step)
      : tokens_memory(static_cast<size_t>(sequences) * kT * sizeof(int32_t), MemTag::workspace),
        targets_memory(static_cast<size_t>(sequences) * kT * sizeof(int32_t), MemTag::workspace),
        tokens(tokens_memory.view(DType::i32, {sequences, kT})),
        targets(targets_memory.view(DType::i32, {sequences, kT})) {
    const ElementRng rng(static_cast<uint64_t>(step), "data_parallel_test");
    for (int64_t i = 0; i < tokens.numel(); ++i) {
      const double ignore_share = (i / kT) % 3 == 0 ? 0.7 : 0.1;
      tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(3 * i) * vocab_size);
      targets.ptr<int32_t>()[i] = rng.uniform(3 * i + 1) < ignore_share
                                      ? kernels::kIgnoreIndex
                                      : static_cast<int32_t>(rng.uniform(3 * i + 2) * vocab_size);
    }
  }
  MicroBatch micro_batch(int index) const {
    return {tokens.slice_rows(int64_t{index} * kB, kB), targets.slice_rows(int64_t{index} * kB, kB)};
  }
};

struct StepSeries {
  std::vector<double> losses, norms;
};

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return worst;
}

// The largest difference between two models' parameters, over every shown element (the layouts
// may differ: ZeRO pads its units), relative to the largest parameter.
double parameter_difference(const FlatTensors& a, const FlatTensors& b) {
  double max_diff = 0, max_abs = 0;
  for (const ParamInfo& p : a.layout().params()) {
    const Tensor x = a.shown(p), y = b.shown(p.name);
    for (int64_t i = 0; i < x.numel(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(x.ptr<float>()[i] - y.ptr<float>()[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(x.ptr<float>()[i])));
    }
  }
  return max_diff / max_abs;
}

// A model in `precision` laid out and stored for ZeRO `stage` over `ranks`, with the parameters
// of seed `seed`, and its data parallelism over `group`.
struct ShardedModel {
  Transformer model;
  DataParallel dp;
  ShardedModel(const ModelConfig& config, Communicator& group, int stage, uint64_t seed, double bucket_mb = 25,
               DType precision = DType::f32)
      : model(config, kB, kT, Recompute::none, precision, Device::cpu, DataParallel::storage(group.size(), stage)),
        dp(model, group, bucket_mb, stage) {
    if (!dp.shards_parameters()) {
      init_parameters(model.params(), seed);
      return;
    }
    FlatTensors whole(model.layout(), MemTag::workspace);
    init_parameters(whole, seed);
    dp.take_parameters(whole);
  }
  // The f32 parameters whole, on rank 0 of the group where they are sharded (gathered there;
  // nullopt elsewhere), else nullopt: they are model.params().
  std::optional<FlatTensors> whole_parameters() {
    if (!dp.shards_parameters()) return std::nullopt;
    std::optional<FlatTensors> whole;
    if (dp.group().rank() == 0) whole.emplace(model.layout(), MemTag::workspace);
    dp.gather_parameters(whole ? &*whole : nullptr);
    return whole;
  }
};

// How many steps the matrix trains in each precision. The parallel run adds the same gradients
// in another order, so its f32 master weights differ from one process's in the last bits; where
// such a difference carries a master weight across a bf16 rounding boundary that the other run's
// does not cross, the two forwards read weights one bf16 ulp (2^-8 relative) apart, and from then
// on the runs differ by bf16's rounding, not f32's. Two steps check that the first update was
// written into every rank's 16-bit weights and read by the next forward; after one update the
// master weights differ by ~1e-7 of lr, too little to cross a boundary here (a third step of
// llama-tiny on 4 ranks with accumulation does: 3e-6 in the loss, 1e-3 in the parameters).
int steps(DType precision) { return precision == DType::f32 ? kSteps : 2; }

// dp = the group's size × ZeRO stage 0 to 3 × accumulation 1 and 2 × f32 and bf16, both
// families: losses, gradient norms and (f32 master) parameters over steps(precision) steps
// against one process training the same global batches in the same precision, and the weights forward reads
// bit for bit the same on every rank (ZeRO 3 keeps none whole, but the gathered ones are
// compared). On 3 ranks no unit of either model divides evenly (the vocabulary is 997): the
// padded parts are exercised.
void expect_matches_one_process(Communicator* world) {
  const int rank = world->rank(), ranks = world->size();
  for (const DType precision : {DType::f32, DType::bf16})
  for (const int stage : {0, 1, 2, 3})
  for (const char* preset : {"gpt2-tiny", "llama-tiny"})
    for (const int accumulation : {1, 2}) {
      const ModelConfig config = model_preset(preset);
      const int micro_batches = ranks * accumulation;  // of kB sequences in a global batch
      Transformer one(config, kB, kT, Recompute::none, precision);
      init_parameters(one.params(), 7);
      // Several buckets for a tiny model.
      ShardedModel sharded(config, *world, stage, 7, /*bucket_mb=*/0.05, precision);
      Transformer& mine = sharded.model;
      DataParallel& dp = sharded.dp;
      AdamW one_opt(one.layout(), {}), my_opt(mine.layout(), {});
      StepSeries reference, parallel;
      for (int step = 0; step < steps(precision); ++step) {
        const GlobalBatch batch(micro_batches * kB, config.vocab_size, step);
        std::vector<MicroBatch> all, own;
        for (int m = 0; m < micro_batches; ++m) all.push_back(batch.micro_batch(m));
        for (int m = 0; m < accumulation; ++m) own.push_back(batch.micro_batch(m * ranks + rank));
        const StepStats a = train_step(one, one_opt, all, 1e-3f, 1.0f);
        const StepStats b = stage == 0 ? train_step(mine, my_opt, own, 1e-3f, 1.0f, nullptr, step + 1, &dp)
                                       : train_step(mine, dp, own, 1e-3f, 1.0f, nullptr, step + 1);
        EXPECT_EQ(a.targets, b.targets);
        reference.losses.push_back(a.loss), reference.norms.push_back(a.grad_norm);
        parallel.losses.push_back(b.loss), parallel.norms.push_back(b.grad_norm);
      }
      // Where the f32 parameters are sharded only rank 0 holds them whole (gathered there).
      const std::optional<FlatTensors> gathered = sharded.whole_parameters();
      if (rank == 0 || !dp.shards_parameters()) {
        const FlatTensors& whole = gathered ? *gathered : mine.params();
        const double parameters = parameter_difference(one.params(), whole);
        const double loss_diff = max_relative_difference(parallel.losses, reference.losses);
        const double norm_diff = max_relative_difference(parallel.norms, reference.norms);
        if (rank == 0)
          std::printf("dp %d, ZeRO %d, %s %s, accumulation %d: losses within %.2e, gradient norms within %.2e, "
                      "parameters within %.2e of the largest\n",
                      ranks, stage, preset, dtype_name(precision).data(), accumulation, loss_diff, norm_diff, parameters);
        // The same sums in another grouping and order (per rank, then over ranks, where one process
        // adds micro-batch after micro-batch): fp32 rounding, ~1e-7 relative per addition, a few
        // additions deep. The losses are double sums of the same f32 per-token losses.
        EXPECT_LT(loss_diff, 1e-6) << preset << " accumulation " << accumulation;
        EXPECT_LT(norm_diff, 1e-5) << preset << " accumulation " << accumulation;
        // Adam moves each parameter by ~lr = 1e-3 per step; gradients that agree to ~1e-6 move
        // them alike far below that (as TrainStep.TwoMicroBatchesOfFourEqualOneBatchOfEight).
        // In bf16 the micro-batches' contributions are products of bf16-rounded activations, and
        // some elements' contributions cancel to a few f32 ulps of their terms: the reordered sum
        // then differs by a larger share of the gradient, and Adam, which divides each gradient
        // by its own magnitude, moves that element by up to ~1e-2 of lr differently (measured
        // 1.3e-5 of the largest parameter, gpt2-tiny on 3 ranks with accumulation; the losses
        // and norms stay within the f32 bounds).
        const double parameter_bound = precision == DType::f32 ? 1e-5 : 1e-4;
        EXPECT_LT(parameters, parameter_bound) << preset << " accumulation " << accumulation << " ZeRO " << stage;
      }

      // Every rank applied the same update to the same weights: rank 0's, bit for bit.
      if (stage == 3) continue;
      const Tensor p2 = mine.weights().all();
      Buffer rank0(p2.bytes(), MemTag::workspace, Device::cpu, false);
      std::memcpy(rank0.data(), p2.data, p2.bytes());
      world->broadcast(rank0.view(p2.dtype, {p2.numel()}), 0).wait();
      EXPECT_EQ(std::memcmp(rank0.data(), p2.data, p2.bytes()), 0) << "rank " << rank << " diverged from rank 0";
    }
}

TEST(DataParallel, OneRankMatchesOneProcess) {
  SingleProcessCommunicator one(Device::cpu, "dp");
  expect_matches_one_process(&one);
}

TEST(Mpi, DataParallelMatchesOneProcess) {
  DT_SKIP_WITHOUT_MPIRUN();
  expect_matches_one_process(mpi_world(Device::cpu).get());
}

// ZeRO on one rank is AdamW: the same elementwise update of every shown element (in bf16 of the
// f32 master weights, which the sharded run keeps as its parts and rounds into the 16-bit
// weights itself), so with clipping off (the norm's summation order differs) the parameters are the same bits, at every
// stage, over two micro-batches. (Stages 2 and 3 add the second micro-batch's reduced gradient to
// the shard, where one process's backward adds it into the first's: for llama-tiny the same
// additions. gpt2-tiny's differ in the last bit, ~1e-8 relative, as the matrix above prints.)
TEST(DataParallel, ZeroOnOneRankIsAdamWBitForBit) {
  const ModelConfig config = model_preset("llama-tiny");
  for (const DType precision : {DType::f32, DType::bf16})
  for (const int stage : {1, 2, 3}) {
    Transformer plain(config, kB, kT, Recompute::none, precision);
    init_parameters(plain.params(), 3);
    AdamW optimizer(plain.layout(), {});
    SingleProcessCommunicator one(Device::cpu, "dp");
    ShardedModel sharded(config, one, stage, 3, /*bucket_mb=*/25, precision);
    for (int step = 0; step < 3; ++step) {
      const GlobalBatch batch(2 * kB, config.vocab_size, step);
      const std::vector<MicroBatch> mbs = {batch.micro_batch(0), batch.micro_batch(1)};
      const StepStats a = train_step(plain, optimizer, mbs, 1e-2f, /*max_grad_norm=*/0);
      const StepStats b = train_step(sharded.model, sharded.dp, mbs, 1e-2f, 0);
      EXPECT_EQ(a.loss, b.loss) << "ZeRO " << stage;
    }
    const std::optional<FlatTensors> gathered = sharded.whole_parameters();
    EXPECT_EQ(parameter_difference(plain.params(), gathered ? *gathered : sharded.model.params()), 0.0) << "ZeRO " << stage;
    EXPECT_EQ(sharded.dp.steps_taken(), 3);
    // On one rank the parts are the whole units, and the layouts are the same (the unit multiple
    // is 16): the moments are the plain optimizer's.
    for (const auto& [which, plain_moment] : {std::pair{DataParallel::Sharded::first_moments, &optimizer.m()},
                                              std::pair{DataParallel::Sharded::second_moments, &optimizer.v()}}) {
      const std::vector<Tensor> parts = sharded.dp.parts(which);
      for (size_t u = 0; u < parts.size(); ++u)
        EXPECT_EQ(std::memcmp(parts[u].data, plain_moment->unit(u).data, parts[u].bytes()), 0)
            << "unit " << u << " ZeRO " << stage;
    }
  }
}

// Under ZeRO 2 and 3 the model holds gradients (and at stage 3 parameters) only for the units
// backward and forward are at: after a step none is held, and a forward alone leaves none.
TEST(DataParallel, ZeroTwoAndThreeHoldNoUnitBetweenSteps) {
  const ModelConfig config = model_preset("gpt2-tiny");
  for (const int stage : {2, 3}) {
    SingleProcessCommunicator one(Device::cpu, "dp");
    ShardedModel sharded(config, one, stage, 5);
    const GlobalBatch batch(kB, config.vocab_size, 0);
    const std::vector<MicroBatch> mbs = {batch.micro_batch(0)};
    train_step(sharded.model, sharded.dp, mbs, 1e-2f, 1.0f);
    const size_t units = sharded.model.layout().units().size();
    for (size_t u = 0; u < units; ++u) {
      EXPECT_FALSE(sharded.model.grads().held(u)) << "gradients of unit " << u << ", ZeRO " << stage;
      EXPECT_EQ(sharded.model.params().held(u), stage < 3) << "parameters of unit " << u << ", ZeRO " << stage;
    }
    sharded.model.forward(mbs[0].tokens, mbs[0].targets);
    for (size_t u = 0; u < units; ++u)
      EXPECT_EQ(sharded.model.params().held(u), stage < 3) << "parameters of unit " << u << " after a forward";
  }
}

// DataParallel::training_bytes, the estimate a GPU run is checked against before it allocates,
// against what a CPU run of the same shape allocates: exactly the model, the optimizer state
// and the shards at every stage, and during a step no more than that and the working set bound.
TEST(DataParallel, TrainingBytesAreWhatEachStageAllocatesAndBoundItsSteps) {
  const ModelConfig config = model_preset("gpt2-tiny");  // gpt2: no rope table beside the estimate
  for (const DType precision : {DType::f32, DType::bf16})
    for (const int stage : {0, 1, 2, 3}) {
      const MemoryStats before = memory_stats(Device::cpu);
      SingleProcessCommunicator one(Device::cpu, "dp");
      ShardedModel sharded(config, one, stage, 5, /*bucket_mb=*/25, precision);
      std::optional<AdamW> optimizer;
      if (stage == 0) optimizer.emplace(sharded.model.layout(), AdamWConfig{});
      const size_t allocated = memory_stats(Device::cpu).total_current_bytes - before.total_current_bytes;
      const size_t estimate = DataParallel::training_bytes(config, kB, kT, Recompute::none, precision, 1, stage);
      const size_t working_set = DataParallel::working_set_bytes(sharded.model.layout(), precision, 1, stage);
      EXPECT_EQ(allocated, estimate - working_set) << dtype_name(precision) << " ZeRO " << stage;

      reset_peak_memory(Device::cpu);
      const GlobalBatch batch(2 * kB, config.vocab_size, 0);
      const std::vector<MicroBatch> mbs = {batch.micro_batch(0), batch.micro_batch(1)};
      if (stage == 0)
        train_step(sharded.model, *optimizer, mbs, 1e-3f, 1.0f);
      else
        train_step(sharded.model, sharded.dp, mbs, 1e-3f, 1.0f);
      // Every tag's peak but the kernels' scratch (workspace, not estimated: tens of KiB here),
      // added: at least the peak of their sum.
      const MemoryStats after = memory_stats(Device::cpu);
      size_t step_peak = 0;
      for (int t = 0; t < kNumMemTags; ++t)
        if (static_cast<MemTag>(t) != MemTag::workspace) step_peak += after.peak_bytes[t] - before.current_bytes[t];
      EXPECT_LE(step_peak, estimate) << dtype_name(precision) << " ZeRO " << stage;
      if (stage >= 2) {
        EXPECT_GT(step_peak, allocated) << "no working set was held: the bound above would not be tested";
      }
    }
}

// A layout without the units' padding is refused, naming the unit multiple ZeRO needs.
TEST(Mpi, ZeroRefusesALayoutWithoutItsUnitMultiple) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  Transformer model(model_preset("gpt2-tiny"), 1, 8);
  try {
    DataParallel zero(model, *world, 25, 1);
    ADD_FAILURE() << "accepted a layout without padded units";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str("needs the model's layout made with unit multiple ", 16 * world->size())),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallel, BucketsCoverTheBufferAtParameterBoundariesFromTheEnd) {
  const ModelConfig config = model_preset("gpt2-tiny");
  Transformer model(config, 1, 8);
  SingleProcessCommunicator one(Device::cpu, "dp");
  const DataParallel dp(model, one, 0.05);
  const auto& buckets = dp.buckets();
  ASSERT_GT(buckets.size(), 2u);
  EXPECT_EQ(buckets.front().end, model.layout().total_elements());
  EXPECT_EQ(buckets.back().begin, 0);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_EQ(buckets[i].end, buckets[i - 1].begin);
  for (const kernels::FlatRange& b : buckets) {
    bool at_parameter = b.begin == 0;
    for (const ParamInfo& p : model.layout().params()) at_parameter = at_parameter || p.offset == b.begin;
    EXPECT_TRUE(at_parameter) << b.begin;
  }
}

}  // namespace
}  // namespace dt
