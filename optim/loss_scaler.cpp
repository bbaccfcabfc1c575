#include "optim/loss_scaler.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace dt {

void LossScalerConfig::check(FieldProblems& p) const {
  // Written as doubles, as the messages always have been.
  const auto require = [&](bool ok, std::string_view field, double value, std::string_view what) {
    p.require(ok, field, value, what);
  };
  require(std::isfinite(initial_scale) && initial_scale > 0, "initial_scale", initial_scale, "must be finite and above 0");
  require(growth_factor >= 1 && std::isfinite(growth_factor), "growth_factor", growth_factor, "must be finite and at least 1");
  require(backoff_factor > 0 && backoff_factor < 1, "backoff_factor", backoff_factor, "must be in (0, 1)");
  require(growth_interval >= 1, "growth_interval", static_cast<double>(growth_interval), "must be at least 1");
  require(min_scale > 0 && min_scale <= initial_scale, "min_scale", min_scale,
          str("must be in (0, ", p.name("initial_scale"), " = ", initial_scale, "]"));
}

void LossScalerConfig::validate() const {
  FieldProblems problems;
  check(problems);
  problems.throw_if_any("invalid loss scaler settings:");
}

LossScaler::LossScaler(LossScalerConfig config) : config_((config.validate(), config)), scale_(config.initial_scale) {}

bool LossScaler::update(bool gradients_finite, int64_t step) {
  if (gradients_finite) {
    if (++finite_in_a_row_ == config_.growth_interval) {
      // Growth stops where fp32 itself would overflow.
      if (std::isfinite(scale_ * config_.growth_factor)) scale_ *= config_.growth_factor;
      finite_in_a_row_ = 0;
    }
    return true;
  }
  ++skipped_;
  finite_in_a_row_ = 0;
  scale_ *= config_.backoff_factor;
  if (scale_ < config_.min_scale)
    throw Error(str("training diverged at step ", step, ": gradients were not finite even with the loss scale at ",
                    scale_ / config_.backoff_factor, ", and the next scale ", scale_, " is below the floor min_scale = ",
                    config_.min_scale, " (", skipped_, " steps skipped so far). Lower the learning rate, check the "
                    "data, or restart from an earlier checkpoint"));
  return false;
}

}  // namespace dt
