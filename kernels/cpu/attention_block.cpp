// attention_block_forward and attention_block_backward (kernels/attention_block.h) on the CPU.
//
// Tiled as the whole sequence's flash attention (kernels/cpu/attention.cpp), with its tiles and
// steps (kernels/cpu/attention_tiles.h): 64 x 64 tile products by tile_gemm, per-thread
// scratch, 16-bit q, kv, out and dout widened into f32 tiles where read. What differs: a full
// block's query tile walks every key tile, a causal one those up to its diagonal; P and dS are
// never rounded to the storage type (the blocks compute in the accumulation type throughout, so
// 16-bit blocks give the bits of f32 blocks on the widened inputs); and out, lse, dq and dkv are
// the caller's accumulation-type arrays, merged or added into in place.
//
// Forward: one unit of work is (b, query head, query tile), as in attention.cpp. An earlier
// block's (out, lse) enters the query tile's online softmax as a key tile already walked:
// running max lse, running sum 1, output rows out. The online softmax's own rescaling then
// merges this block's key tiles into it, which is the header's merge,
//   lse' = max' + log(e^(lse - max') + sum_j e^(s_j - max')),
//   out' = (out e^(lse - max') + sum_j e^(s_j - max') v_j) / e^(lse' - max'),
// taken one key tile at a time; with `first` the tile starts empty (max -inf, sum 0).
//
// Backward: one unit is (b, key/value head), as in attention.cpp: the thread that takes it owns
// dk and dv of that head and dq of the query heads that read it, so no two threads write one
// element and no atomics are needed. It walks the key tiles in order and, for each, its query
// heads in order and their query tiles in order (from the diagonal for a causal block), and adds
// each pair's products into dq, dk and dv in place. Every sum is thus taken in one order
// whichever thread runs the unit: the same bits for any thread count, run to run.
#include <omp.h>

#include <algorithm>

#include "core/buffer.h"
#include "kernels/attention_block.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {
namespace {

struct BlockDims {
  int64_t B, Tq, Tk, q_row, kv_row, out_row;
  int NH, NKV, HS;
};

BlockDims dims_of(const Tensor& q, const Tensor& kv, const AttentionHeads& h) {
  const int HS = static_cast<int>(q.dim(2) / (h.n_head + 2 * int64_t{h.n_kv_head}));
  return {.B = q.dim(0), .Tq = q.dim(1), .Tk = kv.dim(1), .q_row = q.dim(2), .kv_row = kv.dim(2),
          .out_row = int64_t{h.n_head} * HS, .NH = h.n_head, .NKV = h.n_kv_head, .HS = HS};
}

// D = dout . out of one row, the softmax backward's row term, in a fixed order: 8 running sums
// over the columns c = l (mod 8), then added in turn. The order is written out rather than left
// to an omp simd reduction (as attention.cpp does), whose order the compiler picks for each
// loop: the 16-bit and f32 instances must give the same bits.
template <typename S>
compute_t<S> row_term(const S* dout, const S* out, int HS) {
  using T = compute_t<S>;
  constexpr int kLanes = 8;
  T lane[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= HS; c += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += load(dout[c + l]) * load(out[c + l]);
  for (int l = 0; c + l < HS; ++l) lane[l] += load(dout[c + l]) * load(out[c + l]);
  T sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

template <typename S>
void forward_impl(const BlockDims& d, compute_t<S>* out, compute_t<S>* lse, const S* q, const S* kv,
                  AttentionHeads heads, BlockMask mask, bool first) {
  using T = compute_t<S>;
  for_each_query_tile<T>(d.B, d.NH, d.Tq, d.HS, is_16bit<S>,
                         [&](const ForwardTiles<T>& w, int64_t b, int h, int64_t i0, int M) {
    const int g = heads.kv_of(h);
    T* out_tile = out + (b * d.Tq + i0) * d.out_row + int64_t{h} * d.HS;
    T* lse_tile = lse + (b * d.NH + h) * d.Tq + i0;
    if (first) {
      w.start(M, d.HS);
    } else {
      std::copy_n(lse_tile, M, w.row_max);
      std::fill_n(w.row_sum, M, T(1));
      for (int i = 0; i < M; ++i) std::copy_n(out_tile + i * d.out_row, d.HS, w.o + int64_t{i} * d.HS);
    }
    // A causal block's query tile stops at its last query's key. Every query sees key 0 of a
    // causal block and all keys of a full one, so each row max is finite after the first key tile.
    const S* kv_b = kv + b * d.Tk * d.kv_row;
    forward_query_tile<S>({.q = q + (b * d.Tq + i0) * d.q_row + int64_t{h} * d.HS, .q_ld = d.q_row, .M = M,
                           .i0 = i0, .k = kv_b + int64_t{g} * d.HS, .v = kv_b + int64_t{d.NKV + g} * d.HS,
                           .kv_ld = d.kv_row, .keys = mask == BlockMask::causal ? i0 + M : d.Tk, .mask = mask},
                          d.HS, ProductRounding::none, w);
    finish_query_tile(w, M, d.HS, out_tile, d.out_row, lse_tile);
  });
}

template <typename S>
void backward_impl(const BlockDims& d, compute_t<S>* dq, compute_t<S>* dkv, const S* dout, const S* q, const S* kv,
                   const S* out, const compute_t<S>* lse, AttentionHeads heads, BlockMask mask) {
  using T = compute_t<S>;
  const BackwardScratch at(d.HS, heads.group, d.Tq, is_16bit<S>);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(at.layout, threads);

#pragma omp parallel num_threads(threads)
  {
    const BackwardTiles<T> w = at.tiles(thread_scratch<T>(scratch, at.layout));
#pragma omp for schedule(dynamic)
    for (int64_t unit = 0; unit < d.B * d.NKV; ++unit) {
      const int64_t b = unit / d.NKV;
      const int g = static_cast<int>(unit % d.NKV);
      // The query heads [h0, h0 + n) read key/value head g: `group` of them, fewer at the ends of
      // a tensor-parallel rank's heads.
      const int h0 = heads.first_query(g), n = heads.end_query(g) - h0;
      const S *q_b = q + b * d.Tq * d.q_row, *kv_b = kv + b * d.Tk * d.kv_row;
      const S *dout_b = dout + b * d.Tq * d.out_row, *out_b = out + b * d.Tq * d.out_row;
      T *dq_b = dq + b * d.Tq * d.out_row, *dkv_b = dkv + b * d.Tk * d.kv_row;
      const int64_t k_col = int64_t{g} * d.HS, v_col = int64_t{d.NKV + g} * d.HS;
      for (int hh = 0; hh < n; ++hh)
        for (int64_t i = 0; i < d.Tq; ++i) {
          const int64_t at_row = i * d.out_row + int64_t{h0 + hh} * d.HS;
          w.delta[hh * d.Tq + i] = row_term(dout_b + at_row, out_b + at_row, d.HS);
        }
      for (int64_t j0 = 0; j0 < d.Tk; j0 += kKeyTile) {
        const int N = static_cast<int>(std::min<int64_t>(kKeyTile, d.Tk - j0));
        const S* kv_tile = kv_b + j0 * d.kv_row;
        const TileView<S> k = backward_key_tile(kv_tile + k_col, kv_tile + v_col, N, d.HS, d.kv_row, w);
        for (int hh = 0; hh < n; ++hh) {
          const int64_t h_col = int64_t{h0 + hh} * d.HS;
          // A causal block's query tiles wholly above this key tile see none of it.
          for (int64_t i0 = mask == BlockMask::causal ? j0 / kQueryTile * kQueryTile : 0; i0 < d.Tq;
               i0 += kQueryTile) {
            const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.Tq - i0));
            backward_tile_pair<S>({.q = tile_of(q_b + i0 * d.q_row + h_col, M, d.HS, d.q_row, w.qw),
                                   .dout = tile_of(dout_b + i0 * d.out_row + h_col, M, d.HS, d.out_row, w.dow),
                                   .k = k,
                                   .kt = w.kt,
                                   .vt = w.vt,
                                   .lse = lse + (b * d.NH + h0 + hh) * d.Tq + i0,
                                   .delta = w.delta + hh * d.Tq + i0,
                                   .M = M,
                                   .N = N,
                                   .i0 = i0,
                                   .j0 = j0,
                                   .mask = mask,
                                   .dq = dq_b + i0 * d.out_row + h_col,
                                   .dq_ld = d.out_row,
                                   .dk = dkv_b + j0 * d.kv_row + k_col,
                                   .dv = dkv_b + j0 * d.kv_row + v_col,
                                   .dkv_ld = d.kv_row},
                                  d.HS, ProductRounding::none, w.p, w.ds);
          }
        }
      }
    }
  }
}

}  // namespace

BlockScratchBytes attention_block_scratch_bytes(int64_t queries, int head_size, AttentionHeads heads, DType storage,
                                                int threads) {
  const bool k16 = dtype_size(storage) == 2;
  const size_t per_element = (storage == DType::f64 ? sizeof(double) : sizeof(float)) * static_cast<size_t>(threads);
  return {.forward = static_cast<size_t>(ForwardScratch(head_size, k16).layout.per_thread()) * per_element,
          .backward =
              static_cast<size_t>(BackwardScratch(head_size, heads.group, queries, k16).layout.per_thread()) *
              per_element};
}

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
