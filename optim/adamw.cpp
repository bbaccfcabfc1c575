#include "optim/adamw.h"

#include <cmath>

#include "kernels/adamw.h"

namespace dt {

void AdamWConfig::validate() const {
  std::string problems;
  const auto require = [&](bool ok, std::string_view field, float value, std::string_view valid) {
    if (!ok) problems += str("\n  ", field, " = ", value, ": ", valid);
  };
  require(beta1 >= 0 && beta1 < 1, "beta1", beta1, "must be in [0, 1)");
  require(beta2 >= 0 && beta2 < 1, "beta2", beta2, "must be in [0, 1)");
  require(eps > 0 && std::isfinite(eps), "eps", eps, "must be finite and above 0 (it keeps m / sqrt(v) finite)");
  require(weight_decay >= 0 && std::isfinite(weight_decay), "weight_decay", weight_decay, "must be finite and at least 0");
  if (!problems.empty()) throw Error(str("invalid AdamW settings:", problems));
}

// The config is validated before the moments are allocated.
AdamW::AdamW(const ParameterLayout& layout, AdamWConfig config, Device device, MemTag tag)
    : config_((config.validate(), config)),
      m_(layout, tag, device),
      v_(layout, tag, device),
      decayed_(layout.shown_ranges([this](const ParamInfo& p) { return decays(p); })),
      not_decayed_(layout.shown_ranges([this](const ParamInfo& p) { return !decays(p); })) {}

bool adamw_decays(const AdamWConfig& config, const ParamInfo& p) {
  return p.is_matrix && (!p.is_embedding || config.decay_embeddings);
}

kernels::AdamWStep adamw_step(const AdamWConfig& config, float lr, float grad_scale, int64_t step) {
  return {.lr = lr,
          .beta1 = config.beta1,
          .beta2 = config.beta2,
          .eps = config.eps,
          .weight_decay = config.weight_decay,
          .step = step,
          .grad_scale = grad_scale};
}

bool AdamW::decays(const ParamInfo& p) const { return adamw_decays(config_, p); }

void AdamW::step(FlatTensors& params, const FlatTensors& grads, float lr, float grad_scale) {
  ++steps_taken_;
  kernels::AdamWStep s = adamw_step(config_, lr, grad_scale, steps_taken_);
  kernels::adamw_update(params.all(), grads.all(), m_.all(), v_.all(), decayed_, s);
  s.weight_decay = 0;
  kernels::adamw_update(params.all(), grads.all(), m_.all(), v_.all(), not_decayed_, s);
}

}  // namespace dt
