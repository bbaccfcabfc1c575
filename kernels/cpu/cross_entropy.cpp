#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/blocked_sum.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/cross_entropy.h"

namespace dt::kernels::cpu {

namespace {

// One row: returns its loss; when `grad` is set, overwrites the row with the gradient of
// scale * loss (padding columns [V, Vp) zeroed).
template <typename T>
T row_loss(T* x, int64_t V, int64_t Vp, int32_t target, int32_t ignore_index, const T* grad_scale) {
  if (target == ignore_index) {
    if (grad_scale) std::fill_n(x, Vp, T{0});
    return T{0};
  }
  T max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : max)
  for (int64_t v = 0; v < V; ++v) max = std::max(max, x[v]);
  const T target_logit = x[target];
  if (grad_scale) {
    const T sum = blocked_sum<T>(V, [&](int64_t v) { return x[v] = vec_exp(x[v] - max); });
    const T factor = *grad_scale / sum;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) x[v] *= factor;
    x[target] -= *grad_scale;
    std::fill(x + V, x + Vp, T{0});
    return std::log(sum) + max - target_logit;
  }
  return std::log(blocked_sum<T>(V, [&](int64_t v) { return vec_exp(x[v] - max); })) + max - target_logit;
}

template <typename S>
void cross_entropy(Tensor losses, Tensor logits, Tensor targets, int64_t V, int32_t ignore_index,
                   const float* loss_scale) {
  using T = compute_t<S>;
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  S* x = storage_ptr<S>(logits);
  T* loss = losses.ptr<T>();
  const int32_t* t = targets.ptr<int32_t>();
  const T scale = loss_scale ? static_cast<T>(*loss_scale) : T{0};
  const T* grad_scale = loss_scale ? &scale : nullptr;
  if constexpr (!is_16bit<S>) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) loss[n] = row_loss<T>(x + n * Vp, V, Vp, t[n], ignore_index, grad_scale);
  } else {
    // Each row widened into f32 (V columns; padding is never read), the f32 row loss, and with
    // the gradient the whole row (padding zeroed) rounded once over the logits.
#pragma omp parallel
    {
      std::vector<float> row(static_cast<size_t>(Vp));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        load_row(x + n * Vp, row.data(), V);
        loss[n] = row_loss<T>(row.data(), V, Vp, t[n], ignore_index, grad_scale);
        if (grad_scale) store_row(x + n * Vp, row.data(), Vp);
      }
    }
  }
}

}  // namespace

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size, int32_t ignore_index) {
  dispatch_storage(logits.dtype,
                   [&]<typename S>() { cross_entropy<S>(losses, logits, targets, vocab_size, ignore_index, nullptr); });
}

void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index) {
  dispatch_storage(logits.dtype, [&]<typename S>() {
    cross_entropy<S>(losses, logits, targets, vocab_size, ignore_index, &loss_scale);
  });
}

}  // namespace dt::kernels::cpu
