#include "kernels/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/storage.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

struct Case {
  const char* name;
  int B, T, NH, NKV, HS;
  double input_std = 1;  // std of q, k, v; larger makes the softmax peakier
  // A tensor-parallel rank's heads (kernels/attention.h) when group > 0, else a whole model's.
  int group = 0, phase = 0;
  int qkv_width() const { return (NH + 2 * NKV) * HS; }
  AttentionHeads heads() const { return group > 0 ? AttentionHeads(NH, NKV, group, phase) : AttentionHeads(NH, NKV); }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " B=" << c.B << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV << " HS=" << c.HS
      << " group=" << c.heads().group << " phase=" << c.phase;
}

// Storage for the op's arguments: the tests own plain vectors and pass views of them.
template <typename T>
Tensor view(std::vector<T>& v, Shape shape) {
  return Tensor{.data = v.data(), .dtype = dtype_of<T>(), .shape = shape};
}

template <typename T>
std::vector<T> random_vector(int64_t count, double std, std::string_view stream) {
  const ElementRng rng(11, stream);
  std::vector<T> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<T>(std * rng.normal(i));
  return v;
}

template <typename To, typename From>
std::vector<To> convert(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// The whole computation, T x T scores materialized per head, in double. Its softmax backward
// is the textbook dS = P * (dP - sum_j P dP), not the kernel's dout . out shortcut.
// out_mag and dqkv_mag are the same sums with every term replaced by its magnitude (and the row
// term D by sum_d |dout_d| out_mag_d): what the 16-bit tests' error bounds are proportional to.
struct Naive {
  std::vector<double> out, lse, dqkv;
  std::vector<double> out_mag, dqkv_mag;
};

Naive naive_attention(const Case& c, const std::vector<double>& qkv, const std::vector<double>& dout) {
  const int R = c.qkv_width(), C = c.NH * c.HS, T = c.T;
  const double scale = 1 / std::sqrt(double(c.HS));
  Naive r{std::vector<double>(size_t(c.B) * T * C), std::vector<double>(size_t(c.B) * c.NH * T),
          std::vector<double>(qkv.size()), std::vector<double>(size_t(c.B) * T * C), std::vector<double>(qkv.size())};
  std::vector<double> P(size_t(T) * T), dS(size_t(T) * T);
  for (int b = 0; b < c.B; ++b) {
    for (int h = 0; h < c.NH; ++h) {
      const int g = c.heads().kv_of(h);
      auto q = [&](int i) { return &qkv[(size_t(b) * T + i) * R + h * c.HS]; };
      auto k = [&](int j) { return &qkv[(size_t(b) * T + j) * R + (c.NH + g) * c.HS]; };
      auto v = [&](int j) { return &qkv[(size_t(b) * T + j) * R + (c.NH + c.NKV + g) * c.HS]; };
      auto dq = [&](int i) { return &r.dqkv[(size_t(b) * T + i) * R + h * c.HS]; };
      auto dk = [&](int j) { return &r.dqkv[(size_t(b) * T + j) * R + (c.NH + g) * c.HS]; };
      auto dv = [&](int j) { return &r.dqkv[(size_t(b) * T + j) * R + (c.NH + c.NKV + g) * c.HS]; };
      auto o = [&](int i) { return &r.out[(size_t(b) * T + i) * C + h * c.HS]; };
      auto o_mag = [&](int i) { return &r.out_mag[(size_t(b) * T + i) * C + h * c.HS]; };
      auto dq_mag = [&](int i) { return &r.dqkv_mag[(size_t(b) * T + i) * R + h * c.HS]; };
      auto dk_mag = [&](int j) { return &r.dqkv_mag[(size_t(b) * T + j) * R + (c.NH + g) * c.HS]; };
      auto dv_mag = [&](int j) { return &r.dqkv_mag[(size_t(b) * T + j) * R + (c.NH + c.NKV + g) * c.HS]; };
      auto dO = [&](int i) { return &dout[(size_t(b) * T + i) * C + h * c.HS]; };
      for (int i = 0; i < T; ++i) {
        double max = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < c.HS; ++d) s += q(i)[d] * k(j)[d];
          P[i * T + j] = s * scale;
          max = std::max(max, s * scale);
        }
        for (int j = 0; j <= i; ++j) sum += std::exp(P[i * T + j] - max);
        r.lse[(size_t(b) * c.NH + h) * T + i] = max + std::log(sum);
        for (int j = 0; j <= i; ++j) {
          P[i * T + j] = std::exp(P[i * T + j] - max) / sum;
          for (int d = 0; d < c.HS; ++d) o(i)[d] += P[i * T + j] * v(j)[d];
          for (int d = 0; d < c.HS; ++d) o_mag(i)[d] += P[i * T + j] * std::fabs(v(j)[d]);
        }
        double d_mag = 0;
        for (int d = 0; d < c.HS; ++d) d_mag += std::fabs(dO(i)[d]) * o_mag(i)[d];
        double p_dp = 0;
        for (int j = 0; j <= i; ++j) {
          double dp = 0;
          for (int d = 0; d < c.HS; ++d) dp += dO(i)[d] * v(j)[d];
          dS[i * T + j] = dp;
          p_dp += P[i * T + j] * dp;
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = P[i * T + j] * (dS[i * T + j] - p_dp) * scale;
          const double ds_mag = P[i * T + j] * (std::fabs(dS[i * T + j]) + d_mag) * scale;
          for (int d = 0; d < c.HS; ++d) {
            dq(i)[d] += ds * k(j)[d];
            dk(j)[d] += ds * q(i)[d];
            dv(j)[d] += P[i * T + j] * dO(i)[d];
            dq_mag(i)[d] += ds_mag * std::fabs(k(j)[d]);
            dk_mag(j)[d] += ds_mag * std::fabs(q(i)[d]);
            dv_mag(j)[d] += P[i * T + j] * std::fabs(dO(i)[d]);
          }
        }
      }
    }
  }
  return r;
}

// One call of forward and backward through the public op, on vectors of T.
template <typename T>
struct OpResult {
  std::vector<T> out, lse, dqkv;
};

template <typename T>
OpResult<T> run_op(const Case& c, std::vector<T> qkv, std::vector<T> dout) {
  const int B = c.B, S = c.T, C = c.NH * c.HS;
  // NaN everywhere first: the op must set every element it owns.
  OpResult<T> r{std::vector<T>(size_t(B) * S * C, NAN), std::vector<T>(size_t(B) * c.NH * S, NAN),
           std::vector<T>(qkv.size(), NAN)};
  attention_forward(view(r.out, {B, S, C}), view(r.lse, {B, c.NH, S}), view(qkv, {B, S, c.qkv_width()}), c.heads());
  attention_backward(view(r.dqkv, {B, S, c.qkv_width()}), view(dout, {B, S, C}), view(qkv, {B, S, c.qkv_width()}),
                     view(r.out, {B, S, C}), view(r.lse, {B, c.NH, S}), c.heads());
  return r;
}

double error_vs(const std::vector<float>& actual, const std::vector<double>& expected) {
  std::vector<float> reference = convert<float>(expected), copy = actual;
  return testing::normalized_max_error(view(copy, {int64_t(copy.size())}),
                                       view(reference, {int64_t(reference.size())}));
}

class AttentionVsNaive : public ::testing::TestWithParam<Case> {};

// f32 against the f64 reference. Errors are normalized by the reference's largest magnitude.
// out and lse: each is a softmax-weighted sum of at most T terms whose f32 rounding (~6e-8 per
// operation, exp within 2 ulp) mostly cancels; measured <= 1e-6 over these cases, bound 1e-5.
// dqkv: dS = P * (dP - D) subtracts two nearly equal numbers for peaked rows, and dq, dk sum
// up to T such terms; measured <= 3e-6 over these cases, bound 3e-5. A wrong mask, scale or
// head mapping gives errors of order 1.
TEST_P(AttentionVsNaive, ForwardBackwardMatchF64Reference) {
  const Case c = GetParam();
  const auto qkv = random_vector<double>(int64_t(c.B) * c.T * c.qkv_width(), c.input_std, "qkv");
  const auto dout = random_vector<double>(int64_t(c.B) * c.T * c.NH * c.HS, 1.0, "dout");
  const Naive expected = naive_attention(c, qkv, dout);
  const OpResult<float> actual = run_op<float>(c, convert<float>(qkv), convert<float>(dout));
  EXPECT_LT(error_vs(actual.out, expected.out), 1e-5);
  EXPECT_LT(error_vs(actual.lse, expected.lse), 1e-5);
  EXPECT_LT(error_vs(actual.dqkv, expected.dqkv), 3e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Attention, AttentionVsNaive,
    ::testing::Values(Case{"mha", 2, 37, 4, 4, 16}, Case{"gqa_odd_head", 2, 70, 6, 2, 13},
                      Case{"mqa_three_tiles", 1, 150, 4, 1, 64}, Case{"one_position", 3, 1, 2, 1, 8},
                      Case{"head_size_one", 1, 65, 2, 2, 1}, Case{"exact_tiles", 2, 128, 2, 1, 20},
                      Case{"gpt2_head", 1, 256, 2, 2, 64},
                      // Scores of std ~9: the running max moves between key tiles.
                      Case{"peaked", 2, 140, 3, 1, 32, 3.0},
                      // Tensor-parallel ranks' heads: query heads 2-3 of a model reading 3 per
                      // key/value head (llama-tiny over 3 ranks), and 3 query heads of 4 per
                      // key/value head starting mid-group.
                      Case{"tp_rank_two_groups", 2, 70, 2, 2, 8, 1.0, 3, 2},
                      Case{"tp_rank_uneven_groups", 1, 130, 3, 2, 16, 1.0, 4, 2}),
    [](const auto& info) { return std::string(info.param.name); });

// Gradients against central finite differences of L = sum(w * out), all in f64 through the
// same op, for every element of qkv (q, k and v parts). With step 1e-6 the truncation error is
// ~1e-12 * |L'''| and the rounding error ~1e-16 * |L| / 1e-6 = 1e-10 here; measured
// normalized error <= 1e-9, bound 1e-7.
TEST(AttentionGradient, MatchesFiniteDifferences) {
  for (const Case& c : {Case{"gqa", 2, 5, 4, 2, 3}, Case{"mqa", 1, 7, 3, 1, 4}, Case{"mha", 1, 4, 2, 2, 5, 2.0}}) {
    SCOPED_TRACE(c.name);
    const int C = c.NH * c.HS;
    std::vector<double> qkv = random_vector<double>(int64_t(c.B) * c.T * c.qkv_width(), c.input_std, "fd.qkv");
    const auto w = random_vector<double>(int64_t(c.B) * c.T * C, 1.0, "fd.w");
    auto loss = [&] {
      std::vector<double> out(w.size()), lse(size_t(c.B) * c.NH * c.T);
      attention_forward(view(out, {c.B, c.T, C}), view(lse, {c.B, c.NH, c.T}), view(qkv, {c.B, c.T, c.qkv_width()}),
                        c.heads());
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += w[i] * out[i];
      return sum;
    };
    const std::vector<double> dqkv = run_op<double>(c, qkv, w).dqkv;
    constexpr double kStep = 1e-6;
    double max_diff = 0, scale = 0;
    for (size_t i = 0; i < qkv.size(); ++i) {
      const double saved = qkv[i];
      qkv[i] = saved + kStep;
      const double up = loss();
      qkv[i] = saved - kStep;
      const double down = loss();
      qkv[i] = saved;
      max_diff = std::max(max_diff, std::fabs((up - down) / (2 * kStep) - dqkv[i]));
      scale = std::max(scale, std::fabs(dqkv[i]));
    }
    EXPECT_LT(max_diff / scale, 1e-7);
  }
}

// Bitwise equal across runs and across thread counts: no atomics, and each gradient is summed
// in an order that does not depend on which thread computes it.
TEST(AttentionDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  const Case c{"gqa", 2, 150, 6, 2, 32};
  const auto qkv = random_vector<float>(int64_t(c.B) * c.T * c.qkv_width(), 1.0, "det.qkv");
  const auto dout = random_vector<float>(int64_t(c.B) * c.T * c.NH * c.HS, 1.0, "det.dout");
  const int threads = omp_get_max_threads();
  const OpResult<float> first = run_op<float>(c, qkv, dout), second = run_op<float>(c, qkv, dout);
  omp_set_num_threads(threads == 1 ? 2 : 1);
  const OpResult<float> other_threads = run_op<float>(c, qkv, dout);
  omp_set_num_threads(threads);
  for (const OpResult<float>* r : {&second, &other_threads}) {
    EXPECT_EQ(0, std::memcmp(first.out.data(), r->out.data(), first.out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(first.lse.data(), r->lse.data(), first.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(first.dqkv.data(), r->dqkv.data(), first.dqkv.size() * sizeof(float)));
  }
}

// 16-bit storage: the op's arguments as stored bits, and the values they hold exactly.
template <typename S>
struct Stored {
  std::vector<S> bits;
  std::vector<double> exact;
  explicit Stored(const std::vector<double>& values) {
    for (const double v : values) {
      S s;
      cpu::store(&s, static_cast<float>(v));
      bits.push_back(s);
      exact.push_back(cpu::load(s));
    }
  }
};

template <typename S>
Tensor view16(std::vector<S>& v, Shape shape) {
  return Tensor{.data = v.data(), .dtype = cpu::dtype_of_storage<S>(), .shape = shape};
}

template <typename S>
struct OpResult16 {
  std::vector<S> out, dqkv;
  std::vector<float> lse;
};

template <typename S>
OpResult16<S> run_op16(const Case& c, std::vector<S> qkv, std::vector<S> dout) {
  const int B = c.B, T = c.T, C = c.NH * c.HS;
  // All ones (a NaN in both formats) first: the op must set every element it owns.
  OpResult16<S> r{std::vector<S>(size_t(B) * T * C, S{0xffff}), std::vector<S>(qkv.size(), S{0xffff}),
                  std::vector<float>(size_t(B) * c.NH * T, NAN)};
  attention_forward(view16(r.out, {B, T, C}), view(r.lse, {B, c.NH, T}), view16(qkv, {B, T, c.qkv_width()}), c.heads());
  attention_backward(view16(r.dqkv, {B, T, c.qkv_width()}), view16(dout, {B, T, C}),
                     view16(qkv, {B, T, c.qkv_width()}), view16(r.out, {B, T, C}), view(r.lse, {B, c.NH, T}), c.heads());
  return r;
}

// The worst over the elements of |actual - expected| / (k_u * u * mag + f32_fraction * max
// |expected| + floor): at most 1 when every element is within its bound.
template <typename S>
double worst_ratio(const std::vector<S>& actual, const std::vector<double>& expected, const std::vector<double>& mag,
                   double k_u, double u, double f32_fraction, double floor) {
  double scale = 0, worst = 0;
  for (const double e : expected) scale = std::max(scale, std::fabs(e));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double bound = k_u * u * mag[i] + f32_fraction * scale + floor;
    const double error = std::fabs(cpu::load(actual[i]) - expected[i]);
    worst = std::max(worst, std::isnan(error) ? INFINITY : error / bound);
  }
  return worst;
}

// 16-bit storage against the f64 reference run on the same (rounded) input values, so the input
// rounding is not counted; what is left are the rounding points the header documents. With u
// the unit roundoff of S (2^-8 for bf16, 2^-11 for f16), each rounding moves a value by at
// most u of its magnitude:
//   out = sum_j round(P_j) v_j / l, stored rounded: P's rounding moves each term by u P_j |v_j|
//     and the store moves out by u |out|, so |error| <= 2u * sum_j P_j |v_j| = 2u * out_mag.
//   dv = sum_i round(P_ij) dout_i, stored rounded: likewise 2u * dqkv_mag.
//   dq, dk = scale * sum round(dS) k (or q), dS = P (dP - D): dS's rounding moves each term by
//     u of its magnitude; D = dout . out reads the stored out, off by up to 2u * sum_d |dout_d|
//     out_mag_d = 2u * D_mag, which moves dS by P times that; the store adds u |dq|. In all
//     4u * dqkv_mag, whose terms are scale * P (|dP| + D_mag) |k| (or |q|).
// Added to that: the f32 arithmetic, bounded as in the f32 test (1e-5 of the largest out, 3e-5
// of the largest gradient); and for f16 only, values below 2^-14 (small P and dS) round as
// subnormals, to an absolute 2^-25 rather than a relative u: at most T such terms per element,
// each times one input element (|input| < 16 here, the peaked case's std 3 included), so the
// floor T * 2^-25 * 16. lse is f32 computed in f32 from the exact inputs: 1e-5, as for f32.
// Measured: worst error / bound 0.11-0.68 over these cases; normalized by the largest element,
// bf16 out <= 3.2e-3, dqkv <= 8.5e-3 (peaked); f16 out <= 4e-4, dqkv <= 8e-4.
template <typename S>
void check_16bit_against_naive(const Case& c) {
  SCOPED_TRACE(std::string(dtype_name(cpu::dtype_of_storage<S>())));
  const double u = std::is_same_v<S, cpu::bf16_t> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double floor = std::is_same_v<S, cpu::f16_t> ? c.T * std::ldexp(1.0, -25) * 16 : 0.0;
  const Stored<S> qkv(random_vector<double>(int64_t(c.B) * c.T * c.qkv_width(), c.input_std, "qkv"));
  const Stored<S> dout(random_vector<double>(int64_t(c.B) * c.T * c.NH * c.HS, 1.0, "dout"));
  const Naive expected = naive_attention(c, qkv.exact, dout.exact);
  const OpResult16<S> actual = run_op16<S>(c, qkv.bits, dout.bits);
  const double out_ratio = worst_ratio(actual.out, expected.out, expected.out_mag, 2, u, 1e-5, floor);
  const double dqkv_ratio = worst_ratio(actual.dqkv, expected.dqkv, expected.dqkv_mag, 4, u, 3e-5, floor);
  EXPECT_LE(out_ratio, 1.0);
  EXPECT_LE(dqkv_ratio, 1.0);
  EXPECT_LT(error_vs(actual.lse, expected.lse), 1e-5);
  // For the report: the normalized errors, comparable with the f32 test's.
  std::vector<float> out32, dqkv32;
  for (const S v : actual.out) out32.push_back(cpu::load(v));
  for (const S v : actual.dqkv) dqkv32.push_back(cpu::load(v));
  std::printf("%s %s: out %.3g, dqkv %.3g of the largest; worst error / bound: out %.3f, dqkv %.3f\n",
              std::string(dtype_name(cpu::dtype_of_storage<S>())).c_str(), c.name, error_vs(out32, expected.out),
              error_vs(dqkv32, expected.dqkv), out_ratio, dqkv_ratio);
}

TEST_P(AttentionVsNaive, Bf16AndF16WithinDerivedBounds) {
  check_16bit_against_naive<cpu::bf16_t>(GetParam());
  check_16bit_against_naive<cpu::f16_t>(GetParam());
}

// 16-bit storage keeps the guarantee: same bits across runs and thread counts.
TEST(AttentionDeterminism, Bf16SameBitsAcrossThreadCounts) {
  const Case c{"gqa", 2, 150, 6, 2, 32};
  const Stored<cpu::bf16_t> qkv(random_vector<double>(int64_t(c.B) * c.T * c.qkv_width(), 1.0, "det.qkv"));
  const Stored<cpu::bf16_t> dout(random_vector<double>(int64_t(c.B) * c.T * c.NH * c.HS, 1.0, "det.dout"));
  const int threads = omp_get_max_threads();
  const auto first = run_op16(c, qkv.bits, dout.bits), second = run_op16(c, qkv.bits, dout.bits);
  omp_set_num_threads(threads == 1 ? 2 : 1);
  const auto other_threads = run_op16(c, qkv.bits, dout.bits);
  omp_set_num_threads(threads);
  for (const auto* r : {&second, &other_threads}) {
    EXPECT_EQ(0, std::memcmp(first.out.data(), r->out.data(), first.out.size() * 2));
    EXPECT_EQ(0, std::memcmp(first.lse.data(), r->lse.data(), first.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(first.dqkv.data(), r->dqkv.data(), first.dqkv.size() * 2));
  }
}

TEST(AttentionArguments, RejectMixedDtypes) {
  std::vector<cpu::bf16_t> qkv(2 * 3 * 24), out(2 * 3 * 12), dqkv(2 * 3 * 24), dout(2 * 3 * 12);
  std::vector<cpu::f16_t> out_f16(2 * 3 * 12);
  std::vector<float> lse(2 * 4 * 3), out32(2 * 3 * 12);
  std::vector<cpu::bf16_t> lse16(2 * 4 * 3);
  const Tensor q = view16(qkv, {2, 3, 24}), o = view16(out, {2, 3, 12}), l = view(lse, {2, 4, 3});
  EXPECT_NO_THROW(attention_forward(o, l, q, {4, 2}));
  EXPECT_NO_THROW(attention_backward(view16(dqkv, {2, 3, 24}), view16(dout, {2, 3, 12}), q, o, l, {4, 2}));
  testing::expect_error_naming([&] { attention_forward(view(out32, {2, 3, 12}), l, q, {4, 2}); }, "attention_forward", "out");
  testing::expect_error_naming([&] { attention_forward(view16(out_f16, {2, 3, 12}), l, q, {4, 2}); }, "attention_forward",
                      "out");
  testing::expect_error_naming([&] { attention_forward(o, view16(lse16, {2, 4, 3}), q, {4, 2}); }, "attention_forward", "lse");
  testing::expect_error_naming(
      [&] { attention_backward(view16(dqkv, {2, 3, 24}), view16(out_f16, {2, 3, 12}), q, o, l, {4, 2}); },
      "attention_backward", "dout");
  const Tensor dq = view16(dqkv, {2, 3, 24}), lse_bf16 = view16(lse16, {2, 4, 3});
  testing::expect_error_naming([&] { attention_backward(dq, view16(dout, {2, 3, 12}), q, o, lse_bf16, {4, 2}); },
                      "attention_backward", "lse");
}

TEST(AttentionArguments, RejectBadHeadsAndShapes) {
  std::vector<float> qkv(2 * 3 * 24), out(2 * 3 * 12), lse(2 * 4 * 3);
  // NH = 4, NKV = 2, HS = 3 is valid; the rest are not.
  EXPECT_NO_THROW(attention_forward(view(out, {2, 3, 12}), view(lse, {2, 4, 3}), view(qkv, {2, 3, 24}), {4, 2}));
  EXPECT_THROW(attention_forward(view(out, {2, 3, 12}), view(lse, {2, 4, 3}), view(qkv, {2, 3, 24}), {4, 3}), Error);
  EXPECT_THROW(attention_forward(view(out, {2, 3, 12}), view(lse, {2, 4, 3}), view(qkv, {2, 3, 24}), {5, 1}), Error);
  EXPECT_THROW(attention_forward(view(out, {2, 3, 12}), view(lse, {2, 3, 4}), view(qkv, {2, 3, 24}), {4, 2}), Error);
  EXPECT_THROW(attention_forward(view(out, {2, 3, 12}), view(lse, {2, 4, 3}), view(qkv, {6, 24}), {4, 2}), Error);
  EXPECT_THROW(attention_forward(view(qkv, {2, 3, 12}), view(lse, {2, 4, 3}), view(qkv, {2, 3, 24}), {4, 2}), Error);
}

}  // namespace
}  // namespace dt::kernels
