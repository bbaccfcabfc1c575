#include "kernels/weight_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dt::kernels {

namespace {

constexpr std::string_view kNames[] = {"int8", "q8_0", "q4_0"};

int64_t block_count(size_t values) {
  DT_CHECK(values % kGgufBlock == 0, "GGUF blocks need a multiple of ", kGgufBlock, " values, not ", values);
  return static_cast<int64_t>(values) / kGgufBlock;
}

// roundf (half away from zero), exactly and without a branch, so that a loop of it vectorizes
// (roundf is a library call): x - trunc(x) is exact for every float, and so is twice it.
inline float round_half_away(float x) {
  const float t = std::trunc(x);
  return t + std::trunc(2.0f * (x - t));
}

float amax_of(const float* v, int64_t n) {
  float amax = 0;
  for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(v[j]));
  return amax;
}

// The symmetric 8-bit rule int8 and Q8_0 share, over n values whose largest magnitude is amax
// (theirs, or of the whole row they are a part of): q = roundf(v · (1 / s)) with s = amax / 127
// (1 / s is 0 for zeros). Returns s, in f32.
float quantize_symmetric_8bit(const float* v, int64_t n, float amax, int8_t* q) {
  const float s = amax / 127;
  const float id = s != 0 ? 1.0f / s : 0.0f;
  for (int64_t j = 0; j < n; ++j) q[j] = static_cast<int8_t>(round_half_away(v[j] * id));
  return s;
}

}  // namespace

std::string_view weight_format_name(WeightFormat format) { return kNames[static_cast<int>(format)]; }

WeightFormat parse_weight_format(std::string_view name) {
  for (int f = 0; f < 3; ++f)
    if (kNames[f] == name) return static_cast<WeightFormat>(f);
  throw Error(str("unknown weight format '", name, "': use int8 (per output channel), q8_0 or q4_0 (GGUF's)"));
}

int64_t weight_format_block(WeightFormat format) { return format == WeightFormat::int8 ? 1 : kGgufBlock; }

void quantize_q8_0(std::span<const float> x, std::span<BlockQ8_0> out) {
  const int64_t blocks = block_count(x.size());
  DT_CHECK(static_cast<int64_t>(out.size()) == blocks);
  for (int64_t b = 0; b < blocks; ++b)
    out[b].d = float_to_f16(quantize_symmetric_8bit(x.data() + b * kGgufBlock, kGgufBlock,
                                                    amax_of(x.data() + b * kGgufBlock, kGgufBlock), out[b].qs));
}

void dequantize_q8_0(std::span<const BlockQ8_0> blocks, std::span<float> out) {
  DT_CHECK(out.size() == blocks.size() * kGgufBlock);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const float d = f16_to_float(blocks[b].d);
    for (int64_t j = 0; j < kGgufBlock; ++j) out[b * kGgufBlock + j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void quantize_q4_0(std::span<const float> x, std::span<BlockQ4_0> out) {
  const int64_t blocks = block_count(x.size());
  DT_CHECK(static_cast<int64_t>(out.size()) == blocks);
  constexpr int64_t half = kGgufBlock / 2;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x.data() + b * kGgufBlock;
    float amax = 0, max = 0;
    for (int64_t j = 0; j < kGgufBlock; ++j)
      if (amax < std::fabs(v[j])) amax = std::fabs(v[j]), max = v[j];
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = float_to_f16(d);
    // w · id rounded, then + 8.5 rounded, then toward zero (not fused: the header says why).
    const auto nibble = [&](float w) { return static_cast<uint8_t>(std::min(15, static_cast<int>(w * id + 8.5f))); };
    for (int64_t j = 0; j < half; ++j)
      out[b].qs[j] = static_cast<uint8_t>(nibble(v[j]) | (nibble(v[j + half]) << 4));
  }
}

void dequantize_q4_0(std::span<const BlockQ4_0> blocks, std::span<float> out) {
  DT_CHECK(out.size() == blocks.size() * kGgufBlock);
  constexpr int64_t half = kGgufBlock / 2;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const float d = f16_to_float(blocks[b].d);
    float* o = out.data() + b * kGgufBlock;
    for (int64_t j = 0; j < half; ++j) {
      o[j] = static_cast<float>((blocks[b].qs[j] & 0x0f) - 8) * d;
      o[j + half] = static_cast<float>((blocks[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_int8_rows(std::span<const float> w, int64_t rows, std::span<int8_t> q, std::span<float> scales) {
  DT_CHECK(rows > 0 && w.size() % static_cast<size_t>(rows) == 0 && q.size() == w.size() &&
           static_cast<int64_t>(scales.size()) == rows);
  const int64_t cols = static_cast<int64_t>(w.size()) / rows;
  for (int64_t r = 0; r < rows; ++r)
    scales[r] = quantize_symmetric_8bit(w.data() + r * cols, cols, amax_of(w.data() + r * cols, cols), q.data() + r * cols);
}

void dequantize_int8_rows(std::span<const int8_t> q, std::span<const float> scales, std::span<float> out) {
  DT_CHECK(!scales.empty() && q.size() % scales.size() == 0 && out.size() == q.size());
  const size_t cols = q.size() / scales.size();
  for (size_t i = 0; i < q.size(); ++i) out[i] = scales[i / cols] * static_cast<float>(q[i]);
}

void fake_quantize(WeightFormat format, std::span<const float> w, int64_t rows, std::span<float> out,
                   const RowAmaxCompletion& complete_row_amax) {
  DT_CHECK(out.size() == w.size() && rows > 0 && w.size() % static_cast<size_t>(rows) == 0);
  // Group by group (a row for int8, a block of 32 for GGUF's formats), in parallel, each quantized
  // as a file would hold it and read back into its own place: nothing as large as the weight is
  // allocated, and out may be w.
  if (format == WeightFormat::int8) {
    const size_t cols = w.size() / static_cast<size_t>(rows);
    std::vector<float> amax(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) amax[r] = amax_of(w.data() + r * cols, static_cast<int64_t>(cols));
    if (complete_row_amax) complete_row_amax(amax);
#pragma omp parallel
    {
      std::vector<int8_t> q(cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const float scale = quantize_symmetric_8bit(w.data() + r * cols, static_cast<int64_t>(cols), amax[r], q.data());
        dequantize_int8_rows(q, {&scale, 1}, out.subspan(static_cast<size_t>(r) * cols, cols));
      }
    }
    return;
  }
  const int64_t blocks = block_count(w.size());
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const std::span<const float> in = w.subspan(static_cast<size_t>(b * kGgufBlock), kGgufBlock);
    const std::span<float> values = out.subspan(static_cast<size_t>(b * kGgufBlock), kGgufBlock);
    if (format == WeightFormat::q8_0) {
      BlockQ8_0 block;
      quantize_q8_0(in, {&block, 1});
      dequantize_q8_0({&block, 1}, values);
    } else {
      BlockQ4_0 block;
      quantize_q4_0(in, {&block, 1});
      dequantize_q4_0({&block, 1}, values);
    }
  }
}

void fake_quantize(WeightFormat format, Tensor w, Tensor out, const RowAmaxCompletion& complete_row_amax) {
  DT_CHECK(w.device == Device::cpu && out.device == Device::cpu, "fake quantization runs on the host");
  DT_CHECK(w.shape.ndim() == 2 && out.shape == w.shape && out.dtype == w.dtype);
  const int64_t n = w.numel(), rows = w.shape[0];
  if (w.dtype == DType::f32) {
    return fake_quantize(format, {w.ptr<float>(), static_cast<size_t>(n)}, rows, {out.ptr<float>(), static_cast<size_t>(n)},
                         complete_row_amax);
  }
  DT_CHECK(w.dtype == DType::bf16 || w.dtype == DType::f16, "fake quantization of ", dtype_name(w.dtype));
  const bool bf16 = w.dtype == DType::bf16;
  // Tracked: the memory plan counts it (plan/memory.h's qat_workspace_bytes).
  Buffer widened(static_cast<size_t>(n) * sizeof(float), MemTag::workspace, Device::cpu, false);
  const std::span<float> values(static_cast<float*>(widened.data()), static_cast<size_t>(n));
  const uint16_t* in = w.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) values[i] = bf16 ? bf16_to_float(in[i]) : f16_to_float(in[i]);
  fake_quantize(format, values, rows, values, complete_row_amax);
  uint16_t* o = out.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) o[i] = bf16 ? float_to_bf16(values[i]) : float_to_f16(values[i]);
}

}  // namespace dt::kernels
