#include "kernels/convert.h"
#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {

void convert(Tensor dst, Tensor src) {
  dispatch_storage(src.dtype, [&]<typename S>() {
    dispatch_storage(dst.dtype, [&]<typename D>() {
      const S* in = storage_ptr<S>(src);
      D* out = storage_ptr<D>(dst);
      const int64_t n = src.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) store(out + i, static_cast<compute_t<D>>(load(in[i])));
    });
  });
}

}  // namespace dt::kernels::cpu
