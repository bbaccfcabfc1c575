// Decode attention on the CPU: one unit of work is a (query m, head h) pair, which holds its
// p(m) + 1 scores in the thread's scratch row, takes the max, exponentiates and sums them, and
// accumulates the value rows weighted by them. At generation's M = 1 there are NH units, a
// good fit for a few cores; the scores of one unit are T floats (4 KiB at T = 1024), in L1.
// Unlike kernels/cpu/attention.cpp there is no tiling: one query row reuses nothing across keys.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "kernels/attention_decode.h"
#include "kernels/cpu/float_type.h"
#include "kernels/cpu/vec_exp.h"

namespace dt::kernels::cpu {
namespace {

template <typename T>
void decode(Tensor out_t, Tensor q_t, Tensor kv_t, int n_head, int n_kv_head) {
  const int64_t M = q_t.dim(0), T_ = kv_t.dim(0), HS = q_t.dim(1) / n_head, group = n_head / n_kv_head;
  const int64_t q_row = q_t.dim(1), kv_row = kv_t.dim(1), v_col = int64_t{n_kv_head} * HS;
  const T* q = q_t.ptr<T>();
  const T* kv = kv_t.ptr<T>();
  T* out = out_t.ptr<T>();
  const T scale = T(1) / std::sqrt(T(HS));
  const int threads = omp_get_max_threads();
  const Buffer scratch(static_cast<size_t>(threads * T_) * sizeof(T), MemTag::workspace, Device::cpu, false);

#pragma omp parallel num_threads(threads)
  {
    T* scores = static_cast<T*>(scratch.data()) + omp_get_thread_num() * T_;
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < M * n_head; ++unit) {
      const int64_t m = unit / n_head, h = unit % n_head, g = h / group;
      const int64_t visible = T_ - M + m + 1;  // keys 0..p(m)
      const T* qh = q + m * q_row + h * HS;
      T max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const T* kj = kv + j * kv_row + g * HS;
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < HS; ++d) dot += qh[d] * kj[d];
        scores[j] = dot * scale;
        max = std::max(max, scores[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores[j] = vec_exp(scores[j] - max);
        sum += scores[j];
      }
      T* oh = out + m * q_row + h * HS;
      std::fill_n(oh, HS, T(0));
      for (int64_t j = 0; j < visible; ++j) {
        const T* vj = kv + j * kv_row + v_col + g * HS;
        const T p = scores[j];
#pragma omp simd
        for (int64_t d = 0; d < HS; ++d) oh[d] += p * vj[d];
      }
      const T inv_sum = T(1) / sum;
      for (int64_t d = 0; d < HS; ++d) oh[d] *= inv_sum;
    }
  }
}

}  // namespace

void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head) {
  dispatch_float(q.dtype, [&]<typename T>() { decode<T>(out, q, kv, n_head, n_kv_head); });
}

}  // namespace dt::kernels::cpu
