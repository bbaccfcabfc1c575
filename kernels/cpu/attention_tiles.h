// The tiles of the CPU flash-attention kernels, shared by the whole sequence's causal attention
// (kernels/cpu/attention.cpp) and the blocks that ring attention merges
// (kernels/cpu/attention_block.cpp): tile sizes, per-thread scratch layouts, widened and
// transposed tiles, the forward's walk of one query tile over its key tiles, and the backward's
// products of one (query tile, key tile) pair. Both kernels thus take every sum of a tile in one
// order; they differ in where a tile's rows lie, which keys a query tile walks, and what they
// round (ProductRounding).
//
// Every function here runs inside one thread's unit of work, on that thread's scratch.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/buffer.h"
#include "kernels/attention_block.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu/vec_exp.h"

namespace dt::kernels::cpu {

// 64 x 64: a tile row is 4 AVX-512 registers of f32 and tile_gemm's 8-row blocks divide it; the
// backward's per-thread working set (K^T, V^T, P, dS tiles plus the q, dout, dq, dk, dv rows it
// streams) is ~130 KiB at HS = 64, in L2. Smaller key tiles waste less of the diagonal tile but
// pay more per-tile overhead.
constexpr int kQueryTile = 64;
constexpr int kKeyTile = 64;

// Offsets of one thread's scratch arrays. Each is rounded up to 16 elements (64 bytes of f32,
// 128 of f64) so that tile rows start on cache lines when the scratch does (the allocator's
// buffers are 64-byte aligned); one list both sizes and places them.
class ScratchLayout {
 public:
  int64_t add(int64_t count) {
    const int64_t at = per_thread_;
    per_thread_ += (count + 15) / 16 * 16;
    return at;
  }
  int64_t per_thread() const { return per_thread_; }

 private:
  int64_t per_thread_ = 0;
};

// Per-thread scratch for one call of `threads` threads, from the tagged allocator (workspace):
// the kernels' *_scratch_bytes functions give the same size, for the memory plan.
template <typename T>
Buffer allocate_scratch(const ScratchLayout& layout, int threads) {
  return Buffer(static_cast<size_t>(layout.per_thread()) * threads * sizeof(T), MemTag::workspace, Device::cpu,
                /*zero=*/false);
}

// The calling thread's part of scratch.
template <typename T>
T* thread_scratch(const Buffer& scratch, const ScratchLayout& layout) {
  return static_cast<T*>(scratch.data()) + omp_get_thread_num() * layout.per_thread();
}

// dst(cols, rows) = src(rows, cols)^T, loaded into the compute type; src rows are ld apart, dst
// rows dst_ld apart.
template <typename S, typename T>
void transpose(const S* src, int rows, int cols, int64_t ld, T* dst, int64_t dst_ld) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[c * dst_ld + r] = load(src[r * ld + c]);
}

// A (rows, cols) tile of storage S, ld apart, as tile_gemm reads it: in place for f32 and f64;
// for 16-bit S, widened into scratch (rows cols apart) and read there.
template <typename S>
struct TileView {
  const compute_t<S>* data;
  int64_t ld;
};
template <typename S>
TileView<S> tile_of(const S* src, int rows, int cols, int64_t ld, compute_t<S>* scratch) {
  if constexpr (is_16bit<S>) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) scratch[int64_t{r} * cols + c] = load(src[r * ld + c]);
    return {scratch, cols};
  } else {
    (void)rows, (void)cols, (void)scratch;
    return {src, ld};
  }
}

// Rounds the f32 tile (rows, cols), ld apart, to S in place; nothing for f32 and f64.
template <typename S>
void round_tile(compute_t<S>* tile, int rows, int cols, int64_t ld) {
  if constexpr (is_16bit<S>) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) tile[r * ld + c] = round_to<S>(tile[r * ld + c]);
  } else {
    (void)tile, (void)rows, (void)cols, (void)ld;
  }
}

// Causal mask: how many of the n keys starting at j0 query i may see, between 0 and n.
inline int visible_keys(int64_t i, int64_t j0, int n) {
  return static_cast<int>(std::clamp<int64_t>(i - j0 + 1, 0, n));
}

// With 16-bit storage, what P and dS are in their products (P.V in the forward; P^T.dout, dS^T.q
// and dS.k in the backward): rounded to the storage type, as flash-attention GPU kernels do
// (attention), or kept in the compute type (attention blocks, which compute everything in the
// accumulation type). Row sums and dS itself always use the unrounded P. Nothing for f32 and f64.
enum class ProductRounding { storage, none };

// ---- Forward ----

// One thread's forward arrays: q^T (HS, kQueryTile), S^T (kKeyTile, kQueryTile), the output rows
// (kQueryTile, HS) and, per query, the online softmax's running max, running sum and the key
// tile's new max; with 16-bit storage also the widened k and v tiles (kKeyTile, HS).
template <typename T>
struct ForwardTiles {
  T *qt, *st, *o, *row_max, *row_sum, *new_max, *kw, *vw;

  // A query tile of M rows that has seen no key yet.
  void start(int M, int HS) const {
    std::fill_n(row_max, M, -std::numeric_limits<T>::infinity());
    std::fill_n(row_sum, M, T(0));
    std::fill_n(o, int64_t{M} * HS, T(0));
  }
};

struct ForwardScratch {
  ScratchLayout layout;
  int64_t qt, st, o, max, sum, new_max, kw = 0, vw = 0;
  ForwardScratch(int HS, bool k16) {
    qt = layout.add(int64_t{HS} * kQueryTile), st = layout.add(kKeyTile * kQueryTile);
    o = layout.add(int64_t{kQueryTile} * HS), max = layout.add(kQueryTile);
    sum = layout.add(kQueryTile), new_max = layout.add(kQueryTile);
    if (k16) kw = layout.add(int64_t{kKeyTile} * HS), vw = layout.add(int64_t{kKeyTile} * HS);
  }
  // The arrays in one thread's scratch, which starts at base.
  template <typename T>
  ForwardTiles<T> tiles(T* base) const {
    return {base + qt, base + st, base + o, base + max, base + sum, base + new_max, base + kw, base + vw};
  }
};

// Where one query tile's forward reads: M queries at positions i0, ... (rows q_ld apart) against
// the keys and values at positions 0, ..., keys - 1 (rows kv_ld apart). Causal: query i sees key
// j only for j <= i.
template <typename S>
struct QueryTile {
  const S* q;
  int64_t q_ld;
  int M;
  int64_t i0;
  const S *k, *v;
  int64_t kv_ld, keys;
  BlockMask mask;
};

// The online softmax of FlashAttention-2 over one query tile's key tiles, in order. It works on
// S^T (keys x queries): then q^T is the operand tile_gemm wants row-major, transposed once per
// query tile rather than k once per key tile, and the softmax's per-query max and sum run down
// the columns, vectorized across queries with no horizontal reductions. For each key tile: S^T,
// the running max raised to the tile's, the running sum and output rows rescaled by
// exp(old max - new max), P = exp(S - max) added to the sum and P.V to the output rows.
// The caller sets the running max, sum and output rows before (ForwardTiles::start, or a state
// to continue from) and reads them after: out = o / sum, lse = max + log(sum) (finish_query_tile).
template <typename S>
void forward_query_tile(const QueryTile<S>& t, int HS, ProductRounding rounding, const ForwardTiles<compute_t<S>>& w) {
  using T = compute_t<S>;
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const T scale = T(1) / std::sqrt(T(HS));
  const int M = t.M;
  transpose(t.q, M, HS, t.q_ld, w.qt, kQueryTile);
  for (int64_t j0 = 0; j0 < t.keys; j0 += kKeyTile) {
    const int N = static_cast<int>(std::min<int64_t>(kKeyTile, t.keys - j0));
    const TileView<S> k = tile_of(t.k + j0 * t.kv_ld, N, HS, t.kv_ld, w.kw);
    const TileView<S> v = tile_of(t.v + j0 * t.kv_ld, N, HS, t.kv_ld, w.vw);
    tile_gemm(N, M, HS, scale, k.data, k.ld, 1, w.qt, kQueryTile, w.st, kQueryTile, Store::set);
    std::copy_n(w.row_max, M, w.new_max);
    for (int j = 0; j < N; ++j) {
      T* st_row = w.st + int64_t{j} * kQueryTile;
      // Queries before key j0 + j may not see it; exp(-inf) = 0 below.
      if (t.mask == BlockMask::causal) std::fill_n(st_row, std::clamp<int64_t>(j0 + j - t.i0, 0, M), kMinusInf);
      for (int i = 0; i < M; ++i) w.new_max[i] = st_row[i] > w.new_max[i] ? st_row[i] : w.new_max[i];
    }
    // Rescale what earlier key tiles contributed to each query's new max.
    for (int i = 0; i < M; ++i) {
      const T correction = vec_exp(w.row_max[i] - w.new_max[i]);
      w.row_sum[i] *= correction;
      w.row_max[i] = w.new_max[i];
      for (int c = 0; c < HS; ++c) w.o[int64_t{i} * HS + c] *= correction;
    }
    for (int j = 0; j < N; ++j) {
      T* p_row = w.st + int64_t{j} * kQueryTile;
      for (int i = 0; i < M; ++i) {
        p_row[i] = vec_exp(p_row[i] - w.row_max[i]);
        w.row_sum[i] += p_row[i];
      }
    }
    if (rounding == ProductRounding::storage) round_tile<S>(w.st, N, M, kQueryTile);
    tile_gemm(M, HS, N, T(1), w.st, 1, kQueryTile, v.data, v.ld, w.o, HS, Store::add);
  }
}

// The query tile's M output rows, out = o / sum, stored as O (rows out_ld apart), and its
// log-sum-exp, lse = max + log(sum) (M in a row).
template <typename O, typename T>
void finish_query_tile(const ForwardTiles<T>& w, int M, int HS, O* out, int64_t out_ld, T* lse) {
  for (int i = 0; i < M; ++i) {
    const T inv_sum = T(1) / w.row_sum[i];
    O* out_row = out + i * out_ld;
    for (int c = 0; c < HS; ++c) store(out_row + c, w.o[int64_t{i} * HS + c] * inv_sum);
    lse[i] = w.row_max[i] + std::log(w.row_sum[i]);
  }
}

// Runs fn(w, b, h, i0, M) for every query tile — M rows from i0 of query head h of sequence b,
// for `batch` sequences of `queries` rows and `heads` query heads — on the forward tiles w of
// the thread that takes it. Units write disjoint rows; they are dealt out statically, query
// tiles fastest: a thread takes consecutive tiles of one head, whose keys and values are then
// still in its cache.
template <typename T, typename Fn>
void for_each_query_tile(int64_t batch, int heads, int64_t queries, int HS, bool k16, Fn&& fn) {
  const int64_t n_qtiles = (queries + kQueryTile - 1) / kQueryTile;
  const ForwardScratch at(HS, k16);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(at.layout, threads);
#pragma omp parallel num_threads(threads)
  {
    const ForwardTiles<T> w = at.tiles(thread_scratch<T>(scratch, at.layout));
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < batch * heads * n_qtiles; ++unit) {
      const int64_t i0 = unit % n_qtiles * kQueryTile, b = unit / n_qtiles / heads;
      fn(w, b, static_cast<int>(unit / n_qtiles % heads), i0,
         static_cast<int>(std::min<int64_t>(kQueryTile, queries - i0)));
    }
  }
}

// ---- Backward ----

// One thread's backward arrays: K^T and V^T (HS, kKeyTile), P and dS (kQueryTile, kKeyTile),
// the softmax backward's row term D of every query row of the unit (group * queries); with
// 16-bit storage also the widened k, q and dout tiles.
template <typename T>
struct BackwardTiles {
  T *kt, *vt, *p, *ds, *delta, *kw, *qw, *dow;
};

struct BackwardScratch {
  ScratchLayout layout;
  int64_t kt, vt, p, ds, delta, kw = 0, qw = 0, dow = 0;
  BackwardScratch(int HS, int group, int64_t queries, bool k16) {
    kt = layout.add(int64_t{HS} * kKeyTile), vt = layout.add(int64_t{HS} * kKeyTile);
    p = layout.add(kQueryTile * kKeyTile), ds = layout.add(kQueryTile * kKeyTile), delta = layout.add(group * queries);
    if (k16) {
      kw = layout.add(int64_t{kKeyTile} * HS), qw = layout.add(int64_t{kQueryTile} * HS);
      dow = layout.add(int64_t{kQueryTile} * HS);
    }
  }
  // The arrays in one thread's scratch, which starts at base.
  template <typename T>
  BackwardTiles<T> tiles(T* base) const {
    return {base + kt, base + vt, base + p, base + ds, base + delta, base + kw, base + qw, base + dow};
  }
};

// The backward's key tile of N keys (k, v: rows ld apart): K^T and V^T into the thread's tiles,
// and k as tile_gemm reads it.
template <typename S>
TileView<S> backward_key_tile(const S* k, const S* v, int N, int HS, int64_t ld,
                              const BackwardTiles<compute_t<S>>& w) {
  transpose(k, N, HS, ld, w.kt, kKeyTile);
  transpose(v, N, HS, ld, w.vt, kKeyTile);
  return tile_of(k, N, HS, ld, w.kw);
}

// One (query tile, key tile) pair of the backward: M queries at positions i0, ..., N keys at
// positions j0, ...; the gradients are added into.
template <typename S>
struct TilePair {
  TileView<S> q, dout, k;           // (M, HS), (M, HS), (N, HS)
  const compute_t<S> *kt, *vt;      // K^T, V^T: (HS, N), rows kKeyTile apart
  const compute_t<S> *lse, *delta;  // the M queries'
  int M, N;
  int64_t i0, j0;
  BlockMask mask;
  compute_t<S>* dq;  // (M, HS), rows dq_ld apart
  int64_t dq_ld;
  compute_t<S> *dk, *dv;  // (N, HS), rows dkv_ld apart
  int64_t dkv_ld;
};

// P = exp(S - lse), dP = dout.V^T, dS = P * (dP - D); dv += P^T.dout, dk += dS^T.q / sqrt(HS),
// dq += dS.k / sqrt(HS): five tile products, in this order, on the thread's P and dS tiles.
template <typename S>
void backward_tile_pair(const TilePair<S>& t, int HS, ProductRounding rounding, compute_t<S>* p, compute_t<S>* ds) {
  using T = compute_t<S>;
  const T scale = T(1) / std::sqrt(T(HS));
  const int M = t.M, N = t.N;
  tile_gemm(M, N, HS, scale, t.q.data, t.q.ld, 1, t.kt, kKeyTile, p, kKeyTile, Store::set);
  for (int i = 0; i < M; ++i) {
    T* p_row = p + int64_t{i} * kKeyTile;
    const int visible = t.mask == BlockMask::causal ? visible_keys(t.i0 + i, t.j0, N) : N;
    const T row_lse = t.lse[i];
    // All N, then zero the hidden ones: a loop over `visible` would run its remainder one
    // scalar exp at a time.
    for (int j = 0; j < N; ++j) p_row[j] = vec_exp(p_row[j] - row_lse);
    std::fill(p_row + visible, p_row + N, T(0));
  }
  tile_gemm(M, N, HS, T(1), t.dout.data, t.dout.ld, 1, t.vt, kKeyTile, ds, kKeyTile, Store::set);
  for (int i = 0; i < M; ++i) {
    const T* p_row = p + int64_t{i} * kKeyTile;
    T* ds_row = ds + int64_t{i} * kKeyTile;
    for (int j = 0; j < N; ++j) ds_row[j] = p_row[j] * (ds_row[j] - t.delta[i]);
  }
  // dS above used the unrounded P.
  if (rounding == ProductRounding::storage) {
    round_tile<S>(p, M, N, kKeyTile);
    round_tile<S>(ds, M, N, kKeyTile);
  }
  tile_gemm(N, HS, M, T(1), p, 1, kKeyTile, t.dout.data, t.dout.ld, t.dv, t.dkv_ld, Store::add);
  // dS above holds P * (dP - D); the 1 / sqrt(HS) of S = q.k * scale goes in alpha.
  tile_gemm(N, HS, M, scale, ds, 1, kKeyTile, t.q.data, t.q.ld, t.dk, t.dkv_ld, Store::add);
  tile_gemm(M, HS, N, scale, ds, kKeyTile, 1, t.k.data, t.k.ld, t.dq, t.dq_ld, Store::add);
}

}  // namespace dt::kernels::cpu
