// What parallelism does as a pass reaches each unit of the layout (the embeddings, unit 0; block
// l, unit 1 + l; the head, the last: model/parameters.h). Forward reads the units' weights in
// layout order, backward in reverse; backward finishes the head's gradients first, then each
// block's, and the embeddings' last (a tied wte gets gradient from the output projection at the
// start of backward and from the lookup at the end). Data parallelism reduces a unit's gradients
// while backward goes on below it, and under ZeRO 3 gathers a unit's weights just before they
// are read (parallel/data_parallel.h). A stage (model/stage.h) calls them for its units.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace dt {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before the pass first reads unit u's weights; `next` is the unit whose weights it reads
  // after u's (to prefetch), or none.
  virtual void weights_needed(size_t u, std::optional<size_t> next) = 0;
  // After the pass's last read of unit u's weights.
  virtual void weights_done(size_t u) = 0;
  // Backward: before it first adds to unit u's gradients, and once none of them changes again.
  virtual void gradients_needed(size_t u) = 0;
  virtual void gradients_final(size_t u) = 0;
};

// One call of a hook: a pass's order as data (Stage::unit_hook_calls), to walk without running it.
struct UnitHookCall {
  enum class Hook { weights_needed, weights_done, gradients_needed, gradients_final };
  Hook hook;
  size_t unit;
  std::optional<size_t> next = std::nullopt;  // weights_needed's
  bool operator==(const UnitHookCall&) const = default;
};

// Makes `calls` on `hooks`, in order.
inline void replay(const std::vector<UnitHookCall>& calls, UnitHooks& hooks) {
  for (const UnitHookCall& c : calls) {
    switch (c.hook) {
      case UnitHookCall::Hook::weights_needed: hooks.weights_needed(c.unit, c.next); break;
      case UnitHookCall::Hook::weights_done: hooks.weights_done(c.unit); break;
      case UnitHookCall::Hook::gradients_needed: hooks.gradients_needed(c.unit); break;
      case UnitHookCall::Hook::gradients_final: hooks.gradients_final(c.unit); break;
    }
  }
}

}  // namespace dt
