// The CUDA classifier and optimizer ops against the CPU ops on the same inputs:
// cross_entropy_forward and cross_entropy_forward_backward, adamw_update, sum_of_squares and
// all_finite. Shapes include sizes that are not multiples of the block or the 16-byte vector
// width, views that start off a 16-byte boundary (the kernels' scalar paths) and padding
// columns filled with NaN (never read). Each test skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/reduce.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;
using testing::same_bits;
using testing::to_gpu;
using testing::to_host;
using testing::values;

// ---- sum_of_squares, all_finite -----------------------------------------------------------

TEST(CudaReduce, SumOfSquaresMatchesTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : {DType::f32, DType::f64})
    for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{100003}, int64_t{(1 << 20) + 5}})
      for (const bool misaligned : {false, true}) {
        const OwnedTensor x = testing::random_normal(dtype, {n}, 11 + n);
        const OwnedTensor gpu = to_gpu(x.t, /*offset=*/misaligned ? 1 : 0);
        const double cpu_sum = sum_of_squares(x.t), gpu_sum = sum_of_squares(gpu.t);
        // Both square exactly and add in double, in different orders: each side's error is
        // below (its longest chain of additions) * 2^-53 of the sum of these positive terms,
        // about 5e-13 for the CPU's 256 blocks of n/256; 1e-12 leaves room for both.
        EXPECT_NEAR(gpu_sum, cpu_sum, 1e-12 * cpu_sum) << dtype_name(dtype) << " n = " << n
                                                       << (misaligned ? " misaligned" : "");
      }
}

TEST(CudaReduce, SumOfSquaresRepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  const OwnedTensor x = testing::random_normal(DType::f32, {3'000'017}, 5);
  const OwnedTensor gpu = to_gpu(x.t);
  const double first = sum_of_squares(gpu.t);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(sum_of_squares(gpu.t), first);
  EXPECT_EQ(sum_of_squares(Tensor{.data = gpu.t.data, .dtype = DType::f32, .shape = {0}, .device = Device::cuda}),
            0.0);
}

TEST(CudaReduce, AllFiniteFindsInfAndNaNAnywhere) {
  DT_SKIP_WITHOUT_CUDA();
  for (const DType dtype : {DType::f32, DType::f64}) {
    const int64_t n = 100003;
    for (const int64_t where : {int64_t{0}, int64_t{4097}, n - 1})
      for (const double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()}) {
        OwnedTensor x = testing::random_normal(dtype, {n}, 3);
        EXPECT_TRUE(all_finite(to_gpu(x.t).t));
        if (dtype == DType::f64) x.ptr<double>()[where] = bad;
        else x.ptr<float>()[where] = static_cast<float>(bad);
        EXPECT_FALSE(all_finite(to_gpu(x.t).t)) << dtype_name(dtype) << " " << bad << " at " << where;
        EXPECT_FALSE(all_finite(to_gpu(x.t, /*offset=*/1).t));
        EXPECT_EQ(all_finite(to_gpu(x.t).t), all_finite(x.t));
      }
  }
}

// ---- adamw_update -------------------------------------------------------------------------

TEST(CudaAdamW, OneStepMatchesTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1003}, int64_t{65536 + 3}})
    for (const bool misaligned : {false, true})
      for (const int64_t step : {int64_t{1}, int64_t{10}}) {
        const AdamWStep s{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                          .step = step, .grad_scale = 0.5f};
        const OwnedTensor param = testing::random_normal(DType::f32, {n}, 1);
        const OwnedTensor grad = testing::random_normal(DType::f32, {n}, 2);
        const OwnedTensor m = testing::random_normal(DType::f32, {n}, 3, 0.1);
        OwnedTensor v = testing::random_normal(DType::f32, {n}, 4, 0.01);
        for (int64_t i = 0; i < n; ++i) v.ptr<float>()[i] = std::fabs(v.ptr<float>()[i]);
        // The starting state, kept for the bounds.
        const std::vector<double> p0 = values(param.t), g0 = values(grad.t), m0 = values(m.t), v0 = values(v.t);

        const int64_t offset = misaligned ? 1 : 0;  // elements off a 16-byte boundary
        OwnedTensor gp = to_gpu(param.t, offset), gg = to_gpu(grad.t, offset), gm = to_gpu(m.t, offset),
                    gv = to_gpu(v.t, offset);
        adamw_update(param.t, grad.t, m.t, v.t, s);
        adamw_update(gp.t, gg.t, gm.t, gv.t, s);
        const std::vector<double> p_cpu = values(param.t), m_cpu = values(m.t), v_cpu = values(v.t);
        const std::vector<double> p_gpu = values(to_host(gp.t).t), m_gpu = values(to_host(gm.t).t),
                                  v_gpu = values(to_host(gv.t).t);

        // The GPU rounds each operation of the unfused formula; the CPU build may fuse a multiply
        // and an add (GCC contracts by default), which moves a result by at most an ulp of the
        // terms it adds. So each value may differ by a few ulps of the magnitudes that formed
        // it: for m and v those of its two terms, for param those of param and of the step
        // (at most about lr / (1 - beta1^step) times |m| / sqrt(v / (1 - beta2^step)), below
        // 10 lr / (1 - beta1^step) for these moments). A wrong formula moves param by ~lr.
        const double step_size = s.lr / (1.0 - std::pow(0.9, static_cast<double>(step)));
        for (int64_t i = 0; i < n; ++i) {
          const double g = g0[i] * s.grad_scale;
          const double m_terms = std::fabs(0.9 * m0[i]) + std::fabs(0.1 * g);
          const double v_terms = 0.95 * v0[i] + 0.05 * g * g;
          ASSERT_NEAR(m_gpu[i], m_cpu[i], 4 * FLT_EPSILON * m_terms) << "m[" << i << "] n = " << n;
          ASSERT_NEAR(v_gpu[i], v_cpu[i], 4 * FLT_EPSILON * v_terms) << "v[" << i << "] n = " << n;
          ASSERT_NEAR(p_gpu[i], p_cpu[i], 8 * FLT_EPSILON * (std::fabs(p0[i]) + 10 * step_size))
              << "param[" << i << "] n = " << n << " step " << step << (misaligned ? " misaligned" : "");
        }
      }
}

TEST(CudaAdamW, RepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  const int64_t n = 100003;
  const OwnedTensor param = testing::random_normal(DType::f32, {n}, 1);
  const OwnedTensor grad = testing::random_normal(DType::f32, {n}, 2);
  const OwnedTensor zero = testing::zeros(DType::f32, {n});
  std::vector<OwnedTensor> results;
  for (int run = 0; run < 2; ++run) {
    OwnedTensor p = to_gpu(param.t), g = to_gpu(grad.t), m = to_gpu(zero.t), v = to_gpu(zero.t);
    for (int64_t step = 1; step <= 3; ++step)
      adamw_update(p.t, g.t, m.t, v.t, {.lr = 1e-3f, .weight_decay = 0.1f, .step = step});
    results.push_back(to_host(p.t));
  }
  EXPECT_TRUE(same_bits(results[0].t, results[1].t));
}

// Ranges of a flat buffer, as the optimizer passes them: many (more than one launch's 256),
// of sizes 1 to 40, with gaps of 0 to 5 elements, so that starts fall on and off multiples of 4.
std::vector<FlatRange> many_ranges(int count) {
  std::vector<FlatRange> ranges;
  int64_t at = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t size = 1 + (r * 7) % 40;
    append_range(ranges, {at, at + size});
    at += size + (r * 5) % 6;
  }
  return ranges;
}

// The multi-tensor form in one launch per 256 ranges gives each element the bits the
// one-tensor form gives it (the same f32 operations) and leaves the gaps alone; with every
// range on a multiple of 4 it takes the float4 path, otherwise the element path.
TEST(CudaAdamW, RangesMatchOneTensorCallsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  std::vector<FlatRange> aligned;
  for (int r = 0; r < 300; ++r) aligned.push_back({64 * r, 64 * r + 1 + (r * 13) % 63});
  for (const std::vector<FlatRange>& ranges : {many_ranges(600), aligned}) {
    const int64_t n = ranges.back().end + 3;
    const AdamWStep s{.lr = 1e-2f, .weight_decay = 0.1f, .step = 2, .grad_scale = 0.5f};
    const OwnedTensor param = testing::random_normal(DType::f32, {n}, 1), grad = testing::random_normal(DType::f32, {n}, 2);
    OwnedTensor v = testing::random_normal(DType::f32, {n}, 4, 0.01);
    for (int64_t i = 0; i < n; ++i) v.ptr<float>()[i] = std::fabs(v.ptr<float>()[i]);
    OwnedTensor p1 = to_gpu(param.t), g = to_gpu(grad.t), m1 = to_gpu(v.t), v1 = to_gpu(v.t);
    OwnedTensor p2 = to_gpu(param.t), m2 = to_gpu(v.t), v2 = to_gpu(v.t);
    adamw_update(p1.t, g.t, m1.t, v1.t, ranges, s);
    for (const FlatRange& r : ranges) {
      const auto part = [&](const OwnedTensor& t) { return t.t.slice_rows(r.begin, r.size()); };
      adamw_update(part(p2), part(g), part(m2), part(v2), s);
    }
    EXPECT_TRUE(same_bits(to_host(p1.t).t, to_host(p2.t).t)) << ranges.size() << " ranges";
    EXPECT_TRUE(same_bits(to_host(m1.t).t, to_host(m2.t).t));
    EXPECT_TRUE(same_bits(to_host(v1.t).t, to_host(v2.t).t));
    EXPECT_FALSE(same_bits(to_host(p1.t).t, param.t));
  }
}

TEST(CudaReduce, SumOfSquaresOverRangesMatchesTheCpuAndRepeats) {
  DT_SKIP_WITHOUT_CUDA();
  const std::vector<FlatRange> ranges = many_ranges(700);
  const int64_t n = ranges.back().end + 3;
  OwnedTensor x = testing::random_normal(DType::f32, {n}, 8);
  for (int64_t i = 0; i < ranges.front().begin; ++i) x.ptr<float>()[i] = 1e30f;  // never counted
  for (size_t r = 1; r < ranges.size(); ++r)
    for (int64_t i = ranges[r - 1].end; i < ranges[r].begin; ++i) x.ptr<float>()[i] = 1e30f;
  for (const bool misaligned : {false, true}) {
    const OwnedTensor gpu = to_gpu(x.t, misaligned ? 1 : 0);
    const double cpu_sum = sum_of_squares(x.t, ranges), gpu_sum = sum_of_squares(gpu.t, ranges);
    // As SumOfSquaresMatchesTheCpu: exact squares added in double in two orders.
    EXPECT_NEAR(gpu_sum, cpu_sum, 1e-12 * cpu_sum) << (misaligned ? "misaligned" : "");
    EXPECT_EQ(sum_of_squares(gpu.t, ranges), gpu_sum);
  }
}

// ---- cross_entropy ------------------------------------------------------------------------

struct ClassifierCase {
  int64_t N, V, Vp;
};

// Rows cover: a target at 0, at V - 1 (inside the last, partial 16-byte vector when V is not
// a multiple of the width), in the middle, and ignored rows.
OwnedTensor targets_for(const ClassifierCase& c) {
  OwnedTensor t = testing::zeros(DType::i32, {c.N});
  for (int64_t n = 0; n < c.N; ++n) {
    const int32_t choices[4] = {0, static_cast<int32_t>(c.V - 1), kIgnoreIndex, static_cast<int32_t>(c.V / 2)};
    t.ptr<int32_t>()[n] = choices[n % 4];
  }
  return t;
}

// Logits in `dtype` with a standard deviation of 3, a dominant logit at the last real column
// of some rows (so losing the row's tail would change the loss far beyond the bound), and NaN
// in the padding columns, which must never be read.
OwnedTensor logits_for(const ClassifierCase& c, DType dtype, uint64_t seed) {
  OwnedTensor x = testing::random_normal(DType::f32, {c.N, c.Vp}, seed, 3.0);
  float* p = x.ptr<float>();
  for (int64_t n = 0; n < c.N; ++n) {
    if (n % 3 == 1) p[n * c.Vp + c.V - 1] = 12.0f;
    for (int64_t v = c.V; v < c.Vp; ++v) p[n * c.Vp + v] = std::numeric_limits<float>::quiet_NaN();
  }
  if (dtype == DType::f32) return x;
  if (dtype == DType::f64) return testing::converted(x.t, DType::f64);
  return testing::rounded(x.t, dtype);
}

const ClassifierCase kClassifierCases[] = {
    {6, 37, 40},         // tiny; Vp keeps f32 and 16-bit rows 16-byte aligned
    {5, 1000, 1003},     // odd Vp: element-by-element path
    {4, 50257, 50304},   // GPT-2's vocabulary and padding
    {3, 128256, 128256}, // Llama 3's vocabulary, no padding
};

// The bound on |loss_gpu - loss_cpu| for a row of V columns in f32: the two sums of V
// exponentials are added in different orders (the CPU's SIMD lanes each add ~V/16 terms in
// sequence, the GPU's threads ~V/512 and then a tree; the GPU also rescales its running sums),
// so they differ relatively by ~sqrt(V) ulps, which log turns into an absolute difference; plus
// a few ulps of the loss from expf (GPU, 2 ulps) against vec_exp (CPU, 1.4 ulps) and the log.
double f32_sum_relative_bound(int64_t V) { return 1e-6 + 2e-7 * std::sqrt(static_cast<double>(V)); }

void expect_losses_near(const Tensor& cpu, const Tensor& gpu, int64_t V, DType dtype, const char* what) {
  const std::vector<double> a = values(cpu), b = values(to_host(gpu).t);
  for (size_t n = 0; n < a.size(); ++n) {
    const double bound = dtype == DType::f64 ? 1e-12 * (1 + std::fabs(a[n]))
                                             : f32_sum_relative_bound(V) + 8 * FLT_EPSILON * std::fabs(a[n]);
    EXPECT_NEAR(b[n], a[n], bound) << what << " " << dtype_name(dtype) << " V = " << V << " row " << n;
  }
}

TEST(CudaCrossEntropy, ForwardMatchesTheCpuAndLeavesTheLogits) {
  DT_SKIP_WITHOUT_CUDA();
  for (const ClassifierCase& c : kClassifierCases)
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
      const OwnedTensor targets = targets_for(c);
      const OwnedTensor logits = logits_for(c, dtype, 7);
      const DType loss_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
      const OwnedTensor cpu_losses = testing::zeros(loss_dtype, {c.N});
      const OwnedTensor gpu_losses = to_gpu(cpu_losses.t);
      const OwnedTensor gpu_logits = to_gpu(logits.t);
      cross_entropy_forward(cpu_losses.t, logits.t, targets.t, c.V);
      cross_entropy_forward(gpu_losses.t, gpu_logits.t, targets.t, c.V);
      expect_losses_near(cpu_losses.t, gpu_losses.t, c.V, dtype, "forward");
      EXPECT_TRUE(same_bits(to_host(gpu_logits.t).t, logits.t)) << "forward wrote the logits";
      const std::vector<double> gpu_loss_values = values(to_host(gpu_losses.t).t);
      for (int64_t n = 0; n < c.N; ++n) {
        if (targets.ptr<int32_t>()[n] == kIgnoreIndex) {
          EXPECT_EQ(gpu_loss_values[n], 0.0) << "ignored row " << n;
        }
      }
    }
}

TEST(CudaCrossEntropy, FusedBackwardMatchesTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  const float loss_scale = 1.0f / 3.0f;  // the 1 / (B * T) of a mean, not a power of two
  for (const ClassifierCase& c : kClassifierCases)
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64})
      for (const bool misaligned : {false, true}) {
        const OwnedTensor targets = targets_for(c);
        const OwnedTensor cpu_logits = logits_for(c, dtype, 8);
        const OwnedTensor gpu_logits = to_gpu(cpu_logits.t, /*offset=*/misaligned ? 1 : 0);
        const DType loss_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
        const OwnedTensor cpu_losses = testing::zeros(loss_dtype, {c.N});
        const OwnedTensor gpu_losses = to_gpu(cpu_losses.t);
        cross_entropy_forward_backward(cpu_losses.t, cpu_logits.t, targets.t, c.V, loss_scale);
        cross_entropy_forward_backward(gpu_losses.t, gpu_logits.t, targets.t, c.V, loss_scale);
        expect_losses_near(cpu_losses.t, gpu_losses.t, c.V, dtype, "forward_backward");

        const OwnedTensor gpu_grad = to_host(gpu_logits.t);
        const std::vector<double> a = values(cpu_logits.t), b = values(gpu_grad.t);
        for (int64_t n = 0; n < c.N; ++n) {
          const int32_t target = targets.ptr<int32_t>()[n];
          for (int64_t v = c.V; v < c.Vp; ++v) ASSERT_EQ(b[n * c.Vp + v], 0.0) << "padding column " << v;
          if (target == kIgnoreIndex) {
            for (int64_t v = 0; v < c.V; ++v) ASSERT_EQ(b[n * c.Vp + v], 0.0) << "ignored row " << n;
          }
        }
        if (dtype == DType::bf16 || dtype == DType::f16) {
          // Both round an f32 gradient once, and the two f32 values differ by far less than
          // half an ulp of the 16-bit type: at most one rounding step apart.
          EXPECT_LE(testing::max_ulp_distance(cpu_logits.t, gpu_grad.t), 1)
              << dtype_name(dtype) << " V = " << c.V << (misaligned ? " misaligned" : "");
          continue;
        }
        // f32: loss_scale * p[v] with p's relative error that of the sum (above) plus a few ulps
        // of exp; at the target, p - 1 is formed after the product, so the error is also
        // relative to loss_scale * p there, plus an ulp of loss_scale.
        const double relative = dtype == DType::f64 ? 1e-12 : f32_sum_relative_bound(c.V) + 8 * FLT_EPSILON;
        const double ulp_of_scale = dtype == DType::f64 ? DBL_EPSILON : FLT_EPSILON;
        for (int64_t n = 0; n < c.N; ++n) {
          const int32_t target = targets.ptr<int32_t>()[n];
          if (target == kIgnoreIndex) continue;
          for (int64_t v = 0; v < c.V; ++v) {
            const int64_t i = n * c.Vp + v;
            const double scaled_p = a[i] + (v == target ? loss_scale : 0.0);
            ASSERT_NEAR(b[i], a[i], relative * std::fabs(scaled_p) + 2 * ulp_of_scale * loss_scale)
                << dtype_name(dtype) << " V = " << c.V << " row " << n << " column " << v;
          }
        }
      }
}

TEST(CudaCrossEntropy, RepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  const ClassifierCase c{8, 50257, 50304};
  const OwnedTensor targets = targets_for(c);
  const OwnedTensor logits = logits_for(c, DType::bf16, 9);
  std::vector<OwnedTensor> grads, losses;
  for (int run = 0; run < 2; ++run) {
    const OwnedTensor x = to_gpu(logits.t);
    const OwnedTensor l = to_gpu(testing::zeros(DType::f32, {c.N}).t);
    cross_entropy_forward_backward(l.t, x.t, targets.t, c.V, 1.0f / 8);
    grads.push_back(to_host(x.t));
    losses.push_back(to_host(l.t));
  }
  EXPECT_TRUE(same_bits(grads[0].t, grads[1].t));
  EXPECT_TRUE(same_bits(losses[0].t, losses[1].t));
}

}  // namespace
}  // namespace dt::kernels
