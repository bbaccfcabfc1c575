#include <cmath>

#include "kernels/adamw.h"

namespace dt::kernels::cpu {

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& s) {
  // Scalars as PyTorch forms them: in double, then rounded to the tensors' fp32.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float decay = static_cast<float>(1.0 - static_cast<double>(s.lr) * s.weight_decay);
  const float neg_step_size = static_cast<float>(-static_cast<double>(s.lr) / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = s.beta1, one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  const float beta2 = s.beta2, one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  const float eps = s.eps, grad_scale = s.grad_scale;
  float *p = param.ptr<float>(), *mp = m.ptr<float>(), *vp = v.ptr<float>();
  const float* g = grad.ptr<float>();
  // One parallel region for all ranges; each element is independent, so no barrier between them.
#pragma omp parallel
  for (const FlatRange& r : ranges) {
#pragma omp for simd schedule(static) nowait
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float gi = g[i] * grad_scale;
      p[i] *= decay;
      mp[i] = mp[i] * beta1 + one_minus_beta1 * gi;
      vp[i] = vp[i] * beta2 + one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(vp[i]) / bias_correction2_sqrt + eps;
      p[i] += neg_step_size * mp[i] / denom;
    }
  }
}

}  // namespace dt::kernels::cpu
