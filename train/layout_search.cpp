#include "train/layout_search.h"

#include <algorithm>
#include <tuple>
#include <string>

#include "parallel/zero_policy.h"

namespace dt {
namespace {

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(static_cast<int>(k));
  return d;
}

// The (dp, tp, pp, cp, ep) splits of `gpus` worth trying: tp within a node (its collectives are
// on every block's critical path), pp at most the blocks, cp a power of two up to 8; dp what is
// left; for a model with experts every ep of dp × cp up to their number. Whether the model runs
// on each is the configuration checks' to say.
std::vector<ParallelDims> splits(const ModelConfig& m, int gpus, int gpus_per_node) {
  std::vector<ParallelDims> out;
  for (const int tp : divisors(gpus)) {
    if (tp > gpus_per_node) continue;
    for (const int cp : {1, 2, 4, 8}) {
      if ((gpus / tp) % cp != 0) continue;
      for (const int pp : divisors(gpus / tp / cp)) {
        if (pp > m.n_layer) continue;
        const int dp = gpus / tp / cp / pp;
        for (const int ep : divisors(dp * cp))
          if (ep == 1 || ep <= m.moe.experts) out.push_back({.dp = dp, .cp = cp, .tp = tp, .pp = pp, .ep = ep});
      }
    }
  }
  return out;
}

RunConfig with(RunConfig c, const ParallelDims& d, const std::string& schedule, int micro, int zero, Recompute r,
               bool sp) {
  c.parallel.dp = d.dp, c.parallel.tp = d.tp, c.parallel.pp = d.pp, c.parallel.cp = d.cp, c.parallel.ep = d.ep;
  c.parallel.pp_schedule = schedule;
  c.parallel.pp_virtual = schedule == "interleaved" ? 2 : 1;
  c.parallel.zero_stage = zero;
  c.parallel.sp = sp;
  c.train.micro_batch_size = micro;
  c.train.recompute = r;
  return c;
}

bool fits(const MemoryPlan& plan, const HardwareProfile& profile) {
  return static_cast<double>(plan.total()) <= profile.memory_bytes;
}

}  // namespace

LayoutSearch search_layouts(const RunConfig& base, int gpus, const HardwareProfile& profile, int gpus_per_node) {
  LayoutSearch s;
  for (const ParallelDims& d : splits(base.model, gpus, gpus_per_node)) {
    if (base.global_batch_size() % d.dp != 0) continue;
    const std::vector<std::string> schedules =
        d.pp > 1 ? std::vector<std::string>{"1f1b", "interleaved", "zb-h1"} : std::vector<std::string>{"1f1b"};
    const int top_stage = ZeroPolicy::stages_differ(d.dp * d.cp) ? ZeroPolicy::kHighestStage : 0;
    for (const int micro : divisors(base.global_batch_size() / d.dp))
      for (const std::string& schedule : schedules)
        for (int zero = 0; zero <= top_stage; ++zero)
          for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
            for (const bool sp : {false, true}) {
              if (sp && d.tp == 1) continue;
              ++s.considered;
              const RunConfig c = with(base, d, schedule, micro, zero, r, sp);
              if (!run_config_valid(c)) continue;
              ++s.valid;
              const MemoryPlan memory = run_memory_plan(c);
              if (!fits(memory, profile)) continue;
              s.fitting.push_back({c, memory, predict_step_time(c.model, run_step_layout(c, gpus_per_node), profile)});
            }
  }
  // Simpler first among equals: what the model cannot tell apart, a person should not pay for.
  const auto simpler = [](const LayoutCandidate& a, const LayoutCandidate& b) {
    const auto key = [](const LayoutCandidate& c) {
      return std::tuple(c.config.parallel.zero_stage, c.config.train.recompute, c.config.parallel.sp,
                        c.config.parallel.ep, -c.config.train.micro_batch_size);
    };
    return key(a) < key(b);
  };
  std::stable_sort(s.fitting.begin(), s.fitting.end(),
                   [](const LayoutCandidate& a, const LayoutCandidate& b) { return a.time.total < b.time.total; });
  // Runs of layouts within 0.5% of the run's fastest, simpler first within each.
  for (auto first = s.fitting.begin(); first != s.fitting.end();) {
    const double limit = first->time.total * 1.005;
    const auto end = std::find_if(first, s.fitting.end(), [&](const LayoutCandidate& c) { return c.time.total > limit; });
    std::stable_sort(first, end, simpler);
    first = end;
  }
  // One entry per layout: its micro-batch sizes are one choice, the first kept.
  std::vector<LayoutCandidate> distinct;
  const auto same_layout = [](const RunConfig& a, const RunConfig& b) {
    const RunConfig::Parallel &p = a.parallel, &q = b.parallel;
    return p.dp == q.dp && p.tp == q.tp && p.pp == q.pp && p.cp == q.cp && p.ep == q.ep && p.pp_schedule == q.pp_schedule &&
           p.pp_virtual == q.pp_virtual && p.zero_stage == q.zero_stage && p.sp == q.sp &&
           a.train.recompute == b.train.recompute;
  };
  for (LayoutCandidate& c : s.fitting)
    if (std::none_of(distinct.begin(), distinct.end(),
                     [&](const LayoutCandidate& d) { return same_layout(d.config, c.config); }))
      distinct.push_back(std::move(c));
  s.fitting = std::move(distinct);
  return s;
}

int smallest_fitting_gpus(const RunConfig& base, int gpus, const HardwareProfile& profile, int gpus_per_node) {
  for (int k = 1; k <= 10; ++k) {
    const int n = gpus << k;
    for (const ParallelDims& d : splits(base.model, n, gpus_per_node)) {
      if (base.global_batch_size() % d.dp != 0) continue;
      const RunConfig lean =
          with(base, d, "1f1b", 1, ZeroPolicy::most_sharding_stage(d.pp > 1), Recompute::full, d.tp > 1);
      if (run_config_valid(lean) && fits(run_memory_plan(lean), profile)) return n;
    }
  }
  return 0;
}

}  // namespace dt
