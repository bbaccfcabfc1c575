#include "kernels/dispatch.h"

namespace dt::kernels {

void expect_shape(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape) {
  DT_CHECK(t.shape == shape, op, ": ", arg, " is ", t.describe(), ", expected shape ", shape.to_string());
}

void expect_same_device_and_dtype(std::string_view op, std::initializer_list<Tensor> ts, DType dtype) {
  const Device device = ts.begin()->device;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    DT_CHECK(t.device == device && t.dtype == dtype, op, ": tensor ", t.describe(), " where ",
             dtype_name(dtype), " on ", device_name(device), " is expected");
  }
}

void expect_disjoint(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                     const Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  DT_CHECK(a0 + a.bytes() <= b0 || b0 + b.bytes() <= a0, op, ": ", a_name, " ", a.describe(), " overlaps ", b_name,
           " ", b.describe(), "; pass separate buffers");
}

void expect_float_dtype(std::string_view op, const Tensor& t) {
  DT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64, op, ": ", t.describe(),
           "; the CPU kernels take f32 or f64");
}

void expect_storage_dtype(std::string_view op, const Tensor& t) {
  DT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64 || t.dtype == DType::bf16 || t.dtype == DType::f16, op,
           ": ", t.describe(), "; the CPU kernels store f32, f64, bf16 or f16");
}

void expect_dtype(std::string_view op, std::string_view arg, const Tensor& t, DType dtype, Device device) {
  DT_CHECK(t.dtype == dtype && t.device == device, op, ": ", arg, " is ", t.describe(), ", expected ",
           dtype_name(dtype), " on ", device_name(device), " (kernels/README.md: which tensors are 16-bit)");
}

DType accumulation_dtype(DType storage) { return storage == DType::f64 ? DType::f64 : DType::f32; }

void expect_residual_operands(std::string_view op, const Tensor& res, const Tensor& out, const Tensor& a,
                              const Tensor& b) {
  expect_dtype(op, "a", a, res.dtype, res.device);
  expect_dtype(op, "b", b, res.dtype, res.device);
  expect_shape(op, "a", a, res.shape);
  expect_shape(op, "b", b, res.shape);
  expect_disjoint(op, "out", out, "a", a);
  expect_disjoint(op, "out", out, "b", b);
  if (res.data != a.data) expect_disjoint(op, "res", res, "a", a);
  if (res.data != b.data) expect_disjoint(op, "res", res, "b", b);
}

}  // namespace dt::kernels
