#include "kernels/convert.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

void convert(Tensor dst, Tensor src) {
  constexpr std::string_view op = "convert";
  expect_storage_dtype(op, src);
  expect_storage_dtype(op, dst);
  if (dst.numel() != src.numel() || dst.device != src.device)
    throw Error(str(op, ": dst ", dst.describe(), " and src ", src.describe(),
                    " must have as many elements, on one device"));
  expect_disjoint(op, "dst", dst, "src", src);
  DT_DISPATCH_DEVICE(convert, src.device, dst, src);
}

}  // namespace dt::kernels
