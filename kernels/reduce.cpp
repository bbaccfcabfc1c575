#include "kernels/reduce.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

double sum_of_squares(Tensor x) {
  expect_float_dtype("sum_of_squares", x);
  DT_DISPATCH_DEVICE(sum_of_squares, x.device, x);
}

bool all_finite(Tensor x) {
  expect_float_dtype("all_finite", x);
  DT_DISPATCH_DEVICE(all_finite, x.device, x);
}

}  // namespace dt::kernels
