#include <algorithm>

#include "kernels/add.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"

namespace dt::kernels::cpu {

// f32 and f64 run one flat loop; 16-bit runs it on chunks widened to f32 and rounds each result
// once (an output that aliases an input is safe: a chunk is read whole before it is written).

void add_forward(Tensor out, Tensor a, Tensor b) {
  dispatch_storage(a.dtype, [&]<typename S>() {
    const S *x = storage_ptr<S>(a), *y = storage_ptr<S>(b);
    S* o = storage_ptr<S>(out);
    const int64_t n = a.numel();
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
        const int64_t m = std::min(kStorageChunk, n - i0);
        float xbuf[kStorageChunk], ybuf[kStorageChunk];
        load_row(x + i0, xbuf, m);
        load_row(y + i0, ybuf, m);
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) xbuf[j] += ybuf[j];
        store_row(o + i0, xbuf, m);
      }
    }
  });
}

void accumulate(Tensor dst, Tensor src) {
  dispatch_storage(dst.dtype, [&]<typename S>() {
    const S* s = storage_ptr<S>(src);
    S* d = storage_ptr<S>(dst);
    const int64_t n = dst.numel();
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
        const int64_t m = std::min(kStorageChunk, n - i0);
        float dbuf[kStorageChunk], sbuf[kStorageChunk];
        load_row(d + i0, dbuf, m);
        load_row(s + i0, sbuf, m);
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) dbuf[j] += sbuf[j];
        store_row(d + i0, dbuf, m);
      }
    }
  });
}

void scale(Tensor x, double factor) {
  dispatch_storage(x.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    S* p = storage_ptr<S>(x);
    const T f = static_cast<T>(factor);
    const int64_t n = x.numel();
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] *= f;
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
        const int64_t m = std::min(kStorageChunk, n - i0);
        float buf[kStorageChunk];
        load_row(p + i0, buf, m);
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) buf[j] *= f;
        store_row(p + i0, buf, m);
      }
    }
  });
}

}  // namespace dt::kernels::cpu
