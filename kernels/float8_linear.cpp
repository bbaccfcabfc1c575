#include "kernels/float8_linear.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// The tiles a product reads an operand in (kernels/float8_linear.h): (1, B) where it sums along
// the operand's rows, (B, 1) or (1, B) where it sums down its columns, (B, B) for weights.
enum class Tiling { along_rows, down_columns, square };

// An FP8 operand of `width` columns on `device`, its scale_inv shaped by its tiles, and those
// tiles whole or as `tiling` says.

void check_operand(std::string_view op, std::string_view arg, const Float8Tensor& t, int64_t width, Tiling tiling,
                   Device device) {
  float8_format(t.data.dtype);
  DT_CHECK(t.data.device == device, op, ": ", arg, " ", t.data.describe(), " is not on ", device_name(device));
  DT_CHECK(t.data.ndim() >= 1 && t.data.dim(-1) == width, op, ": ", arg, " is ", t.data.describe(),
           ", expected last dim ", width);
  expect_dtype(op, str(arg, ".scale_inv"), t.scale_inv, DType::f32, device);
  expect_shape(op, str(arg, ".scale_inv"), t.scale_inv, float8_scale_shape(t.data.shape, t.tiles));
  if (t.tiles.is_whole()) return;
  const bool accepted = tiling == Tiling::along_rows     ? t.tiles.rows == 1
                        : tiling == Tiling::down_columns ? t.tiles.cols == 1 || t.tiles.rows == 1
                                                         : t.tiles.rows == t.tiles.cols;
  DT_CHECK(accepted, op, ": ", arg, " is quantized in ", t.tiles.rows, " x ", t.tiles.cols,
           " tiles, which this product does not read (kernels/float8_linear.h)");
}

void check_rows(std::string_view op, const Tensor& a, std::string_view a_name, int64_t a_width, const Tensor& b,
                std::string_view b_name, int64_t b_width) {
  DT_CHECK(a.numel() / std::max<int64_t>(a_width, 1) == b.numel() / std::max<int64_t>(b_width, 1), op, ": ", a_name,
           " ", a.describe(), " and ", b_name, " ", b.describe(), " have different row counts");
}

void check_output(std::string_view op, std::string_view arg, const Tensor& t, int64_t width, Device device) {
  DT_CHECK(t.dtype == DType::bf16 || t.dtype == DType::f32, op, ": ", arg, " is ", t.describe(),
           "; FP8 products are stored as bf16 or f32");
  DT_CHECK(t.device == device && t.ndim() >= 1 && t.dim(-1) == width, op, ": ", arg, " is ", t.describe(),
           ", expected last dim ", width, " on ", device_name(device));
}

// The (OC, C) weight of a product, in (B, B) tiles or whole, and its device.
struct WeightDims {
  int64_t OC, C;
  Device device;
};
WeightDims check_weight(std::string_view op, const Float8Tensor& weight) {
  DT_CHECK(weight.data.ndim() == 2, op, ": weight ", weight.data.describe());
  const WeightDims w{weight.data.dim(0), weight.data.dim(1), weight.data.device};
  check_operand(op, "weight", weight, w.C, Tiling::square, w.device);
  return w;
}

}  // namespace

void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias) {
  constexpr std::string_view op = "float8_linear_forward";
  const auto [OC, C, device] = check_weight(op, weight);
  check_operand(op, "inp", inp, C, Tiling::along_rows, device);
  check_output(op, "out", out, OC, device);
  check_rows(op, inp.data, "inp", C, out, "out", OC);
  if (bias.defined()) {
    expect_dtype(op, "bias", bias, out.dtype, device);
    expect_shape(op, "bias", bias, {OC});
  }
  DT_DISPATCH_DEVICE(float8_linear_forward, device, out, inp, weight, bias);
}

void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight) {
  constexpr std::string_view op = "float8_linear_backward_input";
  const auto [OC, C, device] = check_weight(op, weight);
  check_operand(op, "dout", dout, OC, Tiling::along_rows, device);
  check_output(op, "dinp", dinp, C, device);
  check_rows(op, dout.data, "dout", OC, dinp, "dinp", C);
  DT_DISPATCH_DEVICE(float8_linear_backward_input, device, dinp, dout, weight);
}

void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp) {
  constexpr std::string_view op = "float8_linear_backward_weight";
  DT_CHECK(dweight.ndim() == 2, op, ": dweight ", dweight.describe());
  const int64_t OC = dweight.dim(0), C = dweight.dim(1);
  const Device device = dweight.device;
  expect_dtype(op, "dweight", dweight, DType::f32, device);
  check_operand(op, "dout", dout, OC, Tiling::down_columns, device);
  check_operand(op, "inp", inp, C, Tiling::down_columns, device);
  check_rows(op, dout.data, "dout", OC, inp.data, "inp", C);
  DT_DISPATCH_DEVICE(float8_linear_backward_weight, device, dweight, dout, inp);
}

}  // namespace dt::kernels
