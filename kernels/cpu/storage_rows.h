// Rows of 16-bit storage widened to f32 and rounded back, for kernels whose f32 inner loops run
// unchanged on a small buffer (kernels/README.md, "Storage precision").
//
//   load_row(src, dst, n)    dst[i] = load(src[i]), exact
//   store_row(dst, src, n)   dst[i] = src[i] rounded to nearest even (store)
//
// f16 goes through F16C eight at a time where the target has it (the same rounding as the
// scalar _cvtss_sh); bf16 is bit shifts that GCC vectorizes.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {

// Elements converted per step by the elementwise kernels: 2 KiB of f32 on the stack.
constexpr int64_t kStorageChunk = 512;

template <typename S>
void load_row(const S* src, compute_t<S>* dst, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<S, f16_t>) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) dst[j] = load(src[j]);
}

template <typename S>
void store_row(S* dst, const compute_t<S>* src, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<S, f16_t>) {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) store(dst + j, src[j]);
}

// Per-thread f32 rows for widening 16-bit rows of width `width`: K of them, allocated only for
// 16-bit storage (f32 and f64 rows are used in place).
template <typename S, int K>
struct RowBuffers {
  std::array<std::vector<compute_t<S>>, K> rows;
  explicit RowBuffers(int64_t width) {
    if constexpr (is_16bit<S>)
      for (auto& row : rows) row.resize(static_cast<size_t>(width));
  }
  compute_t<S>* operator[](int i) { return rows[i].data(); }
};

// A small tensor's elements (a (C) parameter) as compute_t<S>: the tensor itself for f32 and
// f64, else a widened copy made once.
template <typename S>
struct Widened {
  std::vector<compute_t<S>> copy;
  const compute_t<S>* p;
  explicit Widened(const Tensor& t) {
    if constexpr (is_16bit<S>) {
      copy.resize(static_cast<size_t>(t.numel()));
      load_row(storage_ptr<S>(t), copy.data(), t.numel());
      p = copy.data();
    } else {
      p = storage_ptr<S>(t);
    }
  }
};

// Elementwise maps over n stored elements: out[i] = f(a[i]) or f(a[i], b[i]), computed in
// compute_t<S>. f32 and f64 run one flat loop; 16-bit runs it on chunks widened to f32 and
// rounds each result once. out may alias a or b: a chunk is read whole before it is written.
template <typename S, typename F>
void map_elements(S* out, const S* a, int64_t n, F f) {
  if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
      const int64_t m = std::min(kStorageChunk, n - i0);
      float buf[kStorageChunk];
      load_row(a + i0, buf, m);
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) buf[j] = f(buf[j]);
      store_row(out + i0, buf, m);
    }
  }
}

template <typename S, typename F>
void map_elements(S* out, const S* a, const S* b, int64_t n, F f) {
  if constexpr (!is_16bit<S>) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kStorageChunk) {
      const int64_t m = std::min(kStorageChunk, n - i0);
      float abuf[kStorageChunk], bbuf[kStorageChunk];
      load_row(a + i0, abuf, m);
      load_row(b + i0, bbuf, m);
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) abuf[j] = f(abuf[j], bbuf[j]);
      store_row(out + i0, abuf, m);
    }
  }
}

// The rows a forward normalizes, as compute_t<S>: x's, or with y (the fused residual add) those
// of res = x + y, computed as add_forward computes them (kernels/cpu/add.cpp: in compute_t<S>,
// rounded once to S) and stored into res, then read back from there, so that the norm sees
// exactly the stored values. res may be x or y: each element is read before it is written.
template <typename S>
struct ResidualRows {
  S* res;
  const S* x;
  const S* y;  // null: the plain forward (res unused)
  int64_t C;

  // Row n. 16-bit rows are widened into xbuf; ybuf is scratch for y's row.
  const compute_t<S>* input(int64_t n, compute_t<S>* xbuf, compute_t<S>* ybuf) const {
    const S* xr = x + n * C;
    if (y == nullptr) {
      if constexpr (!is_16bit<S>) return xr;
      load_row(xr, xbuf, C);
      return xbuf;
    }
    const S* yr = y + n * C;
    S* rr = res + n * C;
    if constexpr (!is_16bit<S>) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) rr[c] = xr[c] + yr[c];
      return rr;
    } else {
      load_row(xr, xbuf, C);
      load_row(yr, ybuf, C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) xbuf[c] += ybuf[c];
      store_row(rr, xbuf, C);
      load_row(rr, xbuf, C);
      return xbuf;
    }
  }
};

}  // namespace dt::kernels::cpu
