#include <omp.h>

#include <algorithm>

#include "kernels/cpu/float_type.h"
#include "kernels/embedding.h"

namespace dt::kernels::cpu {

void embedding_forward(Tensor out, Tensor ids, Tensor table) {
  dispatch_float(table.dtype, [&]<typename T>() {
    const int64_t C = table.dim(1), N = ids.numel();
    const int32_t* id = ids.ptr<int32_t>();
    const T* w = table.ptr<T>();
    T* o = out.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::copy_n(w + id[n] * C, C, o + n * C);
  });
}

void embedding_backward(Tensor dtable, Tensor ids, Tensor dout) {
  dispatch_float(dtable.dtype, [&]<typename T>() {
    const int64_t C = dtable.dim(1), N = ids.numel();
    const int32_t* id = ids.ptr<int32_t>();
    const T* dy = dout.ptr<T>();
    T* dw = dtable.ptr<T>();
    // Tokens repeat, so rows of dtable receive several additions. Each thread owns a range of
    // channels and adds every token's row in token order: no races, no atomics, and the same
    // order of additions for every element whatever the thread count.
#pragma omp parallel
    {
      const Range cols = split_range(C, omp_get_num_threads(), omp_get_thread_num());
      for (int64_t n = 0; n < N; ++n) {
        T* row = dw + id[n] * C;
        const T* src = dy + n * C;
#pragma omp simd
        for (int64_t c = cols.begin; c < cols.end; ++c) row[c] += src[c];
      }
    }
  });
}

void position_embedding_forward(Tensor out, Tensor wpe) {
  dispatch_float(wpe.dtype, [&]<typename T>() {
    const int64_t B = out.dim(0), T_ = out.dim(1), C = out.dim(2);
    const T* w = wpe.ptr<T>();
    T* o = out.ptr<T>();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T_; ++t) {
        T* row = o + (b * T_ + t) * C;
        const T* p = w + t * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) row[c] += p[c];
      }
  });
}

void position_embedding_backward(Tensor dwpe, Tensor dout) {
  dispatch_float(dwpe.dtype, [&]<typename T>() {
    const int64_t B = dout.dim(0), T_ = dout.dim(1), C = dout.dim(2);
    const T* dy = dout.ptr<T>();
    T* dw = dwpe.ptr<T>();
    // Each position is owned by one thread, which adds the batch rows in order.
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const T* src = dy + (b * T_ + t) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dw[t * C + c] += src[c];
      }
  });
}

}  // namespace dt::kernels::cpu
