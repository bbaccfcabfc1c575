// Dynamic loss scaling, for fp16 training (Micikevicius et al., "Mixed Precision Training").
//
// The loss is multiplied by scale() before backward so that small gradients survive fp16's
// narrow exponent range; the optimizer divides them back (unscaling comes before clipping, so
// clipping sees the true norm). After every step the caller reports whether all gradients were
// finite:
//   finite:     the step is applied; after growth_interval finite steps in a row the scale is
//               multiplied by growth_factor.
//   not finite: the step is skipped and the scale multiplied by backoff_factor. A scale below
//               min_scale means that even tiny scales overflow: the run has diverged, and
//               update() throws instead of skipping steps forever.
// The defaults are PyTorch's GradScaler's, with a floor.
#pragma once

#include <cstdint>

#include "core/field_problems.h"

namespace dt {

struct LossScalerConfig {
  float initial_scale = 65536;
  float growth_factor = 2;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  float min_scale = 1;  // below this the run has diverged

  // Records every field out of range, under the caller's names for the fields; validate throws
  // them as one dt::Error.
  void check(FieldProblems& problems) const;
  void validate() const;
};

// What a checkpoint keeps so that a resumed run scales, grows and skips exactly as before.
struct LossScalerState {
  float scale = 1;
  int64_t finite_in_a_row = 0;
  int64_t skipped = 0;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config);

  float scale() const { return scale_; }
  // Records one step's outcome and adjusts the scale; returns whether to apply the step.
  // Throws dt::Error naming the step when the scale falls below min_scale.
  bool update(bool gradients_finite, int64_t step);
  int64_t skipped_steps() const { return skipped_; }
  LossScalerState state() const { return {scale_, finite_in_a_row_, skipped_}; }
  void restore(const LossScalerState& s) { scale_ = s.scale, finite_in_a_row_ = s.finite_in_a_row, skipped_ = s.skipped; }

 private:
  LossScalerConfig config_;
  float scale_;
  int64_t finite_in_a_row_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace dt
