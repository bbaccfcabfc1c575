#include "kernels/add.h"
#include "kernels/cpu/storage_rows.h"

namespace dt::kernels::cpu {

void add_forward(Tensor out, Tensor a, Tensor b) {
  dispatch_storage(a.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(out), storage_ptr<S>(a), storage_ptr<S>(b), a.numel(),
                 [](compute_t<S> x, compute_t<S> y) { return x + y; });
  });
}

void accumulate(Tensor dst, Tensor src) {
  dispatch_storage(dst.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(dst), storage_ptr<S>(dst), storage_ptr<S>(src), dst.numel(),
                 [](compute_t<S> d, compute_t<S> s) { return d + s; });
  });
}

void scale(Tensor x, double factor) {
  dispatch_storage(x.dtype, [&]<typename S>() {
    const compute_t<S> f = static_cast<compute_t<S>>(factor);  // rounded to f32 for 16-bit storage
    map_elements(storage_ptr<S>(x), storage_ptr<S>(x), x.numel(), [f](compute_t<S> v) { return v * f; });
  });
}

}  // namespace dt::kernels::cpu
