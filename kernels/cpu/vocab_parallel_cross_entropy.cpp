#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/blocked_sum.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/vocab_parallel_cross_entropy.h"

namespace dt::kernels::cpu {

namespace {

// Calls row(n, x) for every row n with x its first `rows` logits in the compute type: the row
// itself, or widened into a per-thread buffer for 16-bit storage (which `store` then rounds
// back over the row when the row was changed).
template <typename S, typename Row>
void for_each_row(Tensor logits, int64_t rows, bool write_back, Row row) {
  using T = compute_t<S>;
  const int64_t N = logits.dim(0), Vp = logits.dim(1);
  S* x = storage_ptr<S>(logits);
  if constexpr (!is_16bit<S>) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) row(n, x + n * Vp);
  } else {
#pragma omp parallel
    {
      std::vector<T> buffer(static_cast<size_t>(Vp));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        load_row(x + n * Vp, buffer.data(), rows);
        row(n, buffer.data());
        if (write_back) store_row(x + n * Vp, buffer.data(), Vp);
      }
    }
  }
}

}  // namespace

void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index) {
  dispatch_storage(logits.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    T* out = stats.ptr<T>();
    const int32_t* t = targets.ptr<int32_t>();
    for_each_row<S>(logits, rows, false, [&](int64_t n, const T* x) {
      T max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : max)
      for (int64_t v = 0; v < rows; ++v) max = std::max(max, x[v]);
      const T sum = blocked_sum<T>(rows, [&](int64_t v) { return vec_exp(x[v] - max); });
      const int64_t target = int64_t{t[n]} - first_id;
      const bool here = t[n] != ignore_index && target >= 0 && target < rows;
      out[3 * n] = max;
      out[3 * n + 1] = sum;
      out[3 * n + 2] = here ? x[target] : T{0};
    });
  });
}

void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale, int32_t ignore_index) {
  dispatch_storage(logits.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t N = logits.dim(0), Vp = logits.dim(1), R = all_stats.dim(0);
    const T* stats = all_stats.ptr<T>();
    const int32_t* t = targets.ptr<int32_t>();
    T* loss = losses.ptr<T>();
    const T scale = static_cast<T>(loss_scale);
    for_each_row<S>(logits, rows, with_gradient, [&](int64_t n, T* x) {
      if (t[n] == ignore_index) {
        loss[n] = 0;
        if (with_gradient) std::fill_n(x, Vp, T{0});
        return;
      }
      // The ranks' stats merged in rank order.
      T max = -std::numeric_limits<T>::infinity(), target_logit = 0, sum = 0;
      for (int64_t r = 0; r < R; ++r) max = std::max(max, stats[(r * N + n) * 3]);
      for (int64_t r = 0; r < R; ++r) {
        const T* s = stats + (r * N + n) * 3;
        sum += s[1] * vec_exp(s[0] - max);
        target_logit += s[2];
      }
      loss[n] = std::log(sum) + max - target_logit;
      if (!with_gradient) return;
      const T factor = scale / sum;
#pragma omp simd
      for (int64_t v = 0; v < rows; ++v) x[v] = vec_exp(x[v] - max) * factor;
      const int64_t target = int64_t{t[n]} - first_id;
      if (target >= 0 && target < rows) x[target] -= scale;
      std::fill(x + rows, x + Vp, T{0});
    });
  });
}

}  // namespace dt::kernels::cpu
