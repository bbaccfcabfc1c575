// What the FP8 kernels' tests share (kernels/float8_linear_test.cpp,
// kernels/cuda/float8_linear_test.cpp): a tensor quantized, with the buffers that hold it.
#pragma once

#include "kernels/float8.h"
#include "tests/gradcheck.h"

namespace dt::testing {

struct Quantized {
  OwnedTensor data, scale_inv;
  kernels::Float8Tiles tiles;
  kernels::Float8Tensor q() const { return {data.t, scale_inv.t, tiles}; }
};

// x (on the host) quantized as `format` in `tiles`; a whole tensor by the scale of its amax.
inline Quantized quantize(const Tensor& x, DType format, kernels::Float8Tiles tiles) {
  Quantized q{zeros(format, x.shape), zeros(DType::f32, kernels::float8_scale_shape(x.shape, tiles)), tiles};
  if (!tiles.is_whole()) {
    kernels::float8_quantize_tiles(q.q(), x);
    return q;
  }
  OwnedTensor amax = zeros(DType::f32, {1}), scale = zeros(DType::f32, {1});
  *scale.ptr<float>() = 1;
  kernels::float8_amax(amax.t, x);
  kernels::float8_scale(scale.t, amax.t, kernels::float8_format(format), 0, false);
  kernels::float8_quantize(q.q(), x, scale.t);
  return q;
}

}  // namespace dt::testing
