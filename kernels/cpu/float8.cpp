#include "kernels/float8.h"

#include <array>
#include <cmath>

#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {

namespace {

using float8_math::Format;

// Every byte's value, for dequantizing by lookup.
const std::array<float, 256>& values_of(Format format) {
  static const auto table = [](Format f) {
    std::array<float, 256> values{};
    for (int b = 0; b < 256; ++b) values[static_cast<size_t>(b)] = float8_math::decode(static_cast<uint8_t>(b), f);
    return values;
  };
  static const std::array<float, 256> e4m3 = table(Format::e4m3), e5m2 = table(Format::e5m2);
  return format == Format::e4m3 ? e4m3 : e5m2;
}

// The 2-D view of a tensor and of its tiles: element (r, c) is at r * C + c; tile (i, j) holds
// rows [i * th, (i + 1) * th) and columns [j * tw, (j + 1) * tw).
struct TileGrid {
  int64_t R, C, th, tw;
  TileGrid(const Tensor& t, Float8Tiles tiles) {
    C = t.ndim() == 0 ? 1 : t.dim(-1);
    R = C == 0 ? 0 : t.numel() / C;
    th = tiles.is_whole() ? R : tiles.rows;
    tw = tiles.is_whole() ? C : tiles.cols;
  }
  int64_t tile_rows() const { return th == 0 ? 0 : R / th; }
  int64_t tile_cols() const { return tw == 0 ? 0 : C / tw; }
  int64_t tiles() const { return tile_rows() * tile_cols(); }
  // Calls fn(element index) over tile t's elements, row by row.
  template <typename Fn>
  void each(int64_t t, Fn&& fn) const {
    const int64_t r0 = t / tile_cols() * th, c0 = t % tile_cols() * tw;
    for (int64_t r = r0; r < r0 + th; ++r)
      for (int64_t c = c0; c < c0 + tw; ++c) fn(r * C + c);
  }
};

}  // namespace

void float8_amax(Tensor amax, Tensor x) {
  float result = *amax.ptr<float>();
  dispatch_storage(x.dtype, [&]<typename S>() {
    const S* p = storage_ptr<S>(x);
    const int64_t n = x.numel();
#pragma omp parallel
    {
      float local = 0;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < n; ++i) local = float8_math::amax_of(local, std::fabs(static_cast<float>(load(p[i]))));
#pragma omp critical
      result = float8_math::amax_of(result, local);
    }
  });
  *amax.ptr<float>() = result;
}

void float8_scale(Tensor scale, Tensor amax, Format format, int margin, bool pow2, Float8Fallback fallback) {
  float* s = scale.ptr<float>();
  const float* a = amax.ptr<float>();
  const bool one = fallback == Float8Fallback::one;
  for (int64_t i = 0; i < amax.numel(); ++i)
    s[i] = float8_math::scale_from_amax(a[i], format, margin, pow2, one ? 1.0f : s[i]);
}

void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax) {
  const Format format = float8_format(q.data.dtype);
  const float s = *scale.ptr<float>();
  *q.scale_inv.ptr<float>() = 1.0f / s;
  float result = amax.defined() ? *amax.ptr<float>() : 0.0f;
  dispatch_storage(x.dtype, [&]<typename S>() {
    const S* in = storage_ptr<S>(x);
    uint8_t* out = q.data.ptr<uint8_t>();
    const int64_t n = x.numel();
#pragma omp parallel
    {
      float local = 0;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(load(in[i]));
        local = float8_math::amax_of(local, std::fabs(v));
        out[i] = float8_math::encode_satfinite(v * s, format);
      }
#pragma omp critical
      result = float8_math::amax_of(result, local);
    }
  });
  if (amax.defined()) *amax.ptr<float>() = result;
}

void float8_quantize_tiles(Float8Tensor q, Tensor x) {
  const Format format = float8_format(q.data.dtype);
  const TileGrid grid(x, q.tiles);
  dispatch_storage(x.dtype, [&]<typename S>() {
    const S* in = storage_ptr<S>(x);
    uint8_t* out = q.data.ptr<uint8_t>();
    float* scale_inv = q.scale_inv.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < grid.tiles(); ++t) {
      float amax = 0;
      grid.each(t, [&](int64_t i) { amax = float8_math::amax_of(amax, std::fabs(static_cast<float>(load(in[i])))); });
      const float s = float8_math::scale_from_amax(amax, format, 0, /*pow2=*/true, 1.0f);
      scale_inv[t] = 1.0f / s;
      grid.each(t, [&](int64_t i) { out[i] = float8_math::encode_satfinite(static_cast<float>(load(in[i])) * s, format); });
    }
  });
}

void float8_dequantize(Tensor out, Float8Tensor q) {
  const std::array<float, 256>& values = values_of(float8_format(q.data.dtype));
  const TileGrid grid(out, q.tiles);
  dispatch_storage(out.dtype, [&]<typename S>() {
    const uint8_t* in = q.data.ptr<uint8_t>();
    S* o = storage_ptr<S>(out);
    const float* scale_inv = q.scale_inv.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < grid.R; ++r) {
      const float* row_scales = scale_inv + r / grid.th * grid.tile_cols();
      for (int64_t c = 0; c < grid.C; ++c)
        store(o + r * grid.C + c, static_cast<compute_t<S>>(values[in[r * grid.C + c]] * row_scales[c / grid.tw]));
    }
  });
}

}  // namespace dt::kernels::cpu
