// Data parallelism against one process: ctest runs the Mpi.* cases on 2, 3 and 4 ranks. Each
// rank also trains the single-process reference itself (the whole global batch, no
// communication), so the comparison needs no files. Run alone, without mpirun, they skip.
#include "parallel/data_parallel.h"
#include "plan/memory.h"

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
#include "tests/gpt2_sizes.h"
#include "parallel/equivalence.h"
#include "train/global_batch.h"
#include "train/step.h"

namespace dt {
namespace {

constexpr int kB = 2, kT = 16, kSteps = 3;

// kB sequences of kT tokens per micro-batch.
struct TestBatch : dt::GlobalBatch {
  TestBatch(int sequences, int vocab_size, int step) : dt::GlobalBatch(sequences, kT, vocab_size, step) {}
  MicroBatch micro_batch(int index) const { return dt::GlobalBatch::micro_batch(index, kB); }
};

struct StepSeries {
  std::vector<double> losses, norms;
};


// The largest absolute value among the unpadded parameters of `params`.
double largest_parameter(const FlatTensors& params) {
  double largest = 0;
  for (const ParamInfo& p : params.layout().params()) {
    const Tensor x = params.unpadded(p);
    for (int64_t i = 0; i < x.numel(); ++i)
      largest = std::max(largest, static_cast<double>(std::fabs(x.ptr<float>()[i])));
  }
  return largest;
}

// The largest difference between the elements [range.begin, range.end) of a flat buffer laid out
// by `layout`, held in `values` (f32, from range.begin on), and the same parameters' elements in
// `reference`, over the unpadded elements. The layouts may differ (ZeRO pads its units): elements
// are matched by parameter name and index.
double largest_difference(const FlatTensors& reference, const ParameterLayout& layout, kernels::FlatRange range,
                          const float* values) {
  double largest = 0;
  for (const ParamInfo& p : layout.params()) {
    const float* expected = reference.unpadded(p.name).ptr<float>();
    for (int64_t i = std::max(p.offset, range.begin); i < std::min(p.offset + p.numel(), range.end); ++i)
      largest = std::max(largest, static_cast<double>(std::fabs(values[i - range.begin] - expected[i - p.offset])));
  }
  return largest;
}

// The largest difference between whole parameters and the reference's, relative to the
// reference's largest parameter.
double parameter_difference(const FlatTensors& reference, const FlatTensors& whole) {
  const ParameterLayout& layout = whole.layout();
  return largest_difference(reference, layout, {0, layout.total_elements()}, whole.all().ptr<float>()) /
         largest_parameter(reference);
}

// The same for the f32 parameters this rank owns under ZeRO: part r of every unit, each unit
// split into equal parts over the group (docs/parallelism.md), found here from that rule alone, so a part
// updated or stored at another offset differs from the reference.
double owned_parameter_difference(const FlatTensors& reference, const DataParallel& data_parallel) {
  const ParameterLayout& layout = data_parallel.model_layout();
  const std::vector<Tensor> parts = data_parallel.parameter_parts();
  const int64_t ranks = data_parallel.group().size(), rank = data_parallel.group().rank();
  EXPECT_EQ(parts.size(), layout.units().size());
  double largest = 0;
  for (size_t u = 0; u < parts.size(); ++u) {
    const kernels::FlatRange unit = layout.units()[u];
    const int64_t part = unit.size() / ranks;
    EXPECT_EQ(parts[u].numel(), part) << "unit " << u;
    const kernels::FlatRange mine{unit.begin + rank * part, unit.begin + (rank + 1) * part};
    largest = std::max(largest, largest_difference(reference, layout, mine, parts[u].ptr<float>()));
  }
  return largest / largest_parameter(reference);
}

// A model in `precision` laid out and stored for ZeRO `stage` over `ranks`, with the parameters
// of seed `seed`, and its data parallelism over `group`.
struct ShardedModel {
  Transformer model;
  DataParallel data_parallel;
  ShardedModel(const ModelConfig& config, Communicator& group, int stage, uint64_t seed, double bucket_mb = 25,
               DType precision = DType::f32)
      : model(config, kB, kT, Recompute::none, precision, Device::cpu,
              ZeroPolicy::of(stage, precision, group.size()).storage()),
        data_parallel(model, group, bucket_mb, ZeroPolicy::of(stage, precision, group.size())) {
    if (!data_parallel.policy().shards_f32_parameters()) {
      init_parameters(model.params(), seed);
      data_parallel.take_parameters(model.params());
      return;
    }
    FlatTensors whole(model.layout(), MemTag::workspace);
    init_parameters(whole, seed);
    data_parallel.take_parameters(whole);
  }
  // The f32 parameters whole, on rank 0 of the group where they are sharded (gathered there;
  // nullopt elsewhere), else nullopt: they are model.params().
  std::optional<FlatTensors> whole_parameters() {
    if (!data_parallel.policy().shards_f32_parameters()) return std::nullopt;
    std::optional<FlatTensors> whole;
    if (data_parallel.group().rank() == 0) whole.emplace(model.layout(), MemTag::workspace);
    data_parallel.gather_parameters(whole ? &*whole : nullptr);
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

// The bounds of the matrix below, each 7-11x the largest difference measured over it on 1 to 4
// ranks (docs/parallelism.md), which is rounding: the parallel run adds the same gradients grouped by rank
// and by micro-batch, where one process adds them in order. Which elements come out furthest
// apart depends on the kernels' summation order, so another CPU draws other maxima. This
// machine (AMD EPYC, AVX-512) was run with OpenBLAS's Cooperlake (its own), Haswell (AVX2) and
// Sandybridge (AVX) kernels, and as an AVX2 machine: a build for x86-64-v3 with Haswell kernels
// and oneDNN held to AVX2 (so bf16 products are widened to f32 for sgemm). The f32 maxima moved
// by up to 2.8x between them (losses 5.7e-9 to 1.4e-8, norms 2.3e-8 to 3.4e-8, parameters 2.5e-6
// to 7.1e-6); the bf16 ones stayed put. A wrong reduction lies far above every bound: one rank's
// gradients left out of the sum moves the norms by 13-16% and the parameters by 4e-3 to 6e-3.
struct Bounds {
  double losses, norms, parameters;  // relative, the parameters to the largest
};
Bounds bounds(DType precision) {
  // f32, the largest over those kernels: 1.4e-8 (losses), 3.4e-8 (norms), 7.1e-6 (parameters).
  // Adam's first update is lr·sign(g) for every gradient well above eps, the same bits in both
  // runs, so the parameters part only in the later steps' updates; there elements whose gradient
  // nearly cancels (its reordered sum differs by a large share of it) move by up to ~1e-2 of lr
  // differently, and the losses follow.
  if (precision == DType::f32) return {.losses = 1e-7, .norms = 3e-7, .parameters = 5e-5};
  // bf16, two steps: both forwards read the same 16-bit weights (the first update's bits, as
  // above) over micro-batches of the same shapes, so the per-token losses are the same bits and
  // the losses differ only by the order of their double sums (~1e-16 per addition: measured 0).
  // The gradients are products of bf16-rounded activations, some elements' contributions cancel
  // to a few f32 ulps of their terms, and Adam moves those by up to ~1e-2 of lr differently:
  // measured 9.5e-10 (norms) and 1.3e-5 (parameters, gpt2-tiny on 3 ranks with accumulation,
  // with every kernel set above).
  return {.losses = 1e-12, .norms = 1e-8, .parameters = 1e-4};
}

// dp = the group's size × ZeRO stage 0 to 3 × accumulation 1 and 2 × f32 and bf16, both
// families: losses, gradient norms and (f32 master) parameters over steps(precision) steps
// against one process training the same global batches in the same precision. Every rank checks
// what it holds: the losses and norms (each rank's are the global batch's), the parameters whole
// where they are whole, else its own part of every unit; the weights forward reads are bit for
// bit the same on every rank that holds them whole. On 2 and 4 ranks units of both models are
// padded (gpt2-tiny's blocks, llama-tiny's head; on 4 also gpt2-tiny's head and llama-tiny's
// blocks); on 3 none is, and the parts are of odd sizes.
//
// Each cell — a family, a precision and a ZeRO stage, on a world of some size — is its own ctest
// case (CMakeLists.txt: Matrix/DataParallelCell... on one rank, MpiCell.npN... under mpirun), so that
// a failure names its cell; accumulation 1 and 2 run inside it.
struct Cell {
  const char* preset;
  DType precision;
  int stage;
};

void expect_matches_one_process(Communicator* world, const Cell& cell) {
  const int rank = world->rank(), ranks = world->size();
  const DType precision = cell.precision;
  const int stage = cell.stage;
  const char* preset = cell.preset;
  for (const int accumulation : {1, 2}) {
    const ModelConfig config = model_preset(preset);
    const int micro_batches = ranks * accumulation;  // of kB sequences in a global batch
    Transformer one(config, kB, kT, Recompute::none, precision);
    AdamW one_opt(one.layout(), OptimizerParts::whole(one), {});
    init_parameters(one.params(), 7);
    one_opt.round_weights();
    // Several buckets for a tiny model.
    ShardedModel sharded(config, *world, stage, 7, /*bucket_mb=*/0.05, precision);
    Transformer& mine = sharded.model;
    DataParallel& data_parallel = sharded.data_parallel;
    StepSeries reference, parallel;
    for (int step = 0; step < steps(precision); ++step) {
      const TestBatch batch(micro_batches * kB, config.vocab_size, step);
      std::vector<MicroBatch> all, own;
      for (int m = 0; m < micro_batches; ++m) all.push_back(batch.micro_batch(m));
      for (int m = 0; m < accumulation; ++m) own.push_back(batch.micro_batch(m * ranks + rank));
      const StepStats a = train_step(one, one_opt, all, 1e-3f, 1.0f);
      const StepStats b = train_step(mine, data_parallel, own, 1e-3f, 1.0f, nullptr, step + 1);
      EXPECT_EQ(a.targets, b.targets);
      reference.losses.push_back(a.loss), reference.norms.push_back(a.grad_norm);
      parallel.losses.push_back(b.loss), parallel.norms.push_back(b.grad_norm);
    }
    const std::string what = str(preset, " ", dtype_name(precision), " ZeRO ", stage, " accumulation ",
                                 accumulation, " rank ", rank);
    const double loss_diff = max_relative_difference(parallel.losses, reference.losses);
    const double norm_diff = max_relative_difference(parallel.norms, reference.norms);
    const double parameters = data_parallel.policy().shards_f32_parameters() ? owned_parameter_difference(one.params(), data_parallel)
                                                     : parameter_difference(one.params(), mine.params());
    const Bounds bound = bounds(precision);
    EXPECT_LT(loss_diff, bound.losses) << what;
    EXPECT_LT(norm_diff, bound.norms) << what;
    EXPECT_LT(parameters, bound.parameters) << what;
    // Where the parameters are sharded rank 0 also gathers them whole (for a sample or a
    // checkpoint): every rank's part in its place, so the whole differs from one process's by
    // exactly the largest of the parts' differences.
    const double largest_over_ranks = all_reduce_value(*world, parameters, ReduceOp::max);
    if (const std::optional<FlatTensors> gathered = sharded.whole_parameters()) {
      EXPECT_EQ(parameter_difference(one.params(), *gathered), largest_over_ranks) << what;
    }
    if (rank == 0)
      std::printf("dp %d, ZeRO %d, %s %s, accumulation %d: losses within %.2e, gradient norms within %.2e, "
                  "parameters within %.2e of the largest\n",
                  ranks, stage, preset, dtype_name(precision).data(), accumulation, loss_diff, norm_diff,
                  largest_over_ranks);

    // Every rank applied the same update to the same weights: rank 0's, bit for bit. (At ZeRO 3
    // no rank holds them whole; each rank's parts were checked above.)
    if (stage == 3) continue;
    const Tensor p2 = mine.weights().all();
    Buffer rank0(p2.bytes(), MemTag::workspace, Device::cpu, false);
    std::memcpy(rank0.data(), p2.data, p2.bytes());
    world->broadcast(rank0.view(p2.dtype, {p2.numel()}), 0).wait();
    EXPECT_EQ(std::memcmp(rank0.data(), p2.data, p2.bytes()), 0) << "rank " << rank << " diverged from rank 0";
  }
}

class DataParallelCell : public ::testing::TestWithParam<std::tuple<const char*, DType, int>> {
 protected:
  Cell cell() const { return {std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam())}; }
};
// The same cells, run under mpirun by CMakeLists.txt's MpiCell cases.
class MpiCell : public DataParallelCell {};

TEST_P(DataParallelCell, OneRankMatchesOneProcess) {
  SingleProcessCommunicator one(Device::cpu, "dp");
  expect_matches_one_process(&one, cell());
}

TEST_P(MpiCell, MatchesOneProcess) {
  DT_SKIP_WITHOUT_MPIRUN();
  expect_matches_one_process(mpi_world(Device::cpu).get(), cell());
}

// Named family_precision_zeroS: gpt2_f32_zero0 ... llama_bf16_zero3.
const auto kCells = ::testing::Combine(::testing::Values("gpt2-tiny", "llama-tiny"),
                                       ::testing::Values(DType::f32, DType::bf16), ::testing::Values(0, 1, 2, 3));
const auto kCellName = [](const auto& info) {
  const std::string preset = std::get<0>(info.param);
  return str(preset.substr(0, preset.find('-')), "_", dtype_name(std::get<1>(info.param)), "_zero",
             std::get<2>(info.param));
};
INSTANTIATE_TEST_SUITE_P(Matrix, DataParallelCell, kCells, kCellName);
INSTANTIATE_TEST_SUITE_P(Matrix, MpiCell, kCells, kCellName);

// ZeRO on one rank is AdamW: the same elementwise update of every unpadded element (in bf16 of the
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
    AdamW optimizer(plain.layout(), OptimizerParts::whole(plain), {});
    init_parameters(plain.params(), 3);
    optimizer.round_weights();
    SingleProcessCommunicator one(Device::cpu, "dp");
    ShardedModel sharded(config, one, stage, 3, /*bucket_mb=*/25, precision);
    for (int step = 0; step < 3; ++step) {
      const TestBatch batch(2 * kB, config.vocab_size, step);
      const std::vector<MicroBatch> mbs = {batch.micro_batch(0), batch.micro_batch(1)};
      const StepStats a = train_step(plain, optimizer, mbs, 1e-2f, /*max_grad_norm=*/0);
      const StepStats b = train_step(sharded.model, sharded.data_parallel, mbs, 1e-2f, 0);
      EXPECT_EQ(a.loss, b.loss) << "ZeRO " << stage;
    }
    const std::optional<FlatTensors> gathered = sharded.whole_parameters();
    EXPECT_EQ(parameter_difference(plain.params(), gathered ? *gathered : sharded.model.params()), 0.0) << "ZeRO " << stage;
    EXPECT_EQ(sharded.data_parallel.optimizer().steps_taken(), 3);
    // On one rank the parts are the whole units, and the layouts are the same (the unit multiple
    // is 16): the moments are the plain optimizer's, whose one part is the whole layout.
    for (const AdamW::Moment which : {AdamW::Moment::first, AdamW::Moment::second}) {
      const std::vector<Tensor> parts = sharded.data_parallel.optimizer().moment_parts(which);
      const Tensor whole = optimizer.moment_parts(which).at(0);
      ASSERT_EQ(parts.size(), plain.layout().units().size());
      for (size_t u = 0; u < parts.size(); ++u) {
        const kernels::FlatRange unit = plain.layout().units()[u];
        EXPECT_EQ(std::memcmp(parts[u].data, whole.slice_rows(unit.begin, unit.size()).data, parts[u].bytes()), 0)
            << "unit " << u << " ZeRO " << stage;
      }
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
    const TestBatch batch(kB, config.vocab_size, 0);
    const std::vector<MicroBatch> mbs = {batch.micro_batch(0)};
    train_step(sharded.model, sharded.data_parallel, mbs, 1e-2f, 1.0f);
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

// gpt2-tiny's shape (model/config.cpp), whose sizes tests/gpt2_sizes.h works out by hand.
constexpr testing::Gpt2Shape kGpt2Tiny{.layers = 2, .width = 48, .heads = 3, .stored_vocab = 1024, .positions = 64};

// The model states one rank holds between steps, in bytes per tag: docs/parallelism.md's formulas, with Ψ
// the elements stored (every unit padded to a multiple of 16 × ranks under ZeRO) and Ψ/N this
// rank's part of them.
struct ModelStates {
  size_t parameters, gradients, optimizer_state;
};
ModelStates model_states(DType precision, int ranks, int stage) {
  const auto psi = static_cast<size_t>(testing::gpt2_stored_elements(kGpt2Tiny, stage == 0 ? 16 : 16 * ranks));
  const size_t part = psi / static_cast<size_t>(ranks);
  EXPECT_EQ(part * static_cast<size_t>(ranks), psi);
  return {// The weights forward reads: f32, or the 16-bit copy; whole below stage 3.
          .parameters = dtype_size(precision) * (stage < 3 ? psi : part),
          // f32: whole below stage 2, and at stage 1 also the reduced shard beside them.
          .gradients = stage == 0 ? 4 * psi : stage == 1 ? 4 * psi + 4 * part : 4 * part,
          // AdamW's two f32 moments, and in 16-bit the f32 master weights: whole at stage 0.
          .optimizer_state = (precision == DType::f32 ? 8 : 12) * (stage == 0 ? psi : part)};
}

// What each ZeRO stage holds on every rank of `group`, gpt2-tiny in f32 and bf16 (gpt2: no rope
// table in the workspace). Between steps the model states are exactly their formulas.
// plan_memory (plan/memory.h), the prediction a GPU run is checked against before it allocates,
// is those formulas, the activations the model allocates (plan/memory_test.cpp checks them by
// hand) and, from stage 2, the units held during a step; during a step, every tag
// but the kernels' scratch (workspace, not estimated: tens of KiB here), added, stays within it.
void expect_every_stage_holds_its_formula(Communicator& group) {
  const ModelConfig config = model_preset("gpt2-tiny");
  const int ranks = group.size();
  for (const DType precision : {DType::f32, DType::bf16})
    for (const int stage : {0, 1, 2, 3}) {
      const std::string what = str(dtype_name(precision), " ZeRO ", stage, " rank ", group.rank(), " of ", ranks);
      const MemoryStats before = memory_stats(Device::cpu);
      ShardedModel sharded(config, group, stage, 5, /*bucket_mb=*/25, precision);
      const MemoryStats made = memory_stats(Device::cpu);
      const auto since_before = [&](const MemoryStats& now, MemTag tag) {
        return now.current(tag) - before.current(tag);
      };
      const size_t activations = since_before(made, MemTag::activations) + since_before(made, MemTag::workspace);
      const ModelStates formula = model_states(precision, ranks, stage);
      const size_t states = formula.parameters + formula.gradients + formula.optimizer_state;
      const MemoryPlan plan = plan_memory(config, kB, kT, 2, Recompute::none, precision, ranks, stage);
      const size_t estimate = plan.total(), working_set = plan.total() - plan.allocated();
      EXPECT_EQ(plan.allocated(), states + activations) << what;
      for (const MemTag tag : {MemTag::parameters, MemTag::gradients, MemTag::optimizer_state})
        EXPECT_EQ(plan.bytes[static_cast<int>(tag)], since_before(made, tag)) << what << " " << mem_tag_name(tag);
      if (stage < 2) {
        EXPECT_EQ(working_set, 0u) << what;
      }

      // Two micro-batches: stages 2 and 3 stage the second's reduced parts before adding them.
      reset_peak_memory(Device::cpu);
      const TestBatch batch(2 * ranks * kB, config.vocab_size, 0);
      const std::vector<MicroBatch> mbs = {batch.micro_batch(group.rank()), batch.micro_batch(ranks + group.rank())};
      train_step(sharded.model, sharded.data_parallel, mbs, 1e-3f, 1.0f);
      const MemoryStats after = memory_stats(Device::cpu);
      EXPECT_EQ(since_before(after, MemTag::parameters), formula.parameters) << what;
      EXPECT_EQ(since_before(after, MemTag::gradients), formula.gradients) << what;
      EXPECT_EQ(since_before(after, MemTag::optimizer_state), formula.optimizer_state) << what;

      // Left out of the step's peak besides the workspace: at stage 0 the communication tag,
      // which holds the MPI backend's host buffers for all-reduce results (kept for later steps;
      // a GPU's NCCL reduces in place). The sharded stages' collectives write in place, and their
      // communication tag is ZeRO's own staging.
      size_t step_peak = 0;
      for (int t = 0; t < kNumMemTags; ++t) {
        const auto tag = static_cast<MemTag>(t);
        if (tag != MemTag::workspace && (stage > 0 || tag != MemTag::communication))
          step_peak += after.peak(tag) - before.current(tag);
      }
      EXPECT_LE(step_peak, estimate) << what;
      if (stage >= 2) {
        EXPECT_GT(step_peak, states + activations) << "no working set was held: the bound above would not be tested";
      }
    }
}

TEST(DataParallel, EveryStageHoldsItsFormula) {
  SingleProcessCommunicator one(Device::cpu, "dp");
  expect_every_stage_holds_its_formula(one);
}

TEST(Mpi, EveryStageHoldsItsFormula) {
  DT_SKIP_WITHOUT_MPIRUN();
  expect_every_stage_holds_its_formula(*mpi_world(Device::cpu));
}

// A layout without the units' padding is refused, naming the unit multiple ZeRO needs.
TEST(Mpi, ZeroRefusesALayoutWithoutItsUnitMultiple) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  Transformer model(model_preset("gpt2-tiny"), 1, 8);
  try {
    DataParallel zero(model, *world, 25, ZeroPolicy::of(1, DType::f32, world->size()));
    ADD_FAILURE() << "accepted a layout without padded units";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str("needs the model's layout made with unit multiple ", 16 * world->size())),
              std::string::npos)
        << e.what();
  }
}

// Each bucket is whole parameters of one kind: experts, reduced over the ranks holding them, or
// the rest.
TEST(DataParallel, BucketsCoverTheBufferAtParameterBoundariesFromTheEndAndHoldOneKind) {
  const ModelConfig config = model_preset("moe-tiny");
  Transformer model(config, 1, 8);
  SingleProcessCommunicator one(Device::cpu, "dp");
  const DataParallel data_parallel(model, one, 0.05, ZeroPolicy::of(0, DType::f32, 1));
  const auto& buckets = data_parallel.buckets();
  ASSERT_GT(buckets.size(), 2u);
  EXPECT_EQ(buckets.front().range.end, model.layout().total_elements());
  EXPECT_EQ(buckets.back().range.begin, 0);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_EQ(buckets[i].range.end, buckets[i - 1].range.begin);
  int expert_buckets = 0;
  for (const DataParallel::Bucket& b : buckets) {
    bool at_parameter = b.range.begin == 0;
    for (const ParamInfo& p : model.layout().params()) {
      at_parameter = at_parameter || p.offset == b.range.begin;
      if (p.offset >= b.range.begin && p.offset < b.range.end) {
        EXPECT_EQ(p.is_expert, b.experts) << p.name;
      }
    }
    EXPECT_TRUE(at_parameter) << b.range.begin;
    expert_buckets += b.experts ? 1 : 0;
  }
  EXPECT_GE(expert_buckets, config.n_layer);
}

}  // namespace
}  // namespace dt
