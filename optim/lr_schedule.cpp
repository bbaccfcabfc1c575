#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dt {

LrDecay lr_decay_from_name(std::string_view name) {
  if (name == "cosine") return LrDecay::cosine;
  if (name == "linear") return LrDecay::linear;
  if (name == "wsd") return LrDecay::wsd;
  throw Error(str("unknown learning-rate decay '", name, "'; valid values are cosine, linear, wsd"));
}

void LrSchedule::check(FieldProblems& p) const {
  p.require(peak_lr >= 0 && std::isfinite(peak_lr), "lr", peak_lr, "must be finite and at least 0");
  p.require(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio", min_lr_ratio, "must be in [0, 1]");
  p.require(total_steps >= 1, "steps", total_steps, "must be at least 1");
  p.require(warmup_steps >= 0 && warmup_steps <= total_steps, "warmup_steps", warmup_steps,
            str("must be in [0, ", p.name("steps"), " = ", total_steps, "]"));
  if (decay == LrDecay::wsd)
    p.require(decay_steps >= 0 && decay_steps <= total_steps - warmup_steps, "decay_steps", decay_steps,
              str("must be in [0, ", p.name("steps"), " - ", p.name("warmup_steps"), " = ", total_steps - warmup_steps,
                  "]"));
}

void LrSchedule::validate() const {
  FieldProblems problems;
  check(problems);
  problems.throw_if_any("invalid learning-rate schedule:");
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  const double peak = peak_lr, min = peak_lr * static_cast<double>(min_lr_ratio);
  const int64_t decay_span = total_steps - warmup_steps;
  const double p = decay_span <= 0 ? 1.0 : std::clamp(static_cast<double>(step - warmup_steps) / decay_span, 0.0, 1.0);
  switch (decay) {
    case LrDecay::cosine:
      return static_cast<float>(min + (peak - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
    case LrDecay::linear:
      return static_cast<float>(peak + (min - peak) * p);
    case LrDecay::wsd: {
      const int64_t decay_start = total_steps - decay_steps;
      if (step < decay_start) return peak_lr;
      const double q = decay_steps == 0 ? 1.0 : std::min(1.0, static_cast<double>(step - decay_start) / decay_steps);
      return static_cast<float>(peak + (min - peak) * q);
    }
  }
  return peak_lr;
}

}  // namespace dt
