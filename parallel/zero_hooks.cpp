#include "parallel/zero_hooks.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace dt {

ZeroHooks::ZeroHooks(const ZeroPolicy& policy, size_t units, Backend& backend)
    : policy_(policy), backend_(backend), weights_held_(units), gradients_held_(units) {}

void ZeroHooks::arm(bool first_of_step) {
  DT_CHECK(backend_.reductions_in_flight() == 0, "the previous backward's gradient reduction was not waited for");
  armed_ = policy_.reduces();
  staged_ = policy_.reduces_every_micro_batch() && !first_of_step;
}

void ZeroHooks::finish_reductions() {
  DT_CHECK(!armed_, "waiting for the gradients before backward reported them all final");
  while (backend_.reductions_in_flight() > 0) finish_oldest_reduction();
}

void ZeroHooks::start_gathering(size_t u) {
  if (weights_held_[u]) return;
  weights_held_[u] = true;
  backend_.start_gathering(u);
}

void ZeroHooks::weights_needed(size_t u, std::optional<size_t> next) {
  if (policy_.gathers_weights() != ZeroPolicy::Gather::before_each_pass) return;
  start_gathering(u);
  backend_.wait_for_gathering(u);
  if (next) start_gathering(*next);  // arrives while unit u computes
}

void ZeroHooks::weights_done(size_t u) {
  if (policy_.gathers_weights() != ZeroPolicy::Gather::before_each_pass) return;
  weights_held_[u] = false;
  backend_.free_weights(u);
}

void ZeroHooks::gradients_needed(size_t u) {
  if (!policy_.shards_gradients || gradients_held_[u]) return;
  gradients_held_[u] = true;
  backend_.hold_gradients(u);
}

void ZeroHooks::gradients_final(size_t u) {
  if (!armed_) return;
  if (policy_.reduction() == ZeroPolicy::Reduction::all_reduce_buckets)
    backend_.all_reduce_buckets(u);
  else
    backend_.reduce_scatter(u, staged_);
  // Sharded gradients are freed as their reductions complete, a few units behind backward.
  while (policy_.shards_gradients && backend_.reductions_in_flight() > kUnitReductionsInFlight)
    finish_oldest_reduction();
  if (u == 0) armed_ = false;  // the embeddings are backward's last unit
}

void ZeroHooks::finish_oldest_reduction() {
  const std::optional<size_t> unit = backend_.finish_oldest_reduction();
  if (!unit || !gradients_held_[*unit]) return;
  gradients_held_[*unit] = false;
  backend_.free_gradients(*unit);
}

namespace {

// The bytes the hooks would hold, counted rather than held: the planner's backend.
class HeldBytes final : public ZeroHooks::Backend {
 public:
  HeldBytes(const ParameterLayout& layout, const ZeroPolicy& policy) : layout_(layout), policy_(policy) {}

  void start_gathering(size_t u) override { add(MemTag::parameters, unit_bytes(u, policy_.precision)); }
  void wait_for_gathering(size_t /*u*/) override {}
  void free_weights(size_t u) override { add(MemTag::parameters, -unit_bytes(u, policy_.precision)); }
  void hold_gradients(size_t u) override { add(MemTag::gradients, unit_bytes(u, DType::f32)); }
  void free_gradients(size_t u) override { add(MemTag::gradients, -unit_bytes(u, DType::f32)); }
  void all_reduce_buckets(size_t /*u*/) override {}  // in place
  void reduce_scatter(size_t u, bool staged) override {
    const int64_t bytes = staged ? policy_.part_elements(layout_, u) * int64_t{sizeof(float)} : 0;
    add(MemTag::communication, bytes);
    reductions_.push_back({u, bytes});
  }
  size_t reductions_in_flight() const override { return reductions_.size(); }
  std::optional<size_t> finish_oldest_reduction() override {
    const Reduction r = reductions_.front();
    add(MemTag::communication, -r.staged);
    reductions_.pop_front();
    return r.unit;
  }

  std::array<size_t, kNumMemTags> peak() const {
    std::array<size_t, kNumMemTags> bytes{};
    for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = static_cast<size_t>(peak_[t]);
    return bytes;
  }

 private:
  struct Reduction {
    size_t unit;
    int64_t staged;
  };
  int64_t unit_bytes(size_t u, DType dtype) const {
    return static_cast<int64_t>(FlatTensors::unit_bytes(layout_, dtype, u));
  }
  void add(MemTag tag, int64_t bytes) {
    const auto t = static_cast<size_t>(tag);
    held_[t] += bytes;
    peak_[t] = std::max(peak_[t], held_[t]);
  }

  const ParameterLayout& layout_;
  ZeroPolicy policy_;
  std::deque<Reduction> reductions_;
  std::array<int64_t, kNumMemTags> held_{}, peak_{};
};

}  // namespace

std::array<size_t, kNumMemTags> ZeroHooks::working_set(const ParameterLayout& layout, const ZeroPolicy& policy,
                                                       const std::vector<UnitHookCall>& calls, int micro_batches) {
  HeldBytes held(layout, policy);
  ZeroHooks hooks(policy, layout.units().size(), held);
  // The first micro-batch's reductions write into the shard; every later one's is staged, and
  // holds the most.
  hooks.arm(/*first_of_step=*/micro_batches < 2);
  replay(calls, hooks);
  hooks.finish_reductions();
  return held.peak();
}

}  // namespace dt
