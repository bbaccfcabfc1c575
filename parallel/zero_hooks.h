// ZeRO's unit hooks (model/unit_hooks.h), written once: as a stage's passes reach each unit,
// what this rank holds, frees, stages and gathers, and when its reductions start and finish, as
// the policy (parallel/zero_policy.h) says. A Backend carries it out: DataParallel's allocates
// the buffers and launches the collectives (parallel/data_parallel.h); the planner's counts the
// bytes alone (ZeroHooks::working_set), so the memory plan is the run's own holds and frees.
//
//   weights_needed    where the weights are gathered before each pass: the unit's gather is
//                     started (unless it was prefetched) and waited for, then the next unit's
//                     started, so that it arrives while this one computes;
//   weights_done      there, the unit's gathered weights are freed;
//   gradients_needed  where the gradients are sharded: the unit's are allocated, zeroed;
//   gradients_final   once armed: the reduction the unit's gradients complete starts (the
//                     buckets they complete, or the unit's reduce-scatter, into staging when it
//                     adds to the shard); with sharded gradients, once more than
//                     kUnitReductionsInFlight are in flight the oldest is finished and its
//                     unit's gradients freed.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "model/parameters.h"
#include "model/unit_hooks.h"
#include "parallel/zero_policy.h"

namespace dt {

// Reductions of units kept in flight at once where the gradients are sharded, before the oldest
// is waited for and its gradients freed: enough to overlap with backward, few enough to bound
// the memory.
constexpr size_t kUnitReductionsInFlight = 2;

class ZeroHooks final : public UnitHooks {
 public:
  // What the hooks act on: this rank's units of the model's weights and gradients, and the
  // collectives over the ranks.
  class Backend {
   public:
    virtual ~Backend() = default;
    // Allocates unit u's weights and starts their all-gather from every rank's parts; waits for
    // that gather if it has not been waited for; frees the weights.
    virtual void start_gathering(size_t u) = 0;
    virtual void wait_for_gathering(size_t u) = 0;
    virtual void free_weights(size_t u) = 0;
    // Allocates unit u's gradients, zeroed; frees them.
    virtual void hold_gradients(size_t u) = 0;
    virtual void free_gradients(size_t u) = 0;
    // Starts the all-reduce, in place, of each bucket that unit u's final gradients complete.
    virtual void all_reduce_buckets(size_t u) = 0;
    // Starts unit u's reduce-scatter into this rank's part of the gradient shard, or with
    // `staged` into a buffer of its own, added to the shard when it is finished.
    virtual void reduce_scatter(size_t u, bool staged) = 0;
    // The reductions started and not finished. Finishing the oldest waits for it, adds its
    // staging into the shard and frees it; it returns the unit reduced (none: a bucket).
    virtual size_t reductions_in_flight() const = 0;
    virtual std::optional<size_t> finish_oldest_reduction() = 0;
  };

  // The hooks of `policy` over a layout of `units` units, carried out by `backend`, which
  // outlives them.
  ZeroHooks(const ZeroPolicy& policy, size_t units, Backend& backend);

  // Arms the reduction for the next backward: its units' reductions start as gradients_final
  // reports them. first_of_step: the step's first reduction, which writes the gradient shard;
  // later ones (every micro-batch's, where the gradients are sharded) add to it.
  void arm(bool first_of_step);
  // Finishes every reduction in flight, after backward reported every unit final.
  void finish_reductions();

  void weights_needed(size_t u, std::optional<size_t> next) override;
  void weights_done(size_t u) override;
  void gradients_needed(size_t u) override;
  void gradients_final(size_t u) override;

  // What the hooks hold during a step beside the buffers made ahead, at most, by tag: units of
  // gradients until their reductions finish (gradients), the reductions' staging
  // (communication), gathered units of weights (parameters). The hooks over a backend that only
  // counts, walked over `calls`, one micro-batch's on a stage of `layout` (Stage::unit_hook_calls),
  // for a step of `micro_batches`.
  static std::array<size_t, kNumMemTags> working_set(const ParameterLayout& layout, const ZeroPolicy& policy,
                                                     const std::vector<UnitHookCall>& calls, int micro_batches);

 private:
  // Starts unit u's gather unless its weights are held or on their way.
  void start_gathering(size_t u);
  void finish_oldest_reduction();

  ZeroPolicy policy_;
  Backend& backend_;
  std::vector<bool> weights_held_, gradients_held_;  // per unit, where stored per unit
  bool armed_ = false;
  bool staged_ = false;  // the armed backward's reductions add to the shard
};

}  // namespace dt
