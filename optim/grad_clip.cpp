#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/reduce.h"

namespace dt {

double global_grad_norm(const FlatTensors& grads) {
  return std::sqrt(kernels::sum_of_squares(grads.all(), grads.layout().shown_ranges()));
}

float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace dt
