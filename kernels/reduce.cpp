#include "kernels/reduce.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

double sum_of_squares(Tensor x) {
  expect_float_dtype("sum_of_squares", x);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const FlatRange whole{0, n};
  return sum_of_squares(x.reshape({n}), std::span(&whole, 1));
}

double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges) {
  constexpr std::string_view op = "sum_of_squares";
  expect_float_dtype(op, flat);
  DT_CHECK(flat.ndim() == 1, op, ": the multi-tensor form takes a flat 1-D buffer; got ", flat.describe());
  expect_ranges(op, ranges, flat.numel());
  if (ranges.empty()) return 0.0;
  DT_DISPATCH_DEVICE(sum_of_squares, flat.device, flat, ranges);
}

bool all_finite(Tensor x) {
  expect_float_dtype("all_finite", x);
  DT_DISPATCH_DEVICE(all_finite, x.device, x);
}

}  // namespace dt::kernels
