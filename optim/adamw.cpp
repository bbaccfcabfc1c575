#include "optim/adamw.h"

#include "kernels/adamw.h"

namespace dt {

AdamW::AdamW(const ParameterLayout& layout, AdamWConfig config)
    : config_(config), m_(layout, MemTag::optimizer_state), v_(layout, MemTag::optimizer_state) {}

bool AdamW::decays(const ParamInfo& p) const { return p.is_matrix && (!p.is_embedding || config_.decay_embeddings); }

void AdamW::step(FlatTensors& params, const FlatTensors& grads, float lr, float grad_scale) {
  ++steps_taken_;
  for (const ParamInfo& p : params.layout().params()) {
    kernels::adamw_update(params.shown(p), grads.shown(p), m_.shown(p), v_.shown(p),
                          {.lr = lr,
                           .beta1 = config_.beta1,
                           .beta2 = config_.beta2,
                           .eps = config_.eps,
                           .weight_decay = decays(p) ? config_.weight_decay : 0.0f,
                           .step = steps_taken_,
                           .grad_scale = grad_scale});
  }
}

}  // namespace dt
