#include "kernels/cpu/float_type.h"
#include "kernels/rope.h"

namespace dt::kernels::cpu {

namespace {

// Rotates the NH query and NKV key heads of every position by the table's angles; direction
// +1 is the forward rotation, -1 its inverse (and transpose), which is the backward.
template <typename Float>
void rotate(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head, Float direction) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), W = qkv.dim(2);
  const int64_t HS = W / (n_head + 2 * int64_t{n_kv_head}), half = HS / 2, rotated = n_head + int64_t{n_kv_head};
  Float* x = qkv.ptr<Float>();
  const Float *cos_table = cos.ptr<Float>(), *sin_table = sin.ptr<Float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const int64_t t = n % T;  // the position within its sequence, not the row
    const Float *c = cos_table + t * half, *s = sin_table + t * half;
    for (int64_t h = 0; h < rotated; ++h) {
      Float* lo = x + n * W + h * HS;
      Float* hi = lo + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const Float a = lo[i], b = hi[i], si = direction * s[i];
        lo[i] = a * c[i] - b * si;
        hi[i] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

void rope_forward(Tensor qkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  dispatch_float(qkv.dtype, [&]<typename T>() { rotate<T>(qkv, cos, sin, n_head, n_kv_head, T{1}); });
}

void rope_backward(Tensor dqkv, Tensor cos, Tensor sin, int n_head, int n_kv_head) {
  dispatch_float(dqkv.dtype, [&]<typename T>() { rotate<T>(dqkv, cos, sin, n_head, n_kv_head, T{-1}); });
}

}  // namespace dt::kernels::cpu
