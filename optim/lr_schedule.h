// Learning-rate schedules: linear warm-up, then one of three decays.
//
//   warm-up   step < warmup_steps:  lr = peak * (step + 1) / warmup_steps
//   cosine:   lr = min + (peak - min) * 0.5 * (1 + cos(pi * p))
//   linear:   lr = peak + (min - peak) * p
//   wsd:      constant at peak, then linear to min over the last decay_steps steps
//             ("warmup-stable-decay", as in MiniCPM and DeepSeek)
// where p = (step - warmup_steps) / (total_steps - warmup_steps) in [0, 1] and
// min = peak * min_lr_ratio. Steps count from 0; past total_steps the lr stays at min.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/field_problems.h"

namespace dt {

enum class LrDecay { cosine, linear, wsd };
LrDecay lr_decay_from_name(std::string_view name);  // "cosine", "linear", "wsd"

struct LrSchedule {
  float peak_lr = 3e-4f;
  float min_lr_ratio = 0.1f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::cosine;
  int64_t decay_steps = 0;  // wsd only

  // Records every field out of range, under the caller's names for the fields.
  void check(FieldProblems& problems) const;
  void validate() const;  // throws dt::Error naming the field, the value and the valid range
  float at(int64_t step) const;
};

}  // namespace dt
