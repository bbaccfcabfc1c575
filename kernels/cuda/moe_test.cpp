// The mixture-of-experts kernels on the GPU against the CPU ops on the same inputs: routing,
// dispatch, permute and combine, and the grouped linear layer over GPU tensors. Each test skips,
// saying why, without a GPU.
//
// Bounds, with why:
//   routing, f32       the same experts: the logits lie on a grid, so choice values are either
//                      exactly tied (equal logits and biases: equal on every device, ordered by
//                      the same rule) or at least 1e-5 apart (checked), which a few ulps of
//                      difference in the scores cannot reorder;
//                      scores and weights within 1e-6 of the largest, dlogits within 2e-6: CUDA's
//                      expf against glibc's (an ulp or two each) and the warp's sum orders
//                      against the CPU's sequential ones. f64 within 1e-13. Exact ties (equal
//                      logits) and NaN rows give the same experts: equal inputs give equal
//                      scores on each device, and the rank order is the same code.
//   router losses      counts exactly (whole numbers); probs, z and the sigmoid's and z-loss's
//                      gradients within 1e-6 of the largest in f32 (1e-13 in f64): sums over a
//                      sequence's rows split over warps and over a row's experts split over
//                      lanes, against the CPU's sums in order, and CUDA's expf and logf; the
//                      softmax's balance gradient, scale times a count, bit for bit.
//   sigmoid gate       out, dh and dz within 1e-6 of the largest in f32 (1e-13 in f64), 16-bit
//                      outputs within an ulp: CUDA's expf against glibc's in the gate value,
//                      and the warp's sum of dz against the CPU's in order.
//   dispatch           the same row_of, offsets and drop counts: integer work, and a stable sort
//                      under the same order, ties of weights (many, and -0 against +0) included.
//   permute, combine   the same bits for permuted, dx, out and dy: copies, and sums in slot
//                      order with fused multiply-adds on both sides; dweights, a warp's sum over
//                      C against the CPU's, within 1e-6 (f32) or 1e-13 (f64) of the largest.
//   grouped linear     each group the GPU linear op on its rows, bit for bit (the same cuBLASLt
//                      calls); empty groups change nothing.
// Everything repeats bit for bit from one GPU run to the next.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/device.h"
#include "kernels/dispatch.h"
#include "kernels/grouped_linear.h"
#include "kernels/linear.h"
#include "kernels/moe_permute.h"
#include "kernels/moe_route.h"
#include "kernels/moe_router_loss.h"
#include "kernels/sigmoid_gate.h"
#include "tests/cuda_testing.h"
#include "tests/storage_testing.h"

namespace dt::kernels {
namespace {

using testing::copy_to;
using testing::kAllStorage;
using testing::max_error;
using testing::OwnedTensor;
using testing::random_values;
using testing::same_bits;
using testing::to_gpu;
using testing::to_host;
using testing::zeros;

// 1001 tokens: not a multiple of the routing kernels' 4 rows per block.
constexpr int64_t N = 1001;

// ---- routing -----------------------------------------------------------------------------

struct Routed {
  OwnedTensor scores, experts, weights;  // on the host
};

Routed route_on(Device device, const Tensor& logits, const Tensor& bias, const MoeRouting& routing) {
  const int64_t rows = logits.dim(0), E = logits.dim(1), k = routing.top_k;
  const OwnedTensor x = copy_to(logits, device), b = bias.defined() ? copy_to(bias, device) : OwnedTensor{};
  const OwnedTensor scores = copy_to(zeros(logits.dtype, {rows, E}).t, device);
  const OwnedTensor experts = copy_to(zeros(DType::i32, {rows, k}).t, device);
  const OwnedTensor weights = copy_to(zeros(logits.dtype, {rows, k}).t, device);
  moe_route_forward(scores.t, experts.t, weights.t, x.t, b.t, routing);
  return {to_host(scores.t), to_host(experts.t), to_host(weights.t)};
}

OwnedTensor route_backward_on(Device device, const Tensor& dweights, const Tensor& dscores, const Routed& r,
                              const MoeRouting& routing) {
  const OwnedTensor dw = copy_to(dweights, device), ds = dscores.defined() ? copy_to(dscores, device) : OwnedTensor{};
  const OwnedTensor scores = copy_to(r.scores.t, device), experts = copy_to(r.experts.t, device);
  const OwnedTensor dlogits = copy_to(zeros(r.scores.t.dtype, r.scores.t.shape).t, device);
  moe_route_backward(dlogits.t, dw.t, ds.t, scores.t, experts.t, routing);
  return to_host(dlogits.t);
}

// Normal values (std) rounded to multiples of `step`: many exact ties.
OwnedTensor grid_values(DType dtype, Shape shape, uint64_t seed, double std, double step) {
  const OwnedTensor v = testing::random_normal(DType::f64, shape, seed, std);
  for (int64_t i = 0; i < v.t.numel(); ++i) v.ptr<double>()[i] = std::round(v.ptr<double>()[i] / step) * step;
  return testing::converted(v.t, dtype);
}

// The smallest gap between consecutive choice values ranked 0..k in any row (host tensors),
// leaving out pairs of experts with equal logits and biases: their choice values are equal on
// every device, so the tie rule orders them alike.
double min_choice_gap(const Routed& r, const Tensor& logits, const Tensor& bias, int64_t k) {
  const int64_t rows = r.scores.t.dim(0), E = r.scores.t.dim(1);
  const std::vector<double> s = testing::values(r.scores.t), x = testing::values(logits);
  const std::vector<double> b = bias.defined() ? testing::values(bias) : std::vector<double>(E, 0.0);
  double gap = INFINITY;
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<int64_t> order(E);
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    const auto choice = [&](int64_t e) { return s[n * E + e] + b[e]; };
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return choice(i) > choice(j); });
    for (int64_t j = 0; j < std::min(k, E - 1); ++j) {
      const int64_t e = order[j], f = order[j + 1];
      if (x[n * E + e] == x[n * E + f] && b[e] == b[f]) continue;
      gap = std::min(gap, choice(e) - choice(f));
    }
  }
  return gap;
}

struct RoutingCase {
  const char* name;
  int64_t E;
  MoeRouting routing;
  bool bias;
};
const RoutingCase kRoutings[] = {
    {"mixtral", 8, {.score = MoeScore::softmax, .top_k = 2, .renormalize = true}, false},
    {"qwen1.5-moe", 60, {.score = MoeScore::softmax, .top_k = 4, .renormalize = false}, false},
    {"deepseek-v3", 256, {.score = MoeScore::sigmoid, .top_k = 8, .renormalize = true, .route_scale = 2.5f}, true},
    {"every expert", 5, {.score = MoeScore::sigmoid, .top_k = 5, .renormalize = false}, false},
};

TEST(CudaMoeRoute, MatchesTheCpuAndRepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  for (const RoutingCase& c : kRoutings)
    for (const DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      // Logits on a grid of 1/8 and biases of 1/64: exact ties in most rows, and otherwise gaps
      // far wider than the devices' differences (checked).
      const OwnedTensor logits = grid_values(dtype, {N, c.E}, 1, 2.0, 1.0 / 8);
      const OwnedTensor bias = c.bias ? grid_values(dtype, {c.E}, 2, 0.05, 1.0 / 64) : OwnedTensor{};
      const Routed cpu = route_on(Device::cpu, logits.t, bias.t, c.routing);
      ASSERT_GT(min_choice_gap(cpu, logits.t, bias.t, c.routing.top_k), 1e-5);
      const Routed gpu = route_on(Device::cuda, logits.t, bias.t, c.routing);
      EXPECT_TRUE(same_bits(gpu.experts.t, cpu.experts.t));
      // A warp sums a row's softmax in a tree, the CPU in a loop: scores and weights (at most 1, of
      // the largest) differ by a few ulps, under 1e-6 in f32 (8 ulps of 1) and 1e-13 in f64.
      const double forward_bound = dtype == DType::f32 ? 1e-6 : 1e-13;
      EXPECT_LE(max_error(gpu.scores.t, cpu.scores.t), forward_bound);
      EXPECT_LE(max_error(gpu.weights.t, cpu.weights.t), forward_bound);

      const OwnedTensor dweights = random_values(dtype, {N, c.routing.top_k}, 3);
      const OwnedTensor dscores = random_values(dtype, {N, c.E}, 4);
      for (const bool with_dscores : {false, true}) {
        const Tensor extra = with_dscores ? dscores.t : Tensor{};
        const OwnedTensor cpu_d = route_backward_on(Device::cpu, dweights.t, extra, cpu, c.routing);
        const OwnedTensor gpu_d = route_backward_on(Device::cuda, dweights.t, extra, cpu, c.routing);
        // The backward's dot product over E is reduced in another order too, on top of the same
        // scores: twice the forward's f32 bound (moe_route_test.cpp allows the CPU as much).
        EXPECT_LE(max_error(gpu_d.t, cpu_d.t), dtype == DType::f32 ? 2e-6 : 1e-13) << with_dscores;
        const OwnedTensor again = route_backward_on(Device::cuda, dweights.t, extra, cpu, c.routing);
        EXPECT_TRUE(same_bits(again.t, gpu_d.t));
      }
      const Routed again = route_on(Device::cuda, logits.t, bias.t, c.routing);
      EXPECT_TRUE(same_bits(again.scores.t, gpu.scores.t) && same_bits(again.weights.t, gpu.weights.t));
    }
}

TEST(CudaMoeRoute, TiesAndNaNsChooseAsOnTheCpu) {
  DT_SKIP_WITHOUT_CUDA();
  // 70 experts (three per lane for some lanes): row 0 all equal, row 1 two equal plateaus, row 2
  // NaN at a few experts, row 3 all NaN.
  constexpr int64_t E = 70;
  OwnedTensor logits = zeros(DType::f32, {4, E});
  float* x = logits.ptr<float>();
  for (int64_t e = 0; e < E; ++e) {
    x[E + e] = e % 3 == 0 ? 1.0f : 0.5f;
    x[2 * E + e] = e % 11 == 5 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(e % 7);
    x[3 * E + e] = std::numeric_limits<float>::quiet_NaN();
  }
  for (const MoeScore score : {MoeScore::softmax, MoeScore::sigmoid}) {
    const MoeRouting routing{.score = score, .top_k = 9, .renormalize = false};
    const Routed cpu = route_on(Device::cpu, logits.t, Tensor{}, routing);
    const Routed gpu = route_on(Device::cuda, logits.t, Tensor{}, routing);
    EXPECT_TRUE(same_bits(gpu.experts.t, cpu.experts.t)) << static_cast<int>(score);
  }
}

// ---- dispatch ----------------------------------------------------------------------------

struct Dispatched {
  OwnedTensor row_of;  // on the host
  MoeDispatch plan;
};
Dispatched dispatch_on(Device device, const Tensor& experts, const Tensor& weights, int64_t E, int64_t capacity) {
  const OwnedTensor ex = copy_to(experts, device), w = weights.defined() ? copy_to(weights, device) : OwnedTensor{};
  const OwnedTensor row_of = copy_to(zeros(DType::i32, experts.shape).t, device);
  MoeDispatch plan = moe_dispatch(row_of.t, ex.t, w.t, E, capacity);
  return {to_host(row_of.t), std::move(plan)};
}

// Experts skewed toward the low indices and weights in steps of 1/8 (many ties), with -0, +0 and
// NaN among them.
struct Assignments {
  OwnedTensor experts, weights;
};
Assignments skewed_assignments(int64_t tokens, int64_t E, int64_t k) {
  Assignments a{zeros(DType::i32, {tokens, k}), zeros(DType::f32, {tokens, k})};
  const OwnedTensor u = testing::random_normal(DType::f64, {tokens, k}, 5);
  for (int64_t i = 0; i < tokens * k; ++i) {
    // Expert (v^2 E / 3 + j) mod E for slot j and a draw v = |N(0, 1)|: skewed toward the low
    // experts; a token may name one expert twice, which the dispatch allows.
    const double v = std::fabs(testing::element(u.t, i));
    a.experts.ptr<int32_t>()[i] = static_cast<int32_t>(static_cast<int64_t>(v * v * E / 3 + (i % k)) % E);
    const float w = std::round(static_cast<float>(v) * 8) / 8;
    a.weights.ptr<float>()[i] = i % 97 == 0 ? -0.0f : i % 89 == 0 ? std::numeric_limits<float>::quiet_NaN() : w;
  }
  return a;
}

TEST(CudaMoeDispatch, GivesTheCpusRowsExactly) {
  DT_SKIP_WITHOUT_CUDA();
  for (const auto& [E, k] : {std::pair<int64_t, int64_t>{8, 2}, {64, 8}, {256, 8}}) {
    const Assignments a = skewed_assignments(N, E, k);
    for (const int64_t capacity : {int64_t{0}, int64_t{1}, N * k / E, N}) {
      SCOPED_TRACE("E " + std::to_string(E) + ", k " + std::to_string(k) + ", capacity " + std::to_string(capacity));
      const Dispatched cpu = dispatch_on(Device::cpu, a.experts.t, a.weights.t, E, capacity);
      const Dispatched gpu = dispatch_on(Device::cuda, a.experts.t, a.weights.t, E, capacity);
      EXPECT_TRUE(same_bits(gpu.row_of.t, cpu.row_of.t));
      EXPECT_EQ(gpu.plan.offsets, cpu.plan.offsets);
      EXPECT_EQ(gpu.plan.dropped, cpu.plan.dropped);
    }
  }
  // An expert outside [0, E): the same message from the GPU's counts.
  OwnedTensor experts = zeros(DType::i32, {3, 2});
  experts.ptr<int32_t>()[3] = 9;
  const OwnedTensor gpu = to_gpu(experts.t), row_of = to_gpu(zeros(DType::i32, {3, 2}).t);
  const std::string m = testing::error_message([&] { moe_dispatch(row_of.t, gpu.t, Tensor{}, 4, 0); });
  EXPECT_NE(m.find("assignment (token 1, slot 1) names expert 9, outside [0, 4)"), std::string::npos) << m;
}

// ---- the routers' losses -----------------------------------------------------------------

struct RouterStats {
  OwnedTensor counts, probs, z, dscores, dlogits;  // on the host
};

// The statistics of S sequences and both losses' gradients (dlogits from `dlogits_before`).
RouterStats router_losses_on(Device device, const Routed& r, const Tensor& logits, const Tensor& dlogits_before,
                             int64_t S, MoeScore score) {
  const DType dtype = r.scores.t.dtype;
  const int64_t E = r.scores.t.dim(1);
  const OwnedTensor scores = copy_to(r.scores.t, device), experts = copy_to(r.experts.t, device);
  const OwnedTensor x = copy_to(logits, device), dlogits = copy_to(dlogits_before, device);
  const OwnedTensor counts = copy_to(zeros(dtype, {S, E}).t, device), probs = copy_to(zeros(dtype, {S, E}).t, device);
  const OwnedTensor z = copy_to(zeros(dtype, {S}).t, device), dscores = copy_to(zeros(dtype, r.scores.t.shape).t, device);
  moe_router_stats(counts.t, probs.t, z.t, scores.t, experts.t, x.t, score);
  moe_balance_backward(dscores.t, counts.t, scores.t, 0.3f, score);
  moe_z_loss_backward(dlogits.t, x.t, 0.01f);
  return {to_host(counts.t), to_host(probs.t), to_host(z.t), to_host(dscores.t), to_host(dlogits.t)};
}

TEST(CudaMoeRouterLoss, MatchesTheCpuAndRepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t S = 7;  // sequences of 143 rows
  for (const RoutingCase& c : kRoutings)
    for (const DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      const OwnedTensor logits = random_values(dtype, {N, c.E}, 21);
      const Routed routed = route_on(Device::cpu, logits.t, Tensor{}, c.routing);
      const OwnedTensor dlogits = random_values(dtype, {N, c.E}, 22);
      const RouterStats cpu = router_losses_on(Device::cpu, routed, logits.t, dlogits.t, S, c.routing.score);
      const RouterStats gpu = router_losses_on(Device::cuda, routed, logits.t, dlogits.t, S, c.routing.score);
      EXPECT_TRUE(same_bits(gpu.counts.t, cpu.counts.t));
      const double bound = dtype == DType::f32 ? 1e-6 : 1e-13;
      for (const auto& [name, g, h] : {std::tuple{"probs", &gpu.probs, &cpu.probs}, {"z", &gpu.z, &cpu.z},
                                       {"dscores", &gpu.dscores, &cpu.dscores}, {"dlogits", &gpu.dlogits, &cpu.dlogits}})
        EXPECT_LE(max_error(g->t, h->t), bound) << name;
      if (c.routing.score == MoeScore::softmax) {
        EXPECT_TRUE(same_bits(gpu.dscores.t, cpu.dscores.t));
      }
      const RouterStats again = router_losses_on(Device::cuda, routed, logits.t, dlogits.t, S, c.routing.score);
      EXPECT_TRUE(same_bits(again.probs.t, gpu.probs.t) && same_bits(again.z.t, gpu.z.t) &&
                  same_bits(again.dscores.t, gpu.dscores.t) && same_bits(again.dlogits.t, gpu.dlogits.t));
    }
}

// ---- the shared expert's gate -----------------------------------------------------------

struct Gated {
  OwnedTensor out, dh, dz;  // on the host
};

Gated gate_on(Device device, const Tensor& a, const Tensor& h, const Tensor& z, const Tensor& dout) {
  const OwnedTensor ad = copy_to(a, device), hd = copy_to(h, device), zd = copy_to(z, device);
  const OwnedTensor dd = copy_to(dout, device);
  const OwnedTensor out = copy_to(zeros(h.dtype, h.shape).t, device), dh = copy_to(zeros(h.dtype, h.shape).t, device);
  const OwnedTensor dz = copy_to(zeros(z.dtype, z.shape).t, device);
  sigmoid_gate_forward(out.t, ad.t, hd.t, zd.t);
  sigmoid_gate_backward(dh.t, dz.t, dd.t, hd.t, zd.t);
  return {to_host(out.t), to_host(dh.t), to_host(dz.t)};
}

TEST(CudaSigmoidGate, MatchesTheCpuAndRepeatsBitForBit) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t C = 200;
  for (const DType storage : kAllStorage) {
    SCOPED_TRACE(std::string(dtype_name(storage)));
    const DType gate_dtype = storage == DType::f64 ? DType::f64 : DType::f32;
    const OwnedTensor a = random_values(storage, {N, C}, 31), h = random_values(storage, {N, C}, 32);
    const OwnedTensor dout = random_values(storage, {N, C}, 33), z = random_values(gate_dtype, {N}, 34, 3.0);
    const Gated cpu = gate_on(Device::cpu, a.t, h.t, z.t, dout.t), gpu = gate_on(Device::cuda, a.t, h.t, z.t, dout.t);
    if (storage == DType::bf16 || storage == DType::f16) {
      EXPECT_LE(testing::max_ulp_distance(gpu.out.t, cpu.out.t), 1);
      EXPECT_LE(testing::max_ulp_distance(gpu.dh.t, cpu.dh.t), 1);
    } else {
      const double bound = storage == DType::f32 ? 1e-6 : 1e-13;
      EXPECT_LE(max_error(gpu.out.t, cpu.out.t), bound);
      EXPECT_LE(max_error(gpu.dh.t, cpu.dh.t), bound);
    }
    EXPECT_LE(max_error(gpu.dz.t, cpu.dz.t), gate_dtype == DType::f32 ? 1e-6 : 1e-13);
    const Gated again = gate_on(Device::cuda, a.t, h.t, z.t, dout.t);
    EXPECT_TRUE(same_bits(again.out.t, gpu.out.t) && same_bits(again.dh.t, gpu.dh.t) && same_bits(again.dz.t, gpu.dz.t));
  }
}

// ---- permute and combine -----------------------------------------------------------------

TEST(CudaMoePermute, MatchesTheCpuBitForBitAndRepeats) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t E = 16, k = 4;
  const Assignments a = skewed_assignments(N, E, k);
  const OwnedTensor weights = testing::random_normal(DType::f32, {N, k}, 6);  // no NaN: the combine's weights
  for (const int64_t capacity : {int64_t{0}, N * k / E}) {
    const Dispatched d = dispatch_on(Device::cpu, a.experts.t, a.weights.t, E, capacity);
    const int64_t R = d.plan.rows();
    for (const DType dtype : kAllStorage)
      for (const int64_t C : {int64_t{21}, int64_t{64}})
        for (const int64_t offset : {0, 1}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(C) + " offset " +
                       std::to_string(offset) + " capacity " + std::to_string(capacity));
          const DType wtype = accumulation_dtype(dtype);
          const OwnedTensor w = wtype == DType::f64 ? testing::converted(weights.t, DType::f64)
                                                    : testing::converted(weights.t, DType::f32);
          const OwnedTensor x = random_values(dtype, {N, C}, 7), dp = random_values(dtype, {R, C}, 8);
          const OwnedTensor y = random_values(dtype, {R, C}, 9), dout = random_values(dtype, {N, C}, 10);
          const OwnedTensor g_row_of = to_gpu(d.row_of.t), g_w = to_gpu(w.t);
          const OwnedTensor g_x = to_gpu(x.t, offset), g_dp = to_gpu(dp.t, offset), g_y = to_gpu(y.t, offset);
          const OwnedTensor g_dout = to_gpu(dout.t, offset);
          const auto on_both = [&](Shape shape, DType type, auto&& run) {
            OwnedTensor cpu = zeros(type, shape);
            const OwnedTensor gpu = to_gpu(zeros(type, shape).t, offset);
            run(cpu.t, gpu.t);
            return std::pair{to_host(gpu.t), std::move(cpu)};
          };
          const auto [permuted, permuted_cpu] = on_both({R, C}, dtype, [&](Tensor cpu, Tensor gpu) {
            moe_permute_forward(cpu, x.t, d.row_of.t);
            moe_permute_forward(gpu, g_x.t, g_row_of.t);
          });
          EXPECT_TRUE(same_bits(permuted.t, permuted_cpu.t)) << "permuted";
          const auto [dx, dx_cpu] = on_both({N, C}, dtype, [&](Tensor cpu, Tensor gpu) {
            moe_permute_backward(cpu, dp.t, d.row_of.t);
            moe_permute_backward(gpu, g_dp.t, g_row_of.t);
          });
          EXPECT_TRUE(same_bits(dx.t, dx_cpu.t)) << "dx";
          const auto [out, out_cpu] = on_both({N, C}, dtype, [&](Tensor cpu, Tensor gpu) {
            moe_unpermute_forward(cpu, y.t, w.t, d.row_of.t);
            moe_unpermute_forward(gpu, g_y.t, g_w.t, g_row_of.t);
          });
          EXPECT_TRUE(same_bits(out.t, out_cpu.t)) << "out";
          const OwnedTensor dweights_cpu = zeros(wtype, {N, k}), g_dweights = to_gpu(zeros(wtype, {N, k}).t);
          const auto [dy, dy_cpu] = on_both({R, C}, dtype, [&](Tensor cpu, Tensor gpu) {
            moe_unpermute_backward(cpu, dweights_cpu.t, dout.t, y.t, w.t, d.row_of.t);
            moe_unpermute_backward(gpu, g_dweights.t, g_dout.t, g_y.t, g_w.t, g_row_of.t);
          });
          EXPECT_TRUE(same_bits(dy.t, dy_cpu.t)) << "dy";
          const OwnedTensor dweights = to_host(g_dweights.t);
          // dweights is a dot product over C (at most 64 terms) that the GPU splits across threads
          // (kernels/moe_permute.h): a few ulps of the largest, under 1e-6 in f32, 1e-13 in f64.
          EXPECT_LE(max_error(dweights.t, dweights_cpu.t), wtype == DType::f64 ? 1e-13 : 1e-6);
          // Again on the GPU: the same bits.
          moe_unpermute_backward(to_gpu(zeros(dtype, {R, C}).t).t, g_dweights.t, g_dout.t, g_y.t, g_w.t, g_row_of.t);
          EXPECT_TRUE(same_bits(to_host(g_dweights.t).t, dweights.t));
        }
  }
}

// ---- grouped linear ----------------------------------------------------------------------

TEST(CudaGroupedLinear, EachGroupIsTheGpuLinearOpOnItsRows) {
  DT_SKIP_WITHOUT_CUDA();
  constexpr int64_t G = 4, C = 48, OC = 40;
  const std::vector<int64_t> offsets = {0, 100, 100, 357, 360};
  const int64_t R = offsets.back();
  for (const DType dtype : kAllStorage) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType grad = accumulation_dtype(dtype);
    const OwnedTensor inp = to_gpu(random_values(dtype, {R, C}, 1).t);
    const OwnedTensor weight = to_gpu(random_values(dtype, {G, OC, C}, 2, 0.2).t);
    const OwnedTensor dout = to_gpu(random_values(dtype, {R, OC}, 3).t);
    const OwnedTensor dweight0 = testing::random_normal(grad, {G, OC, C}, 4);
    const OwnedTensor out = to_gpu(zeros(dtype, {R, OC}).t), dinp = to_gpu(zeros(dtype, {R, C}).t);
    const OwnedTensor dweight = to_gpu(dweight0.t);
    grouped_linear_forward(out.t, inp.t, weight.t, offsets);
    grouped_linear_backward_input(dinp.t, dout.t, weight.t, offsets);
    grouped_linear_backward_weight(dweight.t, dout.t, inp.t, offsets);
    const OwnedTensor ref_out = to_gpu(zeros(dtype, {R, OC}).t), ref_dinp = to_gpu(zeros(dtype, {R, C}).t);
    const OwnedTensor ref_dweight = to_gpu(dweight0.t);
    const auto group = [](const Tensor& w, int64_t g) { return w.slice_rows(g, 1).reshape({w.dim(1), w.dim(2)}); };
    for (int64_t g = 0; g < G; ++g) {
      const int64_t first = offsets[g], rows = offsets[g + 1] - first;
      if (rows == 0) continue;
      linear_forward(ref_out.t.slice_rows(first, rows), inp.t.slice_rows(first, rows), group(weight.t, g), Tensor{});
      linear_backward_input(ref_dinp.t.slice_rows(first, rows), dout.t.slice_rows(first, rows), group(weight.t, g));
      linear_backward_weight(group(ref_dweight.t, g), Tensor{}, dout.t.slice_rows(first, rows),
                             inp.t.slice_rows(first, rows));
    }
    EXPECT_TRUE(same_bits(to_host(out.t).t, to_host(ref_out.t).t));
    EXPECT_TRUE(same_bits(to_host(dinp.t).t, to_host(ref_dinp.t).t));
    const OwnedTensor dw = to_host(dweight.t);
    EXPECT_TRUE(same_bits(dw.t, to_host(ref_dweight.t).t));
    EXPECT_EQ(std::memcmp(group(dw.t, 1).data, group(dweight0.t, 1).data, group(dw.t, 1).bytes()), 0);
  }
}

}  // namespace
}  // namespace dt::kernels
