#include "kernels/adamw.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  constexpr std::string_view op = "adamw_update";
  expect_same_device_and_dtype(op, {param, grad, m, v}, DType::f32);
  expect_shape(op, "grad", grad, param.shape);
  expect_shape(op, "m", m, param.shape);
  expect_shape(op, "v", v, param.shape);
  const int64_t n = param.numel();
  if (n == 0) return;
  const FlatRange whole{0, n};
  const auto flat = [n](Tensor t) { return t.reshape({n}); };
  adamw_update(flat(param), flat(grad), flat(m), flat(v), std::span(&whole, 1), s);
}

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& s) {
  constexpr std::string_view op = "adamw_update";
  expect_same_device_and_dtype(op, {param, grad, m, v}, DType::f32);
  DT_CHECK(param.ndim() == 1, op, ": the multi-tensor form takes flat 1-D buffers; param is ", param.describe());
  expect_shape(op, "grad", grad, param.shape);
  expect_shape(op, "m", m, param.shape);
  expect_shape(op, "v", v, param.shape);
  expect_ranges(op, ranges, param.numel());
  DT_CHECK(s.step >= 1, op, ": step ", s.step, " counts from 1");
  if (ranges.empty()) return;
  DT_DISPATCH_DEVICE(adamw_update, param.device, param, grad, m, v, ranges, s);
}

}  // namespace dt::kernels
