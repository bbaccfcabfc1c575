#include "kernels/cpu/float_type.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/gelu.h"
#include "kernels/gelu_math.h"

namespace dt::kernels::cpu {

namespace {

struct VecExp {
  template <typename T>
  T operator()(T x) const { return vec_exp(x); }
};

}  // namespace

void gelu_forward(Tensor out, Tensor inp) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(out), storage_ptr<S>(inp), inp.numel(), [](compute_t<S> x) { return gelu_math::gelu(x, VecExp{}); });
  });
}

// dinp may alias dout.
void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  dispatch_storage(inp.dtype, [&]<typename S>() {
    map_elements(storage_ptr<S>(dinp), storage_ptr<S>(inp), storage_ptr<S>(dout), inp.numel(),
                 [](compute_t<S> x, compute_t<S> dy) { return gelu_math::gelu_grad(x, dy, VecExp{}); });
  });
}

}  // namespace dt::kernels::cpu
