#include "kernels/sigmoid_gate.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks the rows (N, C) of `name` and the gate values (N) in their compute type.
void check_gate(std::string_view op, const Tensor& rows, const char* name, const Tensor& z, const char* z_name) {
  expect_storage_dtype(op, rows);
  DT_CHECK(rows.ndim() == 2, op, ": ", name, " is ", rows.describe(), ", expected (N, C)");
  const DType gate_dtype = rows.dtype == DType::f64 ? DType::f64 : DType::f32;
  expect_dtype(op, z_name, z, gate_dtype, rows.device);
  expect_shape(op, z_name, z, {rows.dim(0)});
}

}  // namespace

void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z) {
  constexpr std::string_view op = "sigmoid_gate_forward";
  check_gate(op, h, "h", z, "z");
  for (const auto& [name, t] : {std::pair{"a", a}, {"out", out}}) {
    expect_dtype(op, name, t, h.dtype, h.device);
    expect_shape(op, name, t, h.shape);
  }
  expect_disjoint(op, "out", out, "h", h);
  expect_disjoint(op, "out", out, "z", z);
  DT_DISPATCH_DEVICE(sigmoid_gate_forward, h.device, out, a, h, z);
}

void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z) {
  constexpr std::string_view op = "sigmoid_gate_backward";
  check_gate(op, h, "h", z, "z");
  for (const auto& [name, t] : {std::pair{"dh", dh}, {"dout", dout}}) {
    expect_dtype(op, name, t, h.dtype, h.device);
    expect_shape(op, name, t, h.shape);
  }
  expect_dtype(op, "dz", dz, z.dtype, z.device);
  expect_shape(op, "dz", dz, z.shape);
  for (const auto& [name, in] : {std::pair{"dout", dout}, {"h", h}, {"z", z}}) {
    expect_disjoint(op, "dh", dh, name, in);
    expect_disjoint(op, "dz", dz, name, in);
  }
  expect_disjoint(op, "dh", dh, "dz", dz);
  DT_DISPATCH_DEVICE(sigmoid_gate_backward, h.device, dh, dz, dout, h, z);
}

}  // namespace dt::kernels
