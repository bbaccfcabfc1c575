// Every schedule for every p <= 8, m <= 32 and v <= 4 passes the checker (complete, dependencies
// respected, sends matched with receives, no deadlock, memory as promised), and its bubble is
// what theory says; all without a model.
#include "parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline/schedule_check.h"

namespace dt::pipeline {
namespace {

TEST(Schedule, EveryScheduleRunsForEveryShape) {
  int checked = 0;
  for (const std::string& name : schedule_names())
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (int v = 1; v <= (name == "interleaved" ? 4 : 1); ++v) {
          if (name == "interleaved" && m % p != 0) continue;
          const ScheduleCheck check = check_schedule(make_schedule(name, p, m, v));
          ASSERT_TRUE(check.ok()) << check.problem;
          ++checked;
        }
  std::printf("%d schedules checked\n", checked);
  EXPECT_GT(checked, 900);
}

// Each stage's micro-batches held at once (what its activation store grows to): with one stage a
// rank, the rank's peak; with several, each at least one and together at least the rank's peak
// (the stages need not peak at once).
TEST(Schedule, EachStageHoldsWhatItsRankHolds) {
  for (const std::string& name : schedule_names())
    for (int p = 1; p <= 4; ++p)
      for (const int m : {1, 4, 8}) {
        const int v = name == "interleaved" ? 2 : 1;
        if (name == "interleaved" && m % p != 0) continue;
        const Schedule s = make_schedule(name, p, m, v);
        const ScheduleCheck check = check_schedule(s);
        ASSERT_TRUE(check.ok()) << check.problem;
        std::vector<int> summed(static_cast<size_t>(p), 0), stages(static_cast<size_t>(p), 0);
        for (int st = 0; st < s.stages(); ++st) {
          const int held = stage_in_flight(s, st), r = s.stage_rank[static_cast<size_t>(st)];
          EXPECT_GE(held, 1) << name << " stage " << st;
          EXPECT_LE(held, m) << name << " stage " << st;
          summed[static_cast<size_t>(r)] += held;
          ++stages[static_cast<size_t>(r)];
        }
        for (int r = 0; r < p; ++r) {
          const std::string what = str(name, " p ", p, " m ", m, " rank ", r);
          if (stages[static_cast<size_t>(r)] == 1) {
            EXPECT_EQ(summed[static_cast<size_t>(r)], check.peak_in_flight[static_cast<size_t>(r)]) << what;
          } else {
            EXPECT_GE(summed[static_cast<size_t>(r)], check.peak_in_flight[static_cast<size_t>(r)]) << what;
          }
        }
      }
}

// Unit times (forward 1, input and weight passes 1 each): the idle time of the busiest-idle rank
// over its busy time.
double bubble(const std::string& name, int p, int m, int v = 1) {
  const ScheduleCheck check = check_schedule(make_schedule(name, p, m, v));
  EXPECT_TRUE(check.ok()) << check.problem;
  return check.bubble();
}

// With unit passes the bubbles are ratios of small integers (idle units over busy units); the
// simulation adds units in doubles, exact to 2^53, so the only difference from theory is the
// rounding of one division each side: 1e-12 bounds it with room, and a schedule one unit off
// (1 / (3m) at most 1/24 here) lies far outside.
TEST(Schedule, BubblesAreWhatTheorySays) {
  for (const int p : {2, 4, 8})
    for (const int m : {8, 16, 32}) {
      SCOPED_TRACE(str("p ", p, ", m ", m));
      const double one_f_one_b = static_cast<double>(p - 1) / m;
      EXPECT_DOUBLE_EQ(bubble("afab", p, m), one_f_one_b);
      EXPECT_DOUBLE_EQ(bubble("1f1b", p, m), one_f_one_b);
      for (const int v : {2, 4}) EXPECT_DOUBLE_EQ(bubble("interleaved", p, m, v), one_f_one_b / v) << "v " << v;
      // ZB-H1: the weight passes fill all but a third of 1F1B's bubble.
      EXPECT_NEAR(bubble("zb-h1", p, m), one_f_one_b / 3, 1e-12);
      // ZB-V, two stages per rank in a V: only the first forward's p − 1 units of waiting are
      // left, over twice the stages' work: a sixth of 1F1B's.
      EXPECT_NEAR(bubble("zb-v", p, m), one_f_one_b / 6, 1e-12);
      std::printf("p %d, m %2d: 1f1b %.4f, interleaved v2 %.4f v4 %.4f, zb-h1 %.4f (%.2f of 1f1b), zb-v %.4f (%.2f)\n", p,
                  m, one_f_one_b, bubble("interleaved", p, m, 2), bubble("interleaved", p, m, 4), bubble("zb-h1", p, m),
                  bubble("zb-h1", p, m) / one_f_one_b, bubble("zb-v", p, m), bubble("zb-v", p, m) / one_f_one_b);
    }
}

// Replayed with measured pass times: times scaled alike leave the bubble as it is; a slower last
// rank (the head's vocabulary) widens everyone's wait; ZB-H1 without weight passes to fill its
// bubble is 1F1B's.
TEST(Schedule, ReplayedWithPassTimes) {
  const Schedule one_f_one_b = make_schedule("1f1b", 4, 8);
  const double units = check_schedule(one_f_one_b).bubble();
  const std::vector<PassTimes> doubled(4, PassTimes{2, 4, 2, 2});
  EXPECT_NEAR(check_schedule(one_f_one_b, doubled).bubble(), units, 1e-12);
  std::vector<PassTimes> slow_head(4);
  slow_head[3] = {1.5, 3, 1.5, 1.5};
  EXPECT_GT(check_schedule(one_f_one_b, slow_head).bubble(), units);
  const Schedule zb = make_schedule("zb-h1", 4, 8);
  EXPECT_LT(check_schedule(zb).bubble(), units / 2);
  EXPECT_NEAR(check_schedule(zb, std::vector<PassTimes>(4, PassTimes{1, 2, 2, 0})).bubble(), units, 1e-12);
}

TEST(Schedule, PeakMemoryIsThePromise) {
  for (const int p : {2, 4}) {
    const ScheduleCheck afab = check_schedule(make_schedule("afab", p, 16));
    const ScheduleCheck one = check_schedule(make_schedule("1f1b", p, 16));
    const ScheduleCheck zb = check_schedule(make_schedule("zb-h1", p, 16));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(afab.peak_in_flight[r], 16);
      EXPECT_EQ(one.peak_in_flight[r], p - r);
      EXPECT_EQ(zb.peak_in_flight[r], 2 * p - 1 - r);
    }
  }
}

// The checker finds what is wrong: a lost receive, a swapped order, a missing backward.
TEST(Schedule, TheCheckerNamesWhatIsWrong) {
  const Schedule s = make_schedule("1f1b", 2, 4);
  Schedule lost = s;
  lost.actions[1].erase(lost.actions[1].begin());  // its first recv_forward
  EXPECT_NE(check_schedule(lost).problem.find("not one send and one receive"), std::string::npos)
      << check_schedule(lost).problem;
  Schedule swapped = s;
  // Rank 1 (the last stage) runs F0 B0 F1 B1 ...: move B0 before F0.
  auto& order = swapped.actions[1];
  const auto f0 = std::find(order.begin(), order.end(), Action{Op::forward, 1, 0});
  const auto b0 = std::find(order.begin(), order.end(), Action{Op::backward, 1, 0});
  std::iter_swap(f0, b0);
  EXPECT_NE(check_schedule(swapped).problem.find("comes before what it needs"), std::string::npos)
      << check_schedule(swapped).problem;
  // Rank 0 waiting for micro-batch 1's gradient before sending micro-batch 1's activation: a deadlock.
  Schedule stuck = make_schedule("afab", 2, 2);
  auto& first = stuck.actions[0];
  const auto send1 = std::find(first.begin(), first.end(), Action{Op::send_forward, 0, 1});
  const auto recv1 = std::find(first.begin(), first.end(), Action{Op::recv_backward, 0, 0});
  std::rotate(send1, send1 + 1, recv1 + 1);  // the send after micro-batch 0's receive
  EXPECT_NE(check_schedule(stuck).problem.find("deadlock"), std::string::npos) << check_schedule(stuck).problem;
  // Rank 1 receiving micro-batch 1's activation before micro-batch 0's, which rank 0 sent first.
  Schedule crossed = make_schedule("afab", 2, 2);
  auto& second = crossed.actions[1];
  std::iter_swap(std::find(second.begin(), second.end(), Action{Op::recv_forward, 1, 0}),
                 std::find(second.begin(), second.end(), Action{Op::recv_forward, 1, 1}));
  EXPECT_NE(check_schedule(crossed).problem.find("in another order than rank 1 receives"), std::string::npos)
      << check_schedule(crossed).problem;
}

// Under NCCL a send waits for its receive and a rank's transfers run in its list's order. In
// afab, 1f1b and zb-h1 a send and the receive right after it go out together, and that is enough
// at every shape; 1f1b's steady state, where stage s sends an activation while stage s + 1 sends a
// gradient back, is what needs it. Interleaved and zb-v wait for ever under NCCL even so, and do not
// pair: a paired send waits for its receive on MPI too. A lone send still waits: here rank 0 sends
// micro-batch 1's activation between two forwards and rank 1 the gradient of 0 before a weight
// pass, each before receiving the other's, which MPI's sends survive and NCCL's do not.
TEST(Schedule, AdjacentSendsAndReceivesGoOutTogetherWhereThatLetsNcclRunTheLists) {
  for (const std::string name : {"afab", "1f1b", "zb-h1"})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        const Schedule s = make_schedule(name, p, m);
        ASSERT_TRUE(s.exchanges) << name;
        const ScheduleCheck check = check_schedule(s);
        ASSERT_TRUE(check.nccl_deadlock.empty()) << check.nccl_deadlock;
      }
  // 1F1B over two ranks: each rank's send of the steady state goes out with its receive.
  Schedule one_f_one_b = make_schedule("1f1b", 2, 4);
  const auto expect_pair = [&](int rank, Action send, Action receive) {
    const std::vector<Action>& list = one_f_one_b.actions[static_cast<size_t>(rank)];
    const size_t i = static_cast<size_t>(std::find(list.begin(), list.end(), send) - list.begin());
    EXPECT_TRUE(exchanged_with_next(one_f_one_b, rank, i)) << "rank " << rank;
    EXPECT_EQ(list.at(i + 1), receive) << "rank " << rank;
  };
  expect_pair(0, {Op::send_forward, 0, 1}, {Op::recv_backward, 0, 0});
  expect_pair(1, {Op::send_backward, 1, 0}, {Op::recv_forward, 1, 1});
  one_f_one_b.exchanges = false;
  EXPECT_EQ(check_schedule(one_f_one_b).nccl_deadlock,
            "1f1b (p 2, m 4, v 1): send_forward(stage 0, micro-batch 1) on rank 0 waits for ever under NCCL");
  for (const Schedule& s : {make_schedule("interleaved", 2, 4, 2), make_schedule("zb-v", 2, 4)}) {
    const ScheduleCheck check = check_schedule(s);
    EXPECT_TRUE(check.ok()) << check.problem;
    EXPECT_FALSE(s.exchanges) << s.name;
    EXPECT_NE(check.nccl_deadlock, "") << s.name;
  }

  Schedule lone{.name = "lone sends", .ranks = 2, .micro_batches = 3, .virtual_stages = 1, .stage_rank = {0, 1},
                .actions = {}, .promised_in_flight = {3, 1}, .exchanges = true};
  std::vector<std::vector<Action>> compute(2);
  for (int k = 0; k < 3; ++k) compute[0].push_back({Op::forward, 0, k});
  for (int k = 0; k < 3; ++k)
    for (const Op op : {Op::backward_input, Op::backward_weight}) compute[0].push_back({op, 0, k});
  for (int k = 0; k < 3; ++k)
    for (const Op op : {Op::forward, Op::backward_input, Op::backward_weight}) compute[1].push_back({op, 1, k});
  lone.actions = with_communication(compute, lone.stage_rank);
  EXPECT_EQ(check_schedule(lone).problem, "lone sends (p 2, m 3, v 1): with adjacent sends and receives paired, "
                                          "send_forward(stage 0, micro-batch 1) on rank 0 waits for ever");
}

TEST(Schedule, BadShapesAndNamesSayWhatWorks) {
  try {
    make_schedule("interleaved", 4, 6, 2);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("use 4 or 8 micro-batches"), std::string::npos) << e.what();
  }
  try {
    make_schedule("1fb1", 4, 8);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(did you mean '1f1b'?); the schedules are afab, 1f1b, interleaved, zb-h1, zb-v"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dt::pipeline
