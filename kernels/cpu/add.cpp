#include "kernels/add.h"
#include "kernels/cpu/float_type.h"

namespace dt::kernels::cpu {

void add_forward(Tensor out, Tensor a, Tensor b) {
  dispatch_float(a.dtype, [&]<typename T>() {
    const T *x = a.ptr<T>(), *y = b.ptr<T>();
    T* o = out.ptr<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  });
}

void accumulate(Tensor dst, Tensor src) {
  dispatch_float(dst.dtype, [&]<typename T>() {
    const T* s = src.ptr<T>();
    T* d = dst.ptr<T>();
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  });
}

void scale(Tensor x, double factor) {
  dispatch_float(x.dtype, [&]<typename T>() {
    T* p = x.ptr<T>();
    const T f = static_cast<T>(factor);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  });
}

}  // namespace dt::kernels::cpu
