// The sigmoid gate on the CPU (kernels/sigmoid_gate.h): a row at a time, rows in parallel.
#include "kernels/sigmoid_gate.h"

#include <cmath>

#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {

namespace {

template <typename T>
T sigmoid(T z) {
  return T{1} / (T{1} + std::exp(-z));
}

}  // namespace

void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z) {
  dispatch_storage(h.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t N = h.dim(0), C = h.dim(1);
    const S *ap = storage_ptr<S>(a), *hp = storage_ptr<S>(h);
    const T* zp = z.ptr<T>();
    S* o = storage_ptr<S>(out);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T s = sigmoid(zp[n]);
      for (int64_t c = 0; c < C; ++c) store(o + n * C + c, std::fma(s, load(hp[n * C + c]), load(ap[n * C + c])));
    }
  });
}

void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z) {
  dispatch_storage(h.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t N = h.dim(0), C = h.dim(1);
    const S *d = storage_ptr<S>(dout), *hp = storage_ptr<S>(h);
    const T* zp = z.ptr<T>();
    S* dhp = storage_ptr<S>(dh);
    T* dzp = dz.ptr<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T s = sigmoid(zp[n]);
      T dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T g = load(d[n * C + c]);
        store(dhp + n * C + c, s * g);
        dot = std::fma(g, load(hp[n * C + c]), dot);
      }
      dzp[n] = s * (T{1} - s) * dot;
    }
  });
}

}  // namespace dt::kernels::cpu
