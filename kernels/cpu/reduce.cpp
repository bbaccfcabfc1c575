#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/reduce.h"

namespace dt::kernels::cpu {

double sum_of_squares(Tensor x) {
  return dispatch_float(x.dtype, [&]<typename T>() {
    const T* p = x.ptr<T>();
    const int64_t n = x.numel();
    // Per-thread partial sums over contiguous ranges, added in thread order: deterministic.
    std::vector<double> partial(static_cast<size_t>(omp_get_max_threads()), 0.0);
#pragma omp parallel
    {
      const Range r = split_range(n, omp_get_num_threads(), omp_get_thread_num());
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = r.begin; i < r.end; ++i) sum += static_cast<double>(p[i]) * p[i];
      partial[omp_get_thread_num()] = sum;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
  });
}

bool all_finite(Tensor x) {
  return dispatch_float(x.dtype, [&]<typename T>() {
    const T* p = x.ptr<T>();
    const int64_t n = x.numel();
    bool finite = true;
#pragma omp parallel for simd reduction(&& : finite)
    for (int64_t i = 0; i < n; ++i) finite = finite && std::isfinite(p[i]);
    return finite;
  });
}

}  // namespace dt::kernels::cpu
