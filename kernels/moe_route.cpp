#include "kernels/moe_route.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks the routing against E experts and the (N, E) tensor that sets the float type and device.
void check_routing(std::string_view op, const MoeRouting& routing, const Tensor& rows, const char* rows_name) {
  DT_CHECK(rows.dtype == DType::f32 || rows.dtype == DType::f64, op, ": ", rows_name, " is ", rows.describe(),
           ", expected f32 (the router runs in f32 whatever the activations' storage) or f64");
  DT_CHECK(rows.ndim() == 2 && rows.dim(1) >= 1, op, ": ", rows_name, " is ", rows.describe(),
           ", expected (N, E) with E >= 1 experts");
  const int64_t E = rows.dim(1);
  DT_CHECK(routing.score == MoeScore::softmax || routing.score == MoeScore::sigmoid, op, ": unknown score function ",
           static_cast<int>(routing.score));
  DT_CHECK(routing.top_k >= 1 && routing.top_k <= E, op, ": top_k ", routing.top_k, " with ", E,
           " experts; it must be in [1, ", E, "]");
  DT_CHECK(std::isfinite(routing.route_scale) && routing.route_scale > 0, op, ": route_scale ", routing.route_scale,
           " must be finite and > 0");
}

void expect_i32(std::string_view op, std::string_view arg, const Tensor& t, Device device, const Shape& shape) {
  expect_dtype(op, arg, t, DType::i32, device);
  expect_shape(op, arg, t, shape);
}

}  // namespace

void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing) {
  constexpr std::string_view op = "moe_route_forward";
  check_routing(op, routing, logits, "logits");
  const int64_t N = logits.dim(0), E = logits.dim(1), k = routing.top_k;
  const DType dtype = logits.dtype;
  const Device device = logits.device;
  expect_dtype(op, "scores", scores, dtype, device);
  expect_shape(op, "scores", scores, {N, E});
  expect_i32(op, "experts", experts, device, {N, k});
  expect_dtype(op, "weights", weights, dtype, device);
  expect_shape(op, "weights", weights, {N, k});
  if (bias.defined()) {
    expect_dtype(op, "bias", bias, dtype, device);
    expect_shape(op, "bias", bias, {E});
  }
  for (const auto& [name, out] : {std::pair{"scores", scores}, {"experts", experts}, {"weights", weights}}) {
    expect_disjoint(op, name, out, "logits", logits);
    if (bias.defined()) expect_disjoint(op, name, out, "bias", bias);
  }
  expect_disjoint(op, "scores", scores, "experts", experts);
  expect_disjoint(op, "scores", scores, "weights", weights);
  expect_disjoint(op, "experts", experts, "weights", weights);
  DT_DISPATCH_DEVICE(moe_route_forward, device, scores, experts, weights, logits, bias, routing);
}

void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing) {
  constexpr std::string_view op = "moe_route_backward";
  check_routing(op, routing, scores, "scores");
  const int64_t N = scores.dim(0), E = scores.dim(1), k = routing.top_k;
  const DType dtype = scores.dtype;
  const Device device = scores.device;
  expect_dtype(op, "dlogits", dlogits, dtype, device);
  expect_shape(op, "dlogits", dlogits, {N, E});
  expect_dtype(op, "dweights", dweights, dtype, device);
  expect_shape(op, "dweights", dweights, {N, k});
  expect_i32(op, "experts", experts, device, {N, k});
  if (dscores.defined()) {
    expect_dtype(op, "dscores", dscores, dtype, device);
    expect_shape(op, "dscores", dscores, {N, E});
    expect_disjoint(op, "dlogits", dlogits, "dscores", dscores);
  }
  expect_disjoint(op, "dlogits", dlogits, "dweights", dweights);
  expect_disjoint(op, "dlogits", dlogits, "scores", scores);
  expect_disjoint(op, "dlogits", dlogits, "experts", experts);
  DT_DISPATCH_DEVICE(moe_route_backward, device, dlogits, dweights, dscores, scores, experts, routing);
}

}  // namespace dt::kernels
