#include "parallel/zero_hooks.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/stage.h"

namespace dt {
namespace {

// A backend that writes down what it is asked to do.
struct RecordedBackend final : ZeroHooks::Backend {
  std::vector<std::string> calls;
  std::deque<std::optional<size_t>> in_flight;

  void start_gathering(size_t u) override { calls.push_back(str("gather ", u)); }
  void wait_for_gathering(size_t u) override { calls.push_back(str("wait ", u)); }
  void free_weights(size_t u) override { calls.push_back(str("free weights ", u)); }
  void hold_gradients(size_t u) override { calls.push_back(str("hold gradients ", u)); }
  void free_gradients(size_t u) override { calls.push_back(str("free gradients ", u)); }
  void all_reduce_buckets(size_t u) override {
    calls.push_back(str("all-reduce buckets to ", u));
    in_flight.push_back(std::nullopt);
  }
  void reduce_scatter(size_t u, bool staged) override {
    calls.push_back(str("reduce-scatter ", u, staged ? " staged" : ""));
    in_flight.push_back(u);
  }
  size_t reductions_in_flight() const override { return in_flight.size(); }
  std::optional<size_t> finish_oldest_reduction() override {
    const std::optional<size_t> u = in_flight.front();
    in_flight.pop_front();
    calls.push_back(u ? str("finish ", *u) : "finish buckets");
    return u;
  }
};

// A backward over units 3 (the head) to 0 (the embeddings), each unit's gradients needed, then
// final.
std::vector<std::string> backward(int stage, bool first_of_step) {
  RecordedBackend backend;
  ZeroHooks hooks(ZeroPolicy::of(stage, DType::f32, 2), 4, backend);
  hooks.arm(first_of_step);
  for (size_t u = 4; u-- > 0;) {
    hooks.gradients_needed(u);
    hooks.gradients_final(u);
  }
  hooks.finish_reductions();
  return backend.calls;
}

// Stage 0 all-reduces buckets and 1 reduce-scatters units, all waited for after backward; from
// stage 2 each unit's gradients are held until its reduction finishes, at most
// kUnitReductionsInFlight behind, and a later micro-batch's reductions are staged.
TEST(ZeroHooks, GradientsAreHeldUntilTheirReductionFinishes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(backward(0, true), (V{"all-reduce buckets to 3", "all-reduce buckets to 2", "all-reduce buckets to 1",
                                  "all-reduce buckets to 0", "finish buckets", "finish buckets", "finish buckets",
                                  "finish buckets"}));
  EXPECT_EQ(backward(1, false), (V{"reduce-scatter 3", "reduce-scatter 2", "reduce-scatter 1", "reduce-scatter 0",
                                   "finish 3", "finish 2", "finish 1", "finish 0"}));
  static_assert(kUnitReductionsInFlight == 2);
  EXPECT_EQ(backward(2, false),
            (V{"hold gradients 3", "reduce-scatter 3 staged", "hold gradients 2", "reduce-scatter 2 staged",
               "hold gradients 1", "reduce-scatter 1 staged", "finish 3", "free gradients 3", "hold gradients 0",
               "reduce-scatter 0 staged", "finish 2", "free gradients 2", "finish 1", "free gradients 1", "finish 0",
               "free gradients 0"}));
}

// Stage 3 gathers a unit before the pass reads it (unless prefetched), waits for it, and starts
// the next one's; a unit's weights are freed when the pass is done with them.
TEST(ZeroHooks, WeightsAreGatheredBeforeEachPassAndPrefetched) {
  using V = std::vector<std::string>;
  for (const int stage : {2, 3}) {
    RecordedBackend backend;
    ZeroHooks hooks(ZeroPolicy::of(stage, DType::f32, 2), 3, backend);
    hooks.weights_needed(0, 1);
    hooks.weights_done(0);
    hooks.weights_needed(1, 2);
    hooks.weights_done(1);
    hooks.weights_needed(2, std::nullopt);
    hooks.weights_needed(2, 1);  // held already: only the prefetch
    hooks.weights_done(2);
    const V gathered = {"gather 0",       "wait 0", "gather 1", "free weights 0", "wait 1",        "gather 2",
                        "free weights 1", "wait 2", "wait 2",   "gather 1",       "free weights 2"};
    EXPECT_EQ(backend.calls, stage == 3 ? gathered : V{}) << "stage " << stage;
  }
}

// The planner's working set is what the hooks hold at most: at stage 3 over gpt2-tiny's units,
// at least the two largest units of weights (one computing, one prefetched) and, with several
// micro-batches, the staging of a reduction.
TEST(ZeroHooks, WorkingSetCountsWhatTheHooksHold) {
  const ModelConfig config = model_preset("gpt2-tiny");
  const ZeroPolicy zero = ZeroPolicy::of(3, DType::f32, 2);
  const ParameterLayout layout(config, zero.storage().unit_multiple);
  const std::vector<UnitHookCall> calls = Stage::unit_hook_calls(layout, StageUnits::whole(config));
  const auto one = ZeroHooks::working_set(layout, zero, calls, 1);
  const auto two = ZeroHooks::working_set(layout, zero, calls, 2);
  const auto at = [](const std::array<size_t, kNumMemTags>& bytes, MemTag t) { return bytes[static_cast<size_t>(t)]; };
  EXPECT_EQ(at(one, MemTag::communication), 0u);
  EXPECT_GT(at(two, MemTag::communication), 0u);
  EXPECT_EQ(at(one, MemTag::gradients), at(two, MemTag::gradients));
  EXPECT_GT(at(one, MemTag::parameters), 0u);
  const auto none = ZeroHooks::working_set(layout, ZeroPolicy::of(1, DType::f32, 2), calls, 2);
  for (const size_t b : none) EXPECT_EQ(b, 0u);
}

}  // namespace
}  // namespace dt
