// The α–β times of the ring collectives against the numbers worked out by hand for the H100
// profile (450 GB/s and 3 µs within a node, 50 GB/s and 8 µs between nodes), and the placement
// of a group on nodes of 8.
#include "plan/collective_time.h"

#include <gtest/gtest.h>

namespace dt {
namespace {

TEST(CollectiveTime, RingCollectivesAreWhatTheModelGivesByHand) {
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  const double MiB = 1 << 20, n = 256 * MiB;
  // 8 ranks in a node: all-reduce 2 * 7 steps of n/8 bytes at 450 GB/s after 3 µs each.
  const GroupPlacement node = GroupPlacement::of(8, 1, 8);
  EXPECT_FALSE(node.spans_nodes);
  EXPECT_DOUBLE_EQ(collective_seconds(h100, node, CollectiveKind::all_reduce, n), 14 * (3e-6 + n / 8 / 450e9));
  EXPECT_DOUBLE_EQ(collective_seconds(h100, node, CollectiveKind::reduce_scatter, n), 7 * (3e-6 + n / 8 / 450e9));
  EXPECT_DOUBLE_EQ(collective_seconds(h100, node, CollectiveKind::all_gather, n), 7 * (3e-6 + n / 8 / 450e9));
  // 16 data-parallel ranks 8 apart (tp 8 inside each node): the ring crosses nodes.
  const GroupPlacement dp = GroupPlacement::of(16, 8, 8);
  EXPECT_TRUE(dp.spans_nodes);
  EXPECT_DOUBLE_EQ(collective_seconds(h100, dp, CollectiveKind::all_reduce, n), 30 * (8e-6 + n / 16 / 50e9));
  // One rank: nothing to do. A message between nodes: α + n/β.
  EXPECT_EQ(collective_seconds(h100, GroupPlacement::of(1, 1, 8), CollectiveKind::all_reduce, n), 0);
  EXPECT_DOUBLE_EQ(message_seconds(h100, true, n), 8e-6 + n / 50e9);
  // tp 4 within a node of 8; pp 2 with 8 ranks per stage: neighbours in two nodes.
  EXPECT_FALSE(GroupPlacement::of(4, 1, 8).spans_nodes);
  EXPECT_TRUE(GroupPlacement::of(2, 8, 8).spans_nodes);
}

}  // namespace
}  // namespace dt
