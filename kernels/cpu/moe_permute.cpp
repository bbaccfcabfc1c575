// Token dispatch and combine on the CPU (kernels/moe_permute.h).
//
// moe_assign_rows is a counting sort of the N * k assignments by expert, sequential (a few
// hundred thousand integers at most: a fraction of a millisecond); over capacity, nth_element
// under moe_math::ranks_before picks the kept assignments of each expert. The row kernels run
// one token (or one assignment) per OpenMP iteration; the permute is a byte copy of each row,
// whatever its type.
#include "kernels/moe_permute.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/storage.h"
#include "kernels/cpu/storage_rows.h"
#include "kernels/moe_math.h"

namespace dt::kernels::cpu {

std::vector<int64_t> moe_count_assignments(Tensor experts, int64_t num_experts) {
  std::vector<int64_t> counts(static_cast<size_t>(num_experts + 1), 0);
  const int32_t* ex = experts.ptr<int32_t>();
  for (int64_t i = 0; i < experts.numel(); ++i) ++counts[ex[i] >= 0 && ex[i] < num_experts ? ex[i] : num_experts];
  return counts;
}

void moe_assign_rows(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity) {
  const int64_t A = experts.numel(), E = num_experts;
  const int32_t* ex = experts.ptr<int32_t>();
  int32_t* rows = row_of.ptr<int32_t>();
  // The assignments grouped by expert, each group in assignment order: [start[e], start[e + 1]).
  std::vector<int64_t> start(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < A; ++i) ++start[ex[i] + 1];
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int32_t> grouped(static_cast<size_t>(A));
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < A; ++i) grouped[next[ex[i]]++] = static_cast<int32_t>(i);

  // Over capacity, the group's first `capacity` under ranks_before stay; the rest are dropped.
  std::vector<bool> kept(static_cast<size_t>(A), true);
  if (capacity > 0) {
    const float* w = weights.ptr<float>();
    for (int64_t e = 0; e < E; ++e) {
      const auto first = grouped.begin() + start[e], last = grouped.begin() + start[e + 1];
      if (last - first <= capacity) continue;
      std::vector<int32_t> ranked(first, last);
      std::nth_element(ranked.begin(), ranked.begin() + capacity, ranked.end(),
                       [&](int32_t a, int32_t b) { return moe_math::ranks_before(w[a], a, w[b], b); });
      for (auto it = ranked.begin() + capacity; it != ranked.end(); ++it) kept[*it] = false;
    }
  }

  // Rows in expert order, assignment order within an expert.
  int64_t row = 0;
  for (int64_t g = 0; g < A; ++g) {
    const int32_t i = grouped[g];
    rows[i] = kept[i] ? static_cast<int32_t>(row++) : -1;
  }
}

void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of) {
  const int64_t k = row_of.dim(1), A = row_of.numel();
  const size_t row_bytes = static_cast<size_t>(x.dim(1)) * dtype_size(x.dtype);
  const int32_t* rows = row_of.ptr<int32_t>();
  const auto* src = static_cast<const char*>(x.data);
  auto* dst = static_cast<char*>(permuted.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < A; ++i)
    if (rows[i] >= 0) std::memcpy(dst + static_cast<size_t>(rows[i]) * row_bytes, src + (i / k) * row_bytes, row_bytes);
}

namespace {

// out[n] = sum over token n's kept slots j of w[n, j] * src[row_of[n, j]] (w null: weight 1), in
// f32 in slot order as fused multiply-adds (fma(1, y, acc) is y + acc exactly), rounded once.
void sum_rows(Tensor out, Tensor src, const Tensor* weights, Tensor row_of) {
  dispatch_storage(out.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t N = out.dim(0), C = out.dim(1), k = row_of.dim(1);
    const int32_t* rows = row_of.ptr<int32_t>();
    const T* w = weights ? weights->ptr<T>() : nullptr;
    const S* from = storage_ptr<S>(src);
    S* to = storage_ptr<S>(out);
#pragma omp parallel
    {
      std::vector<T> acc(static_cast<size_t>(C));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        std::fill(acc.begin(), acc.end(), T{0});
        for (int64_t j = 0; j < k; ++j) {
          if (rows[n * k + j] < 0) continue;
          const S* row = from + rows[n * k + j] * C;
          const T wt = w ? w[n * k + j] : T{1};
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) acc[c] = std::fma(wt, load(row[c]), acc[c]);
        }
        store_row(to + n * C, acc.data(), C);
      }
    }
  });
}

}  // namespace

void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of) { sum_rows(dx, dpermuted, nullptr, row_of); }

void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of) { sum_rows(out, y, &weights, row_of); }

void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of) {
  dispatch_storage(y.dtype, [&]<typename S>() {
    using T = compute_t<S>;
    const int64_t C = y.dim(1), k = row_of.dim(1), A = row_of.numel();
    const int32_t* rows = row_of.ptr<int32_t>();
    const T* w = weights.ptr<T>();
    T* dw = dweights.ptr<T>();
    const S *yp = storage_ptr<S>(y), *d = storage_ptr<S>(dout);
    S* dyp = storage_ptr<S>(dy);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < A; ++i) {
      if (rows[i] < 0) {
        dw[i] = 0;
        continue;
      }
      const S* dr = d + (i / k) * C;
      const S* yr = yp + rows[i] * C;
      S* dyr = dyp + rows[i] * C;
      const T wt = w[i];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) {
        const T g = load(dr[c]);
        store(dyr + c, wt * g);
        dot += g * load(yr[c]);
      }
      dw[i] = dot;
    }
  });
}

}  // namespace dt::kernels::cpu
