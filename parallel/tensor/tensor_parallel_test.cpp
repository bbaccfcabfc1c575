// Tensor parallelism against one rank: ctest runs each cell under mpirun as MpiTpCell.npN.<cell>
// (CMakeLists.txt), the world split into dp × tp. Each rank also trains the one-rank reference
// itself on the whole global batch, so the comparison needs no files. Run without mpirun, the
// cells skip.
#include "parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "comm/mpi.h"
#include "parallel/data_parallel.h"
#include "parallel/parallel_dims.h"
#include "tests/mpi_testing.h"
#include "tests/training_batches.h"
#include "train/step.h"

namespace dt {
namespace {

constexpr int kB = 2, kT = 16;

// gpt2-tiny with 6 heads of 8 (so that 4 ranks split them 2, 2, 1, 1), and llama-tiny: 6 query
// heads over 2 key/value heads (split over 2 ranks, copied over 3 and 4), an untied output layer.
// Both have the vocabulary of 997 (250, 249, 249, 249 rows over 4 ranks) and an MLP of 192 and
// 128 columns.
ModelConfig test_model(const std::string& family) {
  if (family == "llama") return model_preset("llama-tiny");
  ModelConfig c = model_preset("gpt2-tiny");
  c.n_head = 6;
  return c;
}

struct TpCell {
  std::string family;
  DType precision;
  int dp, zero;
  bool sp = false;
  Recompute recompute = Recompute::none;
};

// The largest difference between this rank's parameters (its shard's layout; `values` the
// unpadded elements of `p`) and the reference's at the same places of the whole tensors,
// relative to the reference's largest parameter.
double shard_difference(const FlatTensors& reference, const FlatTensors& shard) {
  double largest = 0, reference_largest = 0;
  for (const ParamInfo& p : reference.layout().params()) {
    const Tensor x = reference.unpadded(p);
    for (int64_t i = 0; i < x.numel(); ++i)
      reference_largest = std::max(reference_largest, static_cast<double>(std::fabs(x.ptr<float>()[i])));
  }
  for (const ParamInfo& p : shard.layout().params()) {
    const float* mine = shard.unpadded(p).ptr<float>();
    const float* expected = reference.unpadded(p.name).ptr<float>();
    for (const ParamInfo::Run& run : p.runs())
      for (int64_t i = 0; i < run.count; ++i)
        largest = std::max(largest, static_cast<double>(std::fabs(mine[run.local + i] - expected[run.global + i])));
  }
  return largest / reference_largest;
}

// Bounds, relative (the parameters to the largest, a norm's weight of about 1), over 3 steps at
// lr 1e-3.
//
// f32: the tensor-parallel run sums each row-parallel product in two parts, and the loss's
// exponentials per slice, where one rank sums them in one; that is rounding, and Adam turns it
// into parameter differences where a gradient nearly cancels. The largest measured over the
// matrix of 120 cells (README.md): losses 2.2e-8, norms 1.5e-7, parameters 3.3e-5; the bounds
// are 6-9x those. A wrong reduction lies far above them: without the copied key/value heads' sum
// (llama-tiny over 3 and 4 ranks) the losses move by 5e-5 to 1.7e-4, the norms by 3-4%, the
// parameters by 5.8e-3.
//
// bf16: each rank rounds its partial product to bf16 before the f32 sum (one rank rounds the
// whole product once), so activations differ by a bf16 ulp (2^-8 relative) here and there and
// every later number follows: measured losses 8.3e-5, norms 1.4e-3 (bounds 12x and 7x). The
// parameters: Adam moves an element by about lr per step whatever its gradient's size, so an
// element whose tiny gradient changes sign moves by about 2 lr per step differently: 3 steps ×
// 2e-3 = 6e-3, and 5.0e-3 is measured (tp 6); the bound, 1e-2, leaves room for Adam's steps a
// little above lr. The bf16 cells check that the 16-bit path works; the f32 cells are the ones
// tight enough to tell a wrong reduction (which moves the norms past the bf16 bound too: 3-4%).
struct Bounds {
  double losses, norms, parameters;
};
Bounds bounds(DType precision) {
  if (precision == DType::f32) return {.losses = 2e-7, .norms = 1e-6, .parameters = 2e-4};
  return {.losses = 1e-3, .norms = 1e-2, .parameters = 1e-2};
}

void expect_matches_one_rank(const TpCell& cell) {
  std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int tp = world->size() / cell.dp;
  ProcessGroups groups = make_process_groups(std::move(world), {.dp = cell.dp, .tp = tp});
  const ModelConfig config = test_model(cell.family);
  const int rank = groups.world->rank(), dp_rank = groups.coords.dp;
  const int steps = 3;
  for (const int accumulation : {1, 2}) {
    const int micro_batches = cell.dp * accumulation;
    Transformer one(config, kB, kT, cell.recompute, cell.precision);
    AdamW one_optimizer(one.layout(), OptimizerParts::whole(one), {});
    init_parameters(one.params(), 7);
    one_optimizer.round_weights();

    TensorParallel tensor_parallel(*groups.tp, config, cell.sp);
    Transformer mine(config, kB, kT, cell.recompute, cell.precision, Device::cpu,
                     DataParallel::storage(cell.dp, cell.zero), &tensor_parallel);
    DataParallel data_parallel(mine, *groups.dp, /*bucket_mb=*/0.05, cell.zero);
    FlatTensors whole(mine.layout(), MemTag::workspace);  // this rank's shard, whole
    init_parameters(whole, 7);
    data_parallel.take_parameters(whole);

    std::vector<double> one_losses, one_norms, losses, norms;
    for (int step = 0; step < steps; ++step) {
      const testing::GlobalBatch batch(micro_batches * kB, kT, config.vocab_size, step);
      std::vector<MicroBatch> all, own;
      for (int m = 0; m < micro_batches; ++m) all.push_back(batch.micro_batch(m, kB));
      for (int m = 0; m < accumulation; ++m) own.push_back(batch.micro_batch(m * cell.dp + dp_rank, kB));
      const StepStats a = train_step(one, one_optimizer, all, 1e-3f, 1.0f);
      const StepStats b = train_step(mine, data_parallel, own, 1e-3f, 1.0f, nullptr, step + 1);
      EXPECT_EQ(a.targets, b.targets);
      one_losses.push_back(a.loss), one_norms.push_back(a.grad_norm);
      losses.push_back(b.loss), norms.push_back(b.grad_norm);
    }
    // This rank's shard of the f32 parameters, gathered over dp where ZeRO shards them.
    std::optional<FlatTensors> gathered;
    const FlatTensors* parameters = &mine.params();
    if (data_parallel.shards_parameters()) {
      if (groups.dp->rank() == 0) gathered.emplace(mine.layout(), MemTag::workspace);
      data_parallel.gather_parameters(gathered ? &*gathered : nullptr);
      parameters = gathered ? &*gathered : nullptr;
    }
    const double loss_diff = testing::max_relative_difference(losses, one_losses);
    const double norm_diff = testing::max_relative_difference(norms, one_norms);
    const double parameter_diff = parameters != nullptr ? shard_difference(one.params(), *parameters) : 0;
    const std::string what = str(cell.family, " ", dtype_name(cell.precision), " tp ", tp, cell.sp ? " sp" : "",
                                 " dp ", cell.dp, " ZeRO ", cell.zero, " recompute ", recompute_name(cell.recompute),
                                 " accumulation ", accumulation, " rank ", rank);
    const Bounds bound = bounds(cell.precision);
    EXPECT_LT(loss_diff, bound.losses) << what;
    EXPECT_LT(norm_diff, bound.norms) << what;
    EXPECT_LT(parameter_diff, bound.parameters) << what;
    const double worst = all_reduce_value(*groups.world, parameter_diff, ReduceOp::max);
    if (rank == 0)
      std::printf("tp %d%s × dp %d, ZeRO %d, %s %s, recompute %s, accumulation %d: losses within %.2e, gradient "
                  "norms within %.2e, parameters within %.2e of the largest\n",
                  tp, cell.sp ? " sp" : "", cell.dp, cell.zero, cell.family.c_str(), dtype_name(cell.precision).data(),
                  recompute_name(cell.recompute).data(), accumulation, loss_diff, norm_diff, worst);
    // What every tp rank holds whole (a norm's weight, here the last) is the same bits on each.
    if (parameters != nullptr) {
      const Tensor ln_f = parameters->unpadded("ln_f.weight");
      Buffer lead(ln_f.bytes(), MemTag::workspace);
      std::memcpy(lead.data(), ln_f.data, ln_f.bytes());
      groups.tp->broadcast(lead.view(DType::f32, {ln_f.numel()}), 0).wait();
      EXPECT_EQ(std::memcmp(lead.data(), ln_f.data, ln_f.bytes()), 0) << what << ": ln_f differs from tp rank 0's";
    }
  }
}

class MpiTpCell : public ::testing::TestWithParam<TpCell> {};

TEST_P(MpiTpCell, MatchesOneRank) {
  DT_SKIP_WITHOUT_MPIRUN();
  expect_matches_one_rank(GetParam());
}

// Named family_precision_dpD_zeroS, then _sp with sequence parallelism, then the recomputation
// policy where there is one; CMakeLists.txt runs those whose dp divides the world with at least 2
// tensor-parallel ranks.
std::vector<TpCell> cells() {
  std::vector<TpCell> out;
  for (const char* family : {"gpt2", "llama"}) {
    for (const DType precision : {DType::f32, DType::bf16})
      for (const auto& [dp, zero] : {std::pair{1, 0}, std::pair{2, 0}, std::pair{2, 1}, std::pair{2, 3}})
        for (const bool sp : {false, true}) out.push_back({family, precision, dp, zero, sp});
    for (const bool sp : {false, true}) out.push_back({family, DType::f32, 2, 2, sp});
    for (const Recompute recompute : {Recompute::selective, Recompute::full})
      out.push_back({family, DType::f32, 1, 0, true, recompute});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiTpCell, ::testing::ValuesIn(cells()), [](const auto& info) {
  const TpCell& c = info.param;
  return str(c.family, "_", dtype_name(c.precision), "_dp", c.dp, "_zero", c.zero, c.sp ? "_sp" : "",
             c.recompute == Recompute::none ? "" : str("_", recompute_name(c.recompute)));
});

}  // namespace
}  // namespace dt
