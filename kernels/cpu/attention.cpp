// Causal grouped-query attention on the CPU, flash-attention style (Dao et al., FlashAttention-2).
//
// Forward: one unit of work is (b, h, query tile of kQueryTile rows). It walks the key tiles up
// to the diagonal, keeping a running max and running sum per row (online softmax), rescales
// and accumulates its output tile, and saves lse = max + log(sum). Units write disjoint rows of
// out and lse; they are dealt out statically, a head's query tiles consecutively.
//
// Backward: one unit is (b, kv head). The thread that takes it owns every gradient the unit
// touches: dk and dv of that kv head and dq of the query heads that read it. It walks key tiles
// in order and, for each, every query tile at or below the diagonal, recomputing P = exp(S - lse)
// and adding into dv, dk and dq. Each sum is taken in the same order whichever thread runs it,
// so results are bitwise identical run to run and for any thread count, with no atomics.
// FlashAttention-2 instead splits dk/dv (parallel over key tiles) from dq (parallel over query
// tiles); that recomputes S and dP a second time (7 tile GEMMs per pair of tiles instead of 5)
// to gain parallelism we do not need: B * NKV units (96 for GPT-2 small at B = 8) keep a few
// CPU cores busy. It falls short only when B * NKV < threads (batch-1 multi-query training).
//
// 16-bit storage (bf16, f16): qkv, out, dout and dqkv are S, lse is f32, and everything inside
// is f32. Each q, k, v and dout tile is widened into the thread's scratch where it is read;
// as flash-attention GPU kernels do, the probabilities P are rounded to S before the products
// P.V (forward) and P^T.dout (dv), and dS before dS.K (dq) and dS^T.Q (dk); the row sums and
// dS itself use the unrounded f32 P. dq, dk and dv accumulate in f32 scratch (dk and dv for one
// key tile, dq for the whole unit: group * T * HS floats per thread) and are rounded once when
// stored, as out is. The order of every sum is the f32 kernel's, so the 16-bit results are as
// deterministic. For f32 and f64 none of this runs: the tiles are read in place as before.
//
// Tile products use tile_gemm (kernels/cpu/tile_gemm.h), not cblas_sgemm (see there why).
// Operands that tile_gemm needs row-major along N (K^T, V^T) are copied once per key tile into
// per-thread scratch; everything else is read in place from qkv and dout. The tiles and the
// steps on them (the forward's walk of one query tile, the backward's products of one pair of
// tiles) are in kernels/cpu/attention_tiles.h, shared with ring attention's blocks
// (kernels/cpu/attention_block.cpp).
//
// Cost in context: in a GPT-2 training step of d_model 768, 4 layers, B = 8, T = 256 on one
// core, attention forward and backward together take about 3% of the step's samples under
// `perf record build/dtrain bench step --model gpt2-124m --n-layer 4 --threads 1`; the GEMMs
// of the linear layers and the classifier take over 70%.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>

#include "core/buffer.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/storage.h"

namespace dt::kernels::cpu {
namespace {

// Shapes of one call and where each head sits in a qkv row.
struct Dims {
  int64_t B, T;
  int NH, NKV, HS;
  int64_t qkv_row, out_row;  // elements per position of qkv and of out
  AttentionHeads heads;

  // The most query heads that read one key/value head.
  int group() const { return heads.group; }
  int64_t q_col(int h) const { return int64_t{h} * HS; }
  int64_t k_col(int g) const { return int64_t{NH + g} * HS; }
  int64_t v_col(int g) const { return int64_t{NH + NKV + g} * HS; }
};

Dims dims_of(const Tensor& qkv, AttentionHeads heads) {
  const int n_head = heads.n_head, n_kv_head = heads.n_kv_head;
  Dims d{.B = qkv.dim(0), .T = qkv.dim(1), .NH = n_head, .NKV = n_kv_head, .HS = 0, .qkv_row = qkv.dim(2),
         .out_row = 0, .heads = heads};
  d.HS = static_cast<int>(d.qkv_row / (n_head + 2 * n_kv_head));
  d.out_row = int64_t{n_head} * d.HS;
  return d;
}

// Stores the f32 tile (rows, cols), src_ld apart, into S rows dst_ld apart.
template <typename S>
void store_tile(const float* src, int64_t rows, int cols, int64_t src_ld, S* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) store(dst + r * dst_ld + c, src[r * src_ld + c]);
}

// The backward's scratch (attention_tiles.h) and, with 16-bit storage, the f32 accumulators of
// dk and dv (one key tile) and dq (every query row of the unit's `group` heads).
struct AttentionBackwardScratch : BackwardScratch {
  int64_t dk = 0, dv = 0, dq = 0;
  AttentionBackwardScratch(int HS, int group, int64_t T, bool k16) : BackwardScratch(HS, group, T, k16) {
    if (k16) {
      dk = layout.add(int64_t{kKeyTile} * HS), dv = layout.add(int64_t{kKeyTile} * HS);
      dq = layout.add(group * T * HS);
    }
  }
};

template <typename S>
void forward_impl(const Dims& d, S* out, compute_t<S>* lse, const S* qkv) {
  using T = compute_t<S>;
  for_each_query_tile<T>(d.B, d.NH, d.T, d.HS, is_16bit<S>,
                         [&](const ForwardTiles<T>& w, int64_t b, int h, int64_t i0, int M) {
    const int g = d.heads.kv_of(h);
    const S* qkv_b = qkv + b * d.T * d.qkv_row;
    w.start(M, d.HS);
    // Keys past the tile's last query are hidden from all of it: stop there. Key 0, in the first
    // key tile, is visible to every query, so each row max is finite from then on.
    forward_query_tile<S>({.q = qkv_b + i0 * d.qkv_row + d.q_col(h), .q_ld = d.qkv_row, .M = M, .i0 = i0,
                           .k = qkv_b + d.k_col(g), .v = qkv_b + d.v_col(g), .kv_ld = d.qkv_row, .keys = i0 + M,
                           .mask = BlockMask::causal},
                          d.HS, ProductRounding::storage, w);
    finish_query_tile(w, M, d.HS, out + (b * d.T + i0) * d.out_row + d.q_col(h), d.out_row,
                      lse + (b * d.NH + h) * d.T + i0);
  });
}

template <typename S>
void backward_impl(const Dims& d, S* dqkv, const S* dout, const S* qkv, const S* out, const compute_t<S>* lse) {
  using T = compute_t<S>;
  constexpr bool k16 = is_16bit<S>;
  const int group = d.group();
  const AttentionBackwardScratch at(d.HS, group, d.T, k16);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(at.layout, threads);

#pragma omp parallel num_threads(threads)
  {
    T* base = thread_scratch<T>(scratch, at.layout);
    const BackwardTiles<T> w = at.tiles(base);
    T *dk_acc = base + at.dk, *dv_acc = base + at.dv, *dq_acc = base + at.dq;
#pragma omp for schedule(dynamic)
    for (int64_t unit = 0; unit < d.B * d.NKV; ++unit) {
      const int64_t b = unit / d.NKV;
      const int g = static_cast<int>(unit % d.NKV);
      // The query heads [h0, h0 + heads) read key/value head g: `group` of them, fewer at the
      // ends of a tensor-parallel rank's heads.
      const int h0 = d.heads.first_query(g), heads = d.heads.end_query(g) - h0;
      const S* qkv_b = qkv + b * d.T * d.qkv_row;
      S* dqkv_b = dqkv + b * d.T * d.qkv_row;
      const S* dout_b = dout + b * d.T * d.out_row;
      // delta[hh, i] = D = dout . out, the softmax backward's row term for query head h0 + hh.
      // The unit's gradients (its query heads, then k and v; in dqkv, or in the f32
      // accumulators for 16-bit storage) start at zero: every gradient below accumulates.
      for (int64_t i = 0; i < d.T; ++i) {
        for (int hh = 0; hh < heads; ++hh) {
          const S* dout_row = dout_b + i * d.out_row + d.q_col(h0 + hh);
          const S* out_row = out + (b * d.T + i) * d.out_row + d.q_col(h0 + hh);
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int c = 0; c < d.HS; ++c) dot += load(dout_row[c]) * load(out_row[c]);
          w.delta[hh * d.T + i] = dot;
        }
        if constexpr (!k16) {
          T* dqkv_row = dqkv_b + i * d.qkv_row;
          std::fill_n(dqkv_row + d.q_col(h0), int64_t{heads} * d.HS, T(0));
          std::fill_n(dqkv_row + d.k_col(g), d.HS, T(0));
          std::fill_n(dqkv_row + d.v_col(g), d.HS, T(0));
        }
      }
      if constexpr (k16) std::fill_n(dq_acc, heads * d.T * d.HS, T(0));
      for (int64_t j0 = 0; j0 < d.T; j0 += kKeyTile) {
        const int N = static_cast<int>(std::min<int64_t>(kKeyTile, d.T - j0));
        const TileView<S> k = backward_key_tile(qkv_b + j0 * d.qkv_row + d.k_col(g),
                                                qkv_b + j0 * d.qkv_row + d.v_col(g), N, d.HS, d.qkv_row, w);
        // Where dk and dv of this key tile accumulate.
        T *dk, *dv;
        int64_t dkv_ld;
        if constexpr (k16) {
          dk = dk_acc, dv = dv_acc, dkv_ld = d.HS;
          std::fill_n(dk_acc, int64_t{N} * d.HS, T(0));
          std::fill_n(dv_acc, int64_t{N} * d.HS, T(0));
        } else {
          dk = dqkv_b + j0 * d.qkv_row + d.k_col(g), dv = dqkv_b + j0 * d.qkv_row + d.v_col(g), dkv_ld = d.qkv_row;
        }
        for (int hh = 0; hh < heads; ++hh) {
          const int h = h0 + hh;
          // Query tiles wholly above this key tile see none of it.
          for (int64_t i0 = j0 / kQueryTile * kQueryTile; i0 < d.T; i0 += kQueryTile) {
            const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.T - i0));
            T* dq;
            int64_t dq_ld;
            if constexpr (k16) {
              dq = dq_acc + (hh * d.T + i0) * d.HS, dq_ld = d.HS;
            } else {
              dq = dqkv_b + i0 * d.qkv_row + d.q_col(h), dq_ld = d.qkv_row;
            }
            backward_tile_pair<S>(
                {.q = tile_of(qkv_b + i0 * d.qkv_row + d.q_col(h), M, d.HS, d.qkv_row, w.qw),
                 .dout = tile_of(dout_b + i0 * d.out_row + d.q_col(h), M, d.HS, d.out_row, w.dow),
                 .k = k,
                 .kt = w.kt,
                 .vt = w.vt,
                 .lse = lse + (b * d.NH + h) * d.T + i0,
                 .delta = w.delta + hh * d.T + i0,
                 .M = M,
                 .N = N,
                 .i0 = i0,
                 .j0 = j0,
                 .mask = BlockMask::causal,
                 .dq = dq,
                 .dq_ld = dq_ld,
                 .dk = dk,
                 .dv = dv,
                 .dkv_ld = dkv_ld},
                d.HS, ProductRounding::storage, w.p, w.ds);
          }
        }
        if constexpr (k16) {
          store_tile(dk_acc, N, d.HS, d.HS, dqkv_b + j0 * d.qkv_row + d.k_col(g), d.qkv_row);
          store_tile(dv_acc, N, d.HS, d.HS, dqkv_b + j0 * d.qkv_row + d.v_col(g), d.qkv_row);
        }
      }
      if constexpr (k16)
        for (int hh = 0; hh < heads; ++hh)
          store_tile(dq_acc + hh * d.T * d.HS, d.T, d.HS, d.HS, dqkv_b + d.q_col(h0 + hh), d.qkv_row);
    }
  }
}

}  // namespace

size_t attention_scratch_bytes(int64_t seq_len, int head_size, AttentionHeads heads, DType storage, int threads) {
  const bool k16 = dtype_size(storage) == 2;
  const int64_t per_thread =
      std::max(ForwardScratch(head_size, k16).layout.per_thread(),
               AttentionBackwardScratch(head_size, heads.group, seq_len, k16).layout.per_thread());
  const size_t compute = storage == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(per_thread) * static_cast<size_t>(threads) * compute;
}

void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  const Dims d = dims_of(qkv, heads);
  dispatch_storage(qkv.dtype, [&]<typename S>() {
    forward_impl<S>(d, storage_ptr<S>(out), lse.ptr<compute_t<S>>(), storage_ptr<S>(qkv));
  });
}

void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  const Dims d = dims_of(qkv, heads);
  dispatch_storage(qkv.dtype, [&]<typename S>() {
    backward_impl<S>(d, storage_ptr<S>(dqkv), storage_ptr<S>(dout), storage_ptr<S>(qkv), storage_ptr<S>(out),
                     lse.ptr<compute_t<S>>());
  });
}

}  // namespace dt::kernels::cpu
