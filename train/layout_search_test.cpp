// The layout search (train/layout_search.h): what it returns fits, is valid, is ordered and is
// each layout once; a small model on one node is best served by data parallelism alone; a model
// too large for the GPUs gets the smallest count its leanest layouts fit on.
#include "train/layout_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

const std::string kConfig = str(DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml");

TEST(LayoutSearch, WhatFitsIsValidOrderedAndEachLayoutOnce) {
  const RunConfig config = load_run_config(kConfig);
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  const LayoutSearch s = search_layouts(config, 8, h100, 8);
  EXPECT_GT(s.considered, s.valid);
  ASSERT_FALSE(s.fitting.empty());
  for (size_t i = 0; i < s.fitting.size(); ++i) {
    const LayoutCandidate& c = s.fitting[i];
    EXPECT_EQ(c.config.dims().world_size(), 8);
    EXPECT_TRUE(run_config_valid(c.config));
    EXPECT_LE(static_cast<double>(c.memory.total()), h100.memory_bytes);
    EXPECT_EQ(c.memory.total(), run_memory_plan(c.config).total());
    EXPECT_EQ(c.config.global_batch_size(), 512);
    // Slower only within the 0.5% that simplicity breaks ties in.
    if (i > 0) {
      EXPECT_GE(c.time.total, s.fitting[i - 1].time.total * (1 - 0.005 - 1e-12)) << i;
    }
    for (size_t j = 0; j < i; ++j) {
      const RunConfig::Parallel &p = c.config.parallel, &q = s.fitting[j].config.parallel;
      EXPECT_FALSE(p.dp == q.dp && p.tp == q.tp && p.pp == q.pp && p.cp == q.cp && p.pp_schedule == q.pp_schedule &&
                   p.pp_virtual == q.pp_virtual && p.zero_stage == q.zero_stage && p.sp == q.sp &&
                   c.config.train.recompute == s.fitting[j].config.train.recompute)
          << i << " repeats " << j;
    }
  }
  // 124M parameters on eight GPUs of a node: data parallelism alone, nothing recomputed.
  const RunConfig& best = s.fitting.front().config;
  EXPECT_EQ(best.dims().dp, 8);
  EXPECT_EQ(best.train.recompute, Recompute::none);
}

// The planner times every layout the configuration checks accept: among gpt2-124m's on 8 GPUs,
// its 12 heads over 8 tensor-parallel ranks (2, 2, 2, 2, 1, 1, 1, 1), which the engine runs.
TEST(LayoutSearch, ThePlannerTimesEveryLayoutTheChecksAccept) {
  const RunConfig config = load_run_config(kConfig);
  const LayoutSearch s = search_layouts(config, 8, load_hardware_profile("h200"), 8);
  const auto uneven = std::find_if(s.fitting.begin(), s.fitting.end(),
                                   [](const LayoutCandidate& c) { return c.config.parallel.tp == 8; });
  ASSERT_NE(uneven, s.fitting.end());
  EXPECT_TRUE(std::isfinite(uneven->time.total));
  EXPECT_GT(uneven->time.tensor_parallel, 0);
}

// A model with experts is searched over ep too: every ep of dp × cp up to its experts, each
// layout once with its ep. Four of Mixtral 8x7B's blocks on 8 GPUs: of two layouts at ZeRO 0 that
// differ only in ep, the wider holds fewer experts' weights, and no fewer rows for them (dropless,
// ep × rows × min(top_k, its experts): model/config.h), which is why the search must weigh it.
TEST(LayoutSearch, AnExpertModelIsSearchedOverEp) {
  RunConfig config = load_run_config(kConfig);
  config.model = model_preset("mixtral-8x7b");
  config.model.n_layer = 4;
  const LayoutSearch s = search_layouts(config, 8, load_hardware_profile("h100-sxm"), 8);
  std::set<int> eps;
  int pairs = 0;
  const auto bytes = [](const LayoutCandidate& c, MemTag tag) { return c.memory.bytes[static_cast<size_t>(tag)]; };
  for (const LayoutCandidate& c : s.fitting) {
    const RunConfig::Parallel& p = c.config.parallel;
    EXPECT_EQ(p.dp * p.cp % p.ep, 0);
    eps.insert(p.ep);
    for (const LayoutCandidate& other : s.fitting) {
      const RunConfig::Parallel& q = other.config.parallel;
      if (p.zero_stage != 0 || q.ep >= p.ep || q.dp != p.dp || q.tp != p.tp || q.pp != p.pp || q.cp != p.cp ||
          q.pp_schedule != p.pp_schedule || q.zero_stage != p.zero_stage || q.sp != p.sp ||
          other.config.train.recompute != c.config.train.recompute ||
          other.config.train.micro_batch_size != c.config.train.micro_batch_size)
        continue;
      ++pairs;
      EXPECT_LT(bytes(c, MemTag::parameters), bytes(other, MemTag::parameters)) << "ep " << p.ep << " against " << q.ep;
      EXPECT_GE(bytes(c, MemTag::activations), bytes(other, MemTag::activations)) << "ep " << p.ep << " against " << q.ep;
    }
  }
  EXPECT_GT(pairs, 0);
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));
}

// Llama 3 70B's weights, gradients and AdamW state (18 bytes a parameter: 1.27 TB) cannot fit on
// 8 GPUs of 80 GiB even sharded; the leanest layouts fit on the count named, and not on half of it.
TEST(LayoutSearch, AModelTooLargeForTheGpusGetsTheSmallestCountThatFits) {
  const RunConfig config = load_run_config(kConfig, {"model.preset=\"llama3-70b\"", "train.micro_batch_size=1",
                                                     "data.seq_len=2048"});
  const HardwareProfile h100 = load_hardware_profile("h100-sxm");
  EXPECT_TRUE(search_layouts(config, 8, h100, 8).fitting.empty());
  const int enough = smallest_fitting_gpus(config, 8, h100, 8);
  EXPECT_GT(enough, 8);
  EXPECT_FALSE(search_layouts(config, enough, h100, 8).fitting.empty());
  EXPECT_TRUE(search_layouts(config, enough / 2, h100, 8).fitting.empty());
}

}  // namespace
}  // namespace dt
