// attention_block_forward and attention_block_backward (kernels/attention_block.h) on the CPU.
//
// Row by row, in the accumulation type: forward takes one (sequence, query head) per unit of work
// and each query row's scores against the block's keys at once (Tk of them in the thread's
// scratch), then merges the row's result into out and lse. Backward takes one (sequence,
// key/value head) per unit, so that the thread owns dk and dv of that head and dq of the query
// heads that read it: no two threads write one element, and every sum runs in one order. These
// are the plain loops of the definition, not the tiled flash kernel of kernels/cpu/attention.cpp:
// ring attention's blocks are a rank's chunk of a long sequence, and the tiled form of this
// pair is the step after correctness.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_block.h"
#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {
namespace {

struct BlockDims {
  int64_t B, Tq, Tk, HS, q_row, kv_row, out_row;
  int NH, NKV;
};

BlockDims dims_of(const Tensor& q, const Tensor& kv, const AttentionHeads& h) {
  const int64_t HS = q.dim(2) / (h.n_head + 2 * int64_t{h.n_kv_head});
  return {.B = q.dim(0), .Tq = q.dim(1), .Tk = kv.dim(1), .HS = HS, .q_row = q.dim(2), .kv_row = kv.dim(2),
          .out_row = h.n_head * HS, .NH = h.n_head, .NKV = h.n_kv_head};
}

// The scores of query row i of head h against the block's keys it attends to, scaled: the
// number of keys, and the scores in s.
template <typename S>
int64_t scores(const BlockDims& d, const S* q, const S* kv, int64_t b, int h, int g, int64_t i, BlockMask mask,
               compute_t<S>* s) {
  using T = compute_t<S>;
  const T scale = T(1) / std::sqrt(static_cast<T>(d.HS));
  const int64_t keys = mask == BlockMask::causal ? i + 1 : d.Tk;
  const S* qi = q + (b * d.Tq + i) * d.q_row + h * d.HS;
  for (int64_t j = 0; j < keys; ++j) {
    const S* kj = kv + (b * d.Tk + j) * d.kv_row + g * d.HS;
    T dot = 0;
    for (int64_t c = 0; c < d.HS; ++c) dot += load(qi[c]) * load(kj[c]);
    s[j] = dot * scale;
  }
  return keys;
}

template <typename S>
void forward_impl(const BlockDims& d, compute_t<S>* out, compute_t<S>* lse, const S* q, const S* kv,
                  AttentionHeads heads, BlockMask mask, bool first) {
  using T = compute_t<S>;
#pragma omp parallel
  {
    std::vector<T> s(static_cast<size_t>(d.Tk)), o(static_cast<size_t>(d.HS));
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < d.B * d.NH; ++unit) {
      const int64_t b = unit / d.NH;
      const int h = static_cast<int>(unit % d.NH), g = heads.kv_of(h);
      for (int64_t i = 0; i < d.Tq; ++i) {
        const int64_t keys = scores(d, q, kv, b, h, g, i, mask, s.data());
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < keys; ++j) m = std::max(m, s[j]);
        T sum = 0;
        std::fill(o.begin(), o.end(), T(0));
        for (int64_t j = 0; j < keys; ++j) {
          const T p = std::exp(s[j] - m);
          sum += p;
          const S* vj = kv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
          for (int64_t c = 0; c < d.HS; ++c) o[c] += p * load(vj[c]);
        }
        const T block_lse = m + std::log(sum);
        T* oi = out + (b * d.Tq + i) * d.out_row + h * d.HS;
        T& li = lse[(b * d.NH + h) * d.Tq + i];
        // Merged with what the earlier blocks gave: each side weighted by its share of the
        // combined exponential sum.
        const T merged = first ? block_lse : std::max(li, block_lse) + std::log1p(std::exp(-std::fabs(li - block_lse)));
        const T keep = first ? T(0) : std::exp(li - merged), add = std::exp(block_lse - merged) / sum;
        for (int64_t c = 0; c < d.HS; ++c) oi[c] = (first ? T(0) : oi[c] * keep) + o[c] * add;
        li = merged;
      }
    }
  }
}

template <typename S>
void backward_impl(const BlockDims& d, compute_t<S>* dq, compute_t<S>* dkv, const S* dout, const S* q, const S* kv,
                   const S* out, const compute_t<S>* lse, AttentionHeads heads, BlockMask mask) {
  using T = compute_t<S>;
  const T scale = T(1) / std::sqrt(static_cast<T>(d.HS));
#pragma omp parallel
  {
    std::vector<T> s(static_cast<size_t>(d.Tk));
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < d.B * d.NKV; ++unit) {
      const int64_t b = unit / d.NKV;
      const int g = static_cast<int>(unit % d.NKV);
      for (int h = heads.first_query(g); h < heads.end_query(g); ++h)
        for (int64_t i = 0; i < d.Tq; ++i) {
          const int64_t keys = scores(d, q, kv, b, h, g, i, mask, s.data());
          const int64_t row = (b * d.Tq + i) * d.out_row + h * d.HS;
          const S* douti = dout + row;
          const S* qi = q + (b * d.Tq + i) * d.q_row + h * d.HS;
          T D = 0;
          for (int64_t c = 0; c < d.HS; ++c) D += load(douti[c]) * load(out[row + c]);
          const T li = lse[(b * d.NH + h) * d.Tq + i];
          T* dqi = dq + row;
          for (int64_t j = 0; j < keys; ++j) {
            const S* kj = kv + (b * d.Tk + j) * d.kv_row + g * d.HS;
            const S* vj = kv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
            T* dkj = dkv + (b * d.Tk + j) * d.kv_row + g * d.HS;
            T* dvj = dkv + (b * d.Tk + j) * d.kv_row + (d.NKV + g) * d.HS;
            const T p = std::exp(s[j] - li);
            T dp = 0;
            for (int64_t c = 0; c < d.HS; ++c) dp += load(douti[c]) * load(vj[c]);
            const T ds = p * (dp - D) * scale;
            for (int64_t c = 0; c < d.HS; ++c) {
              dqi[c] += ds * load(kj[c]);
              dkj[c] += ds * load(qi[c]);
              dvj[c] += p * load(douti[c]);
            }
          }
        }
    }
  }
}

}  // namespace

void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first) {
  const BlockDims d = dims_of(q, kv, heads);
  dispatch_storage(q.dtype, [&]<typename S>() {
    forward_impl<S>(d, out.ptr<compute_t<S>>(), lse.ptr<compute_t<S>>(), storage_ptr<S>(q), storage_ptr<S>(kv), heads,
                    mask, first);
  });
}

void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask) {
  const BlockDims d = dims_of(q, kv, heads);
  dispatch_storage(q.dtype, [&]<typename S>() {
    backward_impl<S>(d, dq.ptr<compute_t<S>>(), dkv.ptr<compute_t<S>>(), storage_ptr<S>(dout), storage_ptr<S>(q),
                     storage_ptr<S>(kv), storage_ptr<S>(out), lse.ptr<compute_t<S>>(), heads, mask);
  });
}

}  // namespace dt::kernels::cpu
