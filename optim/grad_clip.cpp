#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/reduce.h"

namespace dt {

double global_grad_norm(const FlatTensors& grads) {
  double sum = 0;
  for (const ParamInfo& p : grads.layout().params()) sum += kernels::sum_of_squares(grads.shown(p));
  return std::sqrt(sum);
}

float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace dt
