// Top-k routing on the CPU (kernels/moe_route.h): one row per token, rows in parallel.
//
// The softmax uses std::exp (a row is E values, a few hundred at most: no vectorized exponential
// needed), the experts come from a partial sort of the row's expert indices under
// moe_math::ranks_before, and the weights and gradients use moe_math's formulas, as the GPU does.
#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/float_type.h"
#include "kernels/moe_math.h"

namespace dt::kernels::cpu {

namespace {

// s (E) = softmax(x) or sigmoid(x).
template <typename T>
void scores_row(T* s, const T* x, int64_t E, MoeScore score) {
  if (score == MoeScore::sigmoid) {
    for (int64_t e = 0; e < E; ++e) s[e] = T{1} / (T{1} + std::exp(-x[e]));
    return;
  }
  T m = -INFINITY;
  for (int64_t e = 0; e < E; ++e) m = std::fmax(m, x[e]);
  T sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(x[e] - m));
  for (int64_t e = 0; e < E; ++e) s[e] /= sum;
}

}  // namespace

void moe_route_forward(Tensor scores, Tensor experts, Tensor weights, Tensor logits, Tensor bias,
                       const MoeRouting& routing) {
  dispatch_float(logits.dtype, [&]<typename T>() {
    const int64_t N = logits.dim(0), E = logits.dim(1), k = routing.top_k;
    const T* x = logits.ptr<T>();
    const T* b = bias.defined() ? bias.ptr<T>() : nullptr;
    T* s = scores.ptr<T>();
    T* w = weights.ptr<T>();
    int32_t* ex = experts.ptr<int32_t>();
    const T scale = routing.route_scale;
#pragma omp parallel
    {
      std::vector<T> choice(static_cast<size_t>(E));
      std::vector<int32_t> order(static_cast<size_t>(E));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        T* sr = s + n * E;
        scores_row(sr, x + n * E, E, routing.score);
        for (int64_t e = 0; e < E; ++e) choice[e] = b ? sr[e] + b[e] : sr[e];
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t i, int32_t j) { return moe_math::ranks_before(choice[i], i, choice[j], j); });
        T sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += sr[order[j]];
        const T Z = sum + static_cast<T>(moe_math::kRenormalizeEpsilon);
        for (int64_t j = 0; j < k; ++j) {
          ex[n * k + j] = order[j];
          w[n * k + j] = moe_math::route_weight(sr[order[j]], Z, routing.renormalize, scale);
        }
      }
    }
  });
}

void moe_route_backward(Tensor dlogits, Tensor dweights, Tensor dscores, Tensor scores, Tensor experts,
                        const MoeRouting& routing) {
  dispatch_float(scores.dtype, [&]<typename T>() {
    const int64_t N = scores.dim(0), E = scores.dim(1), k = routing.top_k;
    const T* s = scores.ptr<T>();
    const T* dw = dweights.ptr<T>();
    const T* ds_extra = dscores.defined() ? dscores.ptr<T>() : nullptr;
    const int32_t* ex = experts.ptr<int32_t>();
    T* dx = dlogits.ptr<T>();
    const T scale = routing.route_scale;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* p = s + n * E;
      const int32_t* chosen = ex + n * k;
      const T* dwr = dw + n * k;
      T* ds = dx + n * E;  // the score gradient first, turned into the logit gradient in place
      for (int64_t e = 0; e < E; ++e) ds[e] = ds_extra ? ds_extra[n * E + e] : T{0};
      T sum = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) {
        sum += p[chosen[j]];
        dot += dwr[j] * p[chosen[j]];
      }
      const T Z = sum + static_cast<T>(moe_math::kRenormalizeEpsilon);
      for (int64_t j = 0; j < k; ++j)
        ds[chosen[j]] += moe_math::route_weight_grad(dwr[j], dot, Z, routing.renormalize, scale);
      if (routing.score == MoeScore::sigmoid) {
        for (int64_t e = 0; e < E; ++e) ds[e] = ds[e] * p[e] * (T{1} - p[e]);
      } else {
        T total = 0;
        for (int64_t e = 0; e < E; ++e) total += p[e] * ds[e];
        for (int64_t e = 0; e < E; ++e) ds[e] = p[e] * (ds[e] - total);
      }
    }
  });
}

}  // namespace dt::kernels::cpu
