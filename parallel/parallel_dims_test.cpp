#include "parallel/parallel_dims.h"

#include <gtest/gtest.h>

#include <set>

#include "comm/mpi.h"
#include "tests/mpi_testing.h"
#include "comm/single_process.h"

namespace dt {
namespace {

// tp fastest, then cp, dp, pp; every rank has its own coordinates and back.
TEST(ParallelDims, RanksAreOrderedTpCpDpPp) {
  const ParallelDims d{.dp = 3, .cp = 2, .tp = 2, .pp = 2};
  EXPECT_EQ(d.world_size(), 24);
  EXPECT_EQ(d.coords_of(1), (ParallelDims::Coords{.dp = 0, .cp = 0, .tp = 1, .pp = 0}));
  EXPECT_EQ(d.coords_of(2), (ParallelDims::Coords{.dp = 0, .cp = 1, .tp = 0, .pp = 0}));
  EXPECT_EQ(d.coords_of(4), (ParallelDims::Coords{.dp = 1, .cp = 0, .tp = 0, .pp = 0}));
  EXPECT_EQ(d.coords_of(12), (ParallelDims::Coords{.dp = 0, .cp = 0, .tp = 0, .pp = 1}));
  std::set<int> seen;
  for (int r = 0; r < d.world_size(); ++r) {
    EXPECT_EQ(d.rank_of(d.coords_of(r)), r);
    seen.insert(r);
  }
  EXPECT_EQ(seen.size(), 24u);
}

// A rank names itself with its coordinates once more than one dimension is above 1.
TEST(ParallelDims, ARankIsNamedWithItsCoordinatesWhereTheyTellMore) {
  EXPECT_EQ((ParallelDims{.dp = 4}).rank_description(3), "rank 3");
  EXPECT_EQ((ParallelDims{.dp = 3, .cp = 2, .tp = 2, .pp = 2}).rank_description(13),
            "rank 13 (dp 0, cp 0, tp 1, pp 1)");
  EXPECT_EQ((ParallelDims{.dp = 2, .tp = 2}).rank_description(2), "rank 2 (dp 1, tp 0)");
}

// Expert parallelism cuts each (tp, pp) position's dp × cp ranks, dp-major, into groups of ep.
TEST(ParallelDims, ExpertParallelGroupsAreConsecutiveReplicas) {
  const ParallelDims d{.dp = 2, .cp = 2, .tp = 2, .pp = 1, .ep = 2};
  EXPECT_EQ(d.world_size(), 8);  // ep is not a factor
  // Ranks 0, 2 (cp 0, 1 of dp 0) form one group; 4, 6 (dp 1) another.
  EXPECT_EQ(d.replica_index(d.coords_of(2)), 1);
  EXPECT_EQ(d.ep_rank(d.coords_of(2)), 1);
  EXPECT_EQ(d.replica_index(d.coords_of(4)), 2);
  EXPECT_EQ(d.ep_rank(d.coords_of(4)), 0);
  EXPECT_EQ(d.rank_description(6), "rank 6 (dp 1, cp 1, tp 0, ep 1)");
  EXPECT_EQ((ParallelDims{.dp = 4, .ep = 2}).describe(), "dp 4 × cp 1 × tp 1 × pp 1 = 4 ranks, ep 2 over dp × cp");
}

TEST(ParallelDims, AnExpertParallelSizeThatDoesNotDivideTheReplicasIsRefused) {
  try {
    (ParallelDims{.dp = 3, .ep = 2}).check_world_size(3);
    ADD_FAILURE() << "accepted ep 2 over 3 replicas";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ep = 2 of the dp × cp = 3 ranks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("set parallel.ep to a divisor of 3"), std::string::npos) << e.what();
  }
}

TEST(ParallelDims, AWrongWorldSizeSaysHowToLaunch) {
  const ParallelDims d{.dp = 2, .tp = 2};
  try {
    d.check_world_size(6);
    ADD_FAILURE() << "accepted 6 ranks for 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this job has 6 ranks but the parallel layout is dp 2 × cp 1 × tp 2 × pp 1 "
                                         "= 4 ranks; launch with mpirun -np 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(ParallelDims, OneProcessHasGroupsOfOne) {
  const ProcessGroups g = make_process_groups(std::make_unique<SingleProcessCommunicator>(Device::cpu), {});
  EXPECT_EQ(g.dp->size(), 1);
  EXPECT_EQ(g.dp->name(), "dp");
  EXPECT_EQ(g.ep->size(), 1);
  EXPECT_EQ(g.ep->name(), "ep");
  EXPECT_EQ(g.world->name(), "world");
}

// On any number of ranks, as tp 2 × dp (the rest) where the count is even and dp alone where it
// is odd: each group holds the ranks that differ only in its coordinate (tp fastest), checked by
// summing world ranks over the group.
TEST(Mpi, ProcessGroupsHoldTheRanksOfTheirDimension) {
  DT_SKIP_WITHOUT_MPIRUN();
  std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int rank = world->rank(), ranks = world->size();
  const int tp = ranks % 2 == 0 ? 2 : 1, dp = ranks / tp;
  const ProcessGroups g = make_process_groups(std::move(world), {.dp = dp, .tp = tp});
  float sum = static_cast<float>(rank);
  g.tp->all_reduce({.data = &sum, .dtype = DType::f32, .shape = {1}}, ReduceOp::sum).wait();
  const int tp_first = rank / tp * tp;  // the tp group: tp consecutive ranks
  EXPECT_EQ(sum, static_cast<float>(tp_first * tp + tp * (tp - 1) / 2));
  sum = static_cast<float>(rank);
  g.dp->all_reduce({.data = &sum, .dtype = DType::f32, .shape = {1}}, ReduceOp::sum).wait();
  float dp_sum = 0;  // the dp group: the ranks with this rank's tp coordinate
  for (int q = rank % tp; q < ranks; q += tp) dp_sum += static_cast<float>(q);
  EXPECT_EQ(sum, dp_sum);
  EXPECT_EQ(g.dp->size(), dp);
  EXPECT_EQ(g.tp->size(), tp);
  EXPECT_EQ(g.dp->rank(), g.coords.dp);
  EXPECT_EQ(g.tp->rank(), g.coords.tp);
  EXPECT_EQ(g.coords.dp, rank / tp);
  EXPECT_EQ(g.coords.tp, rank % tp);
  EXPECT_EQ(g.pp->size(), 1);
  EXPECT_EQ(g.ep->size(), 1);  // ep 1: each rank its own group
}

// Under mpirun, as dp (all) × ep 2 where the rank count is even and ep (all) where it is odd:
// each ep group is ep consecutive ranks, checked by summing world ranks over it.
TEST(Mpi, ExpertParallelGroupsHoldConsecutiveReplicas) {
  DT_SKIP_WITHOUT_MPIRUN();
  std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int rank = world->rank(), ranks = world->size(), ep = ranks % 2 == 0 ? 2 : ranks;
  const ProcessGroups g = make_process_groups(std::move(world), {.dp = ranks, .ep = ep});
  float sum = static_cast<float>(rank);
  g.ep->all_reduce({.data = &sum, .dtype = DType::f32, .shape = {1}}, ReduceOp::sum).wait();
  const int first = rank / ep * ep;
  EXPECT_EQ(sum, static_cast<float>(ep * first + ep * (ep - 1) / 2));
  EXPECT_EQ(g.ep->size(), ep);
  EXPECT_EQ(g.ep->rank(), rank % ep);
}

}  // namespace
}  // namespace dt
