#include "optim/grad_clip.h"

namespace dt {

float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace dt
