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

}  // namespace dt
