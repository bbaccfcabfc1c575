#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/rope.h"

namespace dt::kernels::cpu {

namespace {

// Rotates the `rotated` heads of one position in place; direction +1 is the forward rotation,
// -1 its inverse (and transpose), which is the backward.
template <typename T>
inline void rotate_row(T* row, const T* c, const T* s, int64_t rotated, int64_t HS, T direction) {
  const int64_t half = HS / 2;
  for (int64_t h = 0; h < rotated; ++h) {
    T* lo = row + h * HS;
    T* hi = lo + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const T a = lo[i], b = hi[i], si = direction * s[i];
      lo[i] = a * c[i] - b * si;
      hi[i] = b * c[i] + a * si;
    }
  }
}

// The NH query and NKV key heads of every position rotated by the table's angles. The table is
// f32 (f64 with f64); 16-bit heads are widened to f32, rotated and rounded once.
template <typename S>
void rotate(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head, compute_t<S> direction) {
  using T = compute_t<S>;
  const int64_t B = qkv.dim(0), T_ = qkv.dim(1), W = qkv.dim(2);
  const int64_t HS = W / (n_head + 2 * int64_t{n_kv_head}), half = HS / 2, rotated = n_head + int64_t{n_kv_head};
  S* x = storage_ptr<S>(qkv);
  const T *cos_table = cos.ptr<T>(), *sin_table = sin.ptr<T>();
  if constexpr (!is_16bit<S>) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < B * T_; ++n) {
      const int64_t t = n % T_;  // the position within its sequence, not the row
      rotate_row<T>(x + n * W, cos_table + t * half, sin_table + t * half, rotated, HS, direction);
    }
  } else {
#pragma omp parallel
    {
      // The rotated heads of a row (the value heads are left as stored).
      std::vector<float> buf(static_cast<size_t>(rotated * HS));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < B * T_; ++n) {
        const int64_t t = n % T_;
        load_row(x + n * W, buf.data(), rotated * HS);
        rotate_row<T>(buf.data(), cos_table + t * half, sin_table + t * half, rotated, HS, direction);
        store_row(x + n * W, buf.data(), rotated * HS);
      }
    }
  }
}

}  // namespace

void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  dispatch_storage(qkv.dtype, [&]<typename S>() { rotate<S>(qkv, cos, sin, n_head, n_kv_head, 1); });
}

void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  dispatch_storage(dqkv.dtype, [&]<typename S>() { rotate<S>(dqkv, cos, sin, n_head, n_kv_head, -1); });
}

}  // namespace dt::kernels::cpu
