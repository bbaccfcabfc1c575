// The routers' auxiliary losses on the CPU (kernels/moe_router_loss.h): the statistics one
// sequence at a time, its rows in order; the gradients one row at a time, rows in parallel.
#include "kernels/moe_router_loss.h"

#include <cmath>

#include "kernels/cpu/float_type.h"
#include "kernels/moe_math.h"

namespace dt::kernels::cpu {

namespace {

// logsumexp of a row of E values.
template <typename T>
T row_lse(const T* x, int64_t E) {
  T m = -INFINITY;
  for (int64_t e = 0; e < E; ++e) m = std::fmax(m, x[e]);
  T sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(x[e] - m);
  return m + std::log(sum);
}

// Z: a row's sigmoid scores' sum, plus the balance loss's epsilon.
template <typename T>
T sigmoid_sum(const T* s, int64_t E) {
  T sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += s[e];
  return sum + static_cast<T>(moe_math::kBalanceEpsilon);
}

}  // namespace

void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score) {
  const Tensor& sets = scores.defined() ? scores : logits;
  dispatch_float(sets.dtype, [&]<typename T>() {
    const int64_t N = sets.dim(0), E = sets.dim(1);
    const int64_t S = (counts.defined() ? counts : probs.defined() ? probs : z).dim(0), L = N / S;
    const int64_t k = counts.defined() ? experts.dim(1) : 0;
    T* c = counts.defined() ? counts.ptr<T>() : nullptr;
    T* p = probs.defined() ? probs.ptr<T>() : nullptr;
    T* zs = z.defined() ? z.ptr<T>() : nullptr;
    const T* s = scores.defined() ? scores.ptr<T>() : nullptr;
    const T* x = logits.defined() ? logits.ptr<T>() : nullptr;
    const int32_t* ex = counts.defined() ? experts.ptr<int32_t>() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < S; ++q) {
      T* cq = c ? c + q * E : nullptr;
      T* pq = p ? p + q * E : nullptr;
      for (int64_t e = 0; e < E && cq; ++e) cq[e] = 0;
      for (int64_t e = 0; e < E && pq; ++e) pq[e] = 0;
      T zq = 0;
      for (int64_t n = q * L; n < (q + 1) * L; ++n) {
        for (int64_t j = 0; j < k; ++j) cq[ex[n * k + j]] += 1;
        if (pq) {
          const T* sn = s + n * E;
          if (score == MoeScore::sigmoid) {
            const T Z = sigmoid_sum(sn, E);
            for (int64_t e = 0; e < E; ++e) pq[e] += sn[e] / Z;
          } else {
            for (int64_t e = 0; e < E; ++e) pq[e] += sn[e];
          }
        }
        if (zs) {
          const T lse = row_lse(x + n * E, E);
          zq += lse * lse;
        }
      }
      if (zs) zs[q] = zq;
    }
  });
}

void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score) {
  dispatch_float(scores.dtype, [&]<typename T>() {
    const int64_t N = scores.dim(0), E = scores.dim(1), L = N / counts.dim(0);
    const T* s = scores.ptr<T>();
    const T* c = counts.ptr<T>();
    T* ds = dscores.ptr<T>();
    const T a = scale;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* g = c + (n / L) * E;  // the balance loss's gradient on P, over scale
      const T* sn = s + n * E;
      T* dn = ds + n * E;
      if (score == MoeScore::softmax) {
        for (int64_t e = 0; e < E; ++e) dn[e] = a * g[e];
        continue;
      }
      const T Z = sigmoid_sum(sn, E);
      T dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += a * g[e] * (sn[e] / Z);
      for (int64_t e = 0; e < E; ++e) dn[e] = moe_math::balance_sigmoid_grad(a * g[e], dot, Z);
    }
  });
}

void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale) {
  dispatch_float(logits.dtype, [&]<typename T>() {
    const int64_t N = logits.dim(0), E = logits.dim(1);
    const T* x = logits.ptr<T>();
    T* dx = dlogits.ptr<T>();
    const T a = scale;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xn = x + n * E;
      const T lse = row_lse(xn, E);
      for (int64_t e = 0; e < E; ++e) dx[n * E + e] += a * T{2} * lse * std::exp(xn[e] - lse);
    }
  });
}

}  // namespace dt::kernels::cpu
