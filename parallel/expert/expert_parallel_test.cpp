// Expert parallelism against one rank: ctest runs each cell under mpirun as MpiEpCell.npN.<cell>
// (CMakeLists.txt), the experts of moe-tiny (4 of them, top 2, with a gated shared expert, a
// capacity of 1.25 its share, both routers' losses and the balancing bias: tests/layout_cell.cpp)
// spread over ep of the dp ranks: ep 2 over dp 2 at every ZeRO stage; ep 3, which splits the 4
// experts 2, 1, 1; ep 4, one expert a rank; ep 2 over dp 4, where two ranks hold each expert
// (their gradients summed, and ZeRO 1 and 3 sharding them, over those two); in bf16 and with full
// recomputation; over cp 2, dp 2 × cp 2 (ep 4), and dp 2 × pp 2 under 1F1B and ZB-H1; and under
// tensor and sequence parallelism, alone and with ep and pp; and OLMoE's block over ep, alone and
// with pp. Run without mpirun, the cells skip. Beside the matrix, on 2, 3 and 4 ranks: a
// whole model gathered from every rank's experts, and the route's counts.
#include "parallel/expert/expert_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/mpi.h"
#include "parallel/parallel_run.h"
#include "tests/layout_cell.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

using testing::LayoutCell;

class MpiEpCell : public ::testing::TestWithParam<LayoutCell> {};

TEST_P(MpiEpCell, MatchesOneRank) {
  DT_SKIP_WITHOUT_MPIRUN();
  testing::expect_layout_matches_one_rank(GetParam());
}

std::vector<LayoutCell> cells() {
  std::vector<LayoutCell> out;
  for (const int zero : {0, 1, 2, 3}) out.push_back({.family = "moe", .dp = 2, .zero = zero, .ep = 2});
  out.push_back({.family = "moe", .dp = 3, .ep = 3});
  out.push_back({.family = "moe", .dp = 4, .ep = 4});
  out.push_back({.family = "moe", .dp = 4, .zero = 1, .ep = 2});
  out.push_back({.family = "moe", .dp = 4, .zero = 3, .ep = 2});
  out.push_back({.family = "moe", .precision = DType::bf16, .dp = 2, .ep = 2});
  out.push_back({.family = "moe", .dp = 2, .recompute = Recompute::full, .ep = 2});
  // Over the cp ranks, which hold other tokens of the same sequences (dropless: a capacity is
  // refused with cp); over dp 2 × cp 2 at ZeRO 1.
  out.push_back({.family = "moe", .cp = 2, .ep = 2});
  out.push_back({.family = "moe", .dp = 2, .zero = 1, .cp = 2, .ep = 4});
  // Under pipeline parallelism, each stage's blocks over the ep ranks of that stage; zero-bubble's
  // deferred weight passes send the output gradients to the experts again.
  out.push_back({.family = "moe", .dp = 2, .pp = 2, .schedule = "1f1b", .ep = 2});
  out.push_back({.family = "moe", .dp = 2, .zero = 1, .pp = 2, .schedule = "zb-h1", .ep = 2});
  // Under tensor parallelism (the tp size is what the world leaves), where every rank of the group
  // routes all the rows, with its rows gathered first under sequence parallelism: tp 2 and 3 alone,
  // with sp in f32, bf16 and under full recomputation; dp 2 × tp 2 with ep 2, at ZeRO 1 with sp and
  // at ZeRO 3 without (recomputing attention's core); tp 2 × pp 2 with sp under ZB-H1, whose deferred weight passes gather again.
  out.push_back({.family = "moe"});
  out.push_back({.family = "moe", .sp = true});
  out.push_back({.family = "moe", .precision = DType::bf16, .sp = true});
  out.push_back({.family = "moe", .sp = true, .recompute = Recompute::full});
  out.push_back({.family = "moe", .dp = 2, .zero = 1, .sp = true, .ep = 2});
  out.push_back({.family = "moe", .dp = 2, .zero = 3, .recompute = Recompute::selective, .ep = 2});
  out.push_back({.family = "moe", .sp = true, .pp = 2, .schedule = "zb-h1"});
  // OLMoE's block (its query and key norms on every rank's rows) over ep 2 of dp 2 at ZeRO 1, and
  // over dp 2 × pp 2 under ZB-H1, whose deferred weight passes read the norms' kept gradients.
  out.push_back({.family = "olmoe", .dp = 2, .zero = 1, .ep = 2});
  out.push_back({.family = "olmoe", .dp = 2, .pp = 2, .schedule = "zb-h1", .ep = 2});
  // FP8 training, the experts' grouped products included: each recipe over ep 2 of dp 2, where an
  // expert's rows from two micro-batches meet in one product, each quantized as one rank does;
  // tensorwise and delayed over cp 2 (alone, and as ep 2), where a micro-batch's amax for an
  // expert is agreed on over its cp ranks, and over dp 2 × cp 2 as ep 4; under tp 2 with sp,
  // where the shared expert is split.
  for (const Float8Scaling fp8 : {Float8Scaling::tensorwise, Float8Scaling::delayed, Float8Scaling::blockwise})
    out.push_back({.family = "moe", .dp = 2, .ep = 2, .fp8 = fp8});
  for (const Float8Scaling fp8 : {Float8Scaling::tensorwise, Float8Scaling::delayed}) {
    out.push_back({.family = "moe", .cp = 2, .fp8 = fp8});
    out.push_back({.family = "moe", .cp = 2, .ep = 2, .fp8 = fp8});
  }
  out.push_back({.family = "moe", .dp = 2, .zero = 1, .cp = 2, .ep = 4, .fp8 = Float8Scaling::tensorwise});
  out.push_back({.family = "moe", .sp = true, .fp8 = Float8Scaling::tensorwise});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, MpiEpCell, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return testing::cell_name(info.param); });

// Each rank holds its experts (4 over 3 ranks: 2, 1, 1), and a sample's whole model, gathered on
// the lead, is every rank's experts beside the rest, bit for bit, whether ZeRO shards them or not;
// on 4 ranks also under tp 2 × ep 2, where each tp rank gathers its shard's experts over its ep
// group before the tp group gathers the shards (a rank's slices placed in a shard, not the whole).
TEST(Mpi, ExpertParallelRanksHoldTheirExpertsAndTheWholeModelGathersThem) {
  const std::unique_ptr<Communicator> control = mpi_world(Device::cpu, "control");
  const int ranks = control->size();
  const ModelConfig config = model_preset("moe-tiny");
  const ParameterLayout whole_layout(config);
  FlatTensors whole(whole_layout, MemTag::workspace);
  init_parameters(whole, 11);
  std::vector<ParallelDims> layouts = {{.dp = ranks, .ep = ranks}};
  if (ranks == 4) layouts.push_back({.dp = 2, .tp = 2, .ep = 2});
  for (const ParallelDims& dims : layouts)
    for (const int stage : {0, 1, 3}) {
      const int dp = dims.dp;
      ParallelRun run({.model = config, .micro_batch_size = 1, .seq_len = 8, .dims = dims,
                       .zero = ZeroPolicy::of(stage, DType::f32, dp), .backend = "mpi"},
                      *control);
      const ParameterLayout& layout = run.model().layout();
      const kernels::FlatRange experts = even_part(config.moe.experts, dims.ep, run.groups().ep->rank());
      EXPECT_EQ(layout.find("h.0.mlp.experts.fc.weight").shape[0], experts.size());
      EXPECT_EQ(layout.dims().local_experts.begin, experts.begin);
      FlatTensors mine(layout, MemTag::workspace);
      copy_slices(whole, mine);
      run.data_parallel().take_parameters(mine);
      const ParallelRun::WholeParameters gathered = run.gather_whole_parameters();
      ASSERT_EQ(gathered.whole() != nullptr, run.lead());
      if (!run.lead()) continue;
      for (const ParamInfo& p : whole.layout().params()) {
        const Tensor got = gathered.whole()->unpadded(p.name), want = whole.unpadded(p);
        EXPECT_EQ(std::memcmp(got.data, want.data, want.bytes()), 0)
            << p.name << " under " << dims.describe() << " at ZeRO " << stage;
      }
    }
}

// A route: what each rank sends each other and receives for its experts, from every rank's rows
// per expert (rank r puts r + e + 1 rows on expert e).
TEST(Mpi, AnExpertRouteSendsEachRankItsExpertsRowsAndLaysThemOutExpertByExpert) {
  const std::unique_ptr<Communicator> group = mpi_world(Device::cpu, "ep");
  const int R = group->size(), r = group->rank();
  const int64_t E = 4;
  const ExpertParallel experts(*group, E);
  kernels::MoeDispatch rows{.offsets = {0}, .dropped = std::vector<int64_t>(E)};
  for (int64_t e = 0; e < E; ++e) rows.offsets.push_back(rows.offsets.back() + r + e + 1);
  const ExpertRoute route = experts.route(rows);
  const kernels::FlatRange mine = even_part(E, R, r);
  ASSERT_EQ(route.sent.size(), static_cast<size_t>(R));
  for (int q = 0; q < R; ++q) {
    const kernels::FlatRange theirs = even_part(E, R, q);
    int64_t sent = 0;
    for (int64_t e = theirs.begin; e < theirs.end; ++e) sent += r + e + 1;
    EXPECT_EQ(route.sent[static_cast<size_t>(q)], sent) << "to " << q;
    for (int64_t x = 0; x < mine.size(); ++x)
      EXPECT_EQ(route.received[static_cast<size_t>(q * mine.size() + x)], q + mine.begin + x + 1) << q << " " << x;
  }
  int64_t at = 0;
  for (int64_t x = 0; x < mine.size(); ++x) {
    EXPECT_EQ(route.offsets[static_cast<size_t>(x)], at);
    for (int q = 0; q < R; ++q) at += q + mine.begin + x + 1;
  }
  EXPECT_EQ(route.rows(), at);
}

}  // namespace
}  // namespace dt
