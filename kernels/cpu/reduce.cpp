#include <cmath>
#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/cpu/row_blocks.h"
#include "kernels/reduce.h"

namespace dt::kernels::cpu {

double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges) {
  return dispatch_float(flat.dtype, [&]<typename T>() {
    // Each range's sum is a sum of partials over a fixed number of contiguous blocks (it
    // depends on the range's size alone), added in block order, and the ranges' sums are added
    // in range order: the same bits for every thread count, so the gradient norm, and with it
    // clipping, does not change with the threads a run is given.
    double total = 0;
    for (const FlatRange& r : ranges) {
      const T* p = flat.ptr<T>() + r.begin;
      const int64_t n = r.size(), blocks = row_blocks(n);
      std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < blocks; ++k) {
        const Range b = split_range(n, static_cast<int>(blocks), static_cast<int>(k));
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = b.begin; i < b.end; ++i) sum += static_cast<double>(p[i]) * p[i];
        partial[k] = sum;
      }
      double range_sum = 0;
      for (double s : partial) range_sum += s;
      total += range_sum;
    }
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
