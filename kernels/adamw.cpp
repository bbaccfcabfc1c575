#include "kernels/adamw.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  constexpr std::string_view op = "adamw_update";
  expect_same_device_and_dtype(op, {param, grad, m, v}, DType::f32);
  expect_shape(op, "grad", grad, param.shape);
  expect_shape(op, "m", m, param.shape);
  expect_shape(op, "v", v, param.shape);
  DT_CHECK(s.step >= 1, op, ": step ", s.step, " counts from 1");
  DT_DISPATCH_DEVICE(adamw_update, param.device, param, grad, m, v, s);
}

}  // namespace dt::kernels
