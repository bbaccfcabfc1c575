#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/embedding.h"

namespace dt::kernels::cpu {

// 16-bit rows are widened to f32 into a per-thread buffer and go through the f32 loops; the
// gradients dtable and dwpe are f32 (f64 with f64) whatever the storage.

void embedding_forward(Tensor out, Tensor ids, Tensor table, int64_t first_id) {
  dispatch_storage(table.dtype, [&]<typename S>() {
    const int64_t C = table.dim(1), N = ids.numel(), rows = table.dim(0);
    const int32_t* id = ids.ptr<int32_t>();
    const S* w = storage_ptr<S>(table);
    S* o = storage_ptr<S>(out);
    // A copy of stored values: no rounding, whatever the storage.
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = id[n] - first_id;
      if (row >= 0 && row < rows)
        std::copy_n(w + row * C, C, o + n * C);
      else
        std::fill_n(o + n * C, C, S{});  // all bits zero: +0 in every storage type
    }
  });
}

void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, int64_t first_id) {
  dispatch_storage(dout.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t C = dtable.dim(1), N = ids.numel(), rows = dtable.dim(0);
    const int32_t* id = ids.ptr<int32_t>();
    const S* dy = storage_ptr<S>(dout);
    T* dw = dtable.ptr<T>();
    // Tokens repeat, so rows of dtable receive several additions. Each thread owns a range of
    // channels and adds every token's row in token order: no races, no atomics, and the same
    // order of additions for every element whatever the thread count.
#pragma omp parallel
    {
      const Range cols = split_range(C, omp_get_num_threads(), omp_get_thread_num());
      const int64_t width = cols.end - cols.begin;
      std::vector<T> buf(is_16bit<S> ? static_cast<size_t>(width) : 0);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t r = id[n] - first_id;
        if (r < 0 || r >= rows) continue;
        T* row = dw + r * C + cols.begin;
        const T* src;
        if constexpr (is_16bit<S>) {
          load_row(dy + n * C + cols.begin, buf.data(), width);
          src = buf.data();
        } else {
          src = dy + n * C + cols.begin;
        }
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) row[c] += src[c];
      }
    }
  });
}

void position_embedding_forward(Tensor out, Tensor wpe) {
  dispatch_storage(wpe.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t B = out.dim(0), T_ = out.dim(1), C = out.dim(2);
    const S* w = storage_ptr<S>(wpe);
    S* o = storage_ptr<S>(out);
    if constexpr (!is_16bit<S>) {
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T_; ++t) {
          T* row = o + (b * T_ + t) * C;
          const T* p = w + t * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) row[c] += p[c];
        }
    } else {
#pragma omp parallel
      {
        std::vector<float> row(static_cast<size_t>(C)), p(static_cast<size_t>(C));
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T_; ++t) {
            S* orow = o + (b * T_ + t) * C;
            load_row(orow, row.data(), C);
            load_row(w + t * C, p.data(), C);
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) row[c] += p[c];
            store_row(orow, row.data(), C);
          }
      }
    }
  });
}

void position_embedding_backward(Tensor dwpe, Tensor dout) {
  dispatch_storage(dout.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t B = dout.dim(0), T_ = dout.dim(1), C = dout.dim(2);
    const S* dy = storage_ptr<S>(dout);
    T* dw = dwpe.ptr<T>();
    // Each position is owned by one thread, which adds the batch rows in order.
#pragma omp parallel
    {
      std::vector<T> buf(is_16bit<S> ? static_cast<size_t>(C) : 0);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T_; ++t)
        for (int64_t b = 0; b < B; ++b) {
          const T* src;
          if constexpr (is_16bit<S>) {
            load_row(dy + (b * T_ + t) * C, buf.data(), C);
            src = buf.data();
          } else {
            src = dy + (b * T_ + t) * C;
          }
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) dw[t * C + c] += src[c];
        }
    }
  });
}

}  // namespace dt::kernels::cpu
