// Causal grouped-query attention on the CPU, flash-attention style (Dao et al., FlashAttention-2).
//
// Forward: one unit of work is (b, h, query tile of kQueryTile rows). It walks the key tiles up
// to the diagonal, keeping a running max and running sum per row (online softmax), rescales
// and accumulates its output tile, and saves lse = max + log(sum). Units write disjoint rows of
// out and lse; the longest (last) query tiles are handed out first for load balance.
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
// per-thread scratch; everything else is read in place from qkv and dout.
//
// Cost in context: in a GPT-2 training step of d_model 768, 4 layers, B = 8, T = 256 on one
// core, attention forward and backward together take about 3% of the step's samples under
// `perf record build/dtrain bench step --model gpt2-124m --n-layer 4 --threads 1`; the GEMMs
// of the linear layers and the classifier take over 70%.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/buffer.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu/vec_exp.h"

namespace dt::kernels::cpu {
namespace {

// 64 x 64: a tile row is 4 AVX-512 registers of f32 and tile_gemm's 8-row blocks divide it; the
// backward's per-thread working set (K^T, V^T, P, dS tiles plus the q, dout, dq, dk, dv rows it
// streams) is ~130 KiB at HS = 64, in L2. Smaller key tiles waste less of the diagonal tile but
// pay more per-tile overhead; timings for 32, 64 and 128 are in the header comment.
constexpr int kQueryTile = 64;
constexpr int kKeyTile = 64;

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

// Offsets of one thread's scratch arrays. Each is rounded up to 16 elements (64 bytes of f32,
// 128 of f64) so that tile rows start on cache lines; one list both sizes and places them.
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

// Where one thread's arrays lie in its scratch: the forward's q^T, S^T and output tiles and the
// softmax's running max, sum and new max; with 16-bit storage also the widened k and v tiles.
struct ForwardScratch {
  ScratchLayout layout;
  int64_t qt, st, o, max, sum, new_max, kw = 0, vw = 0;
  ForwardScratch(int HS, bool k16) {
    qt = layout.add(int64_t{HS} * kQueryTile), st = layout.add(kKeyTile * kQueryTile);
    o = layout.add(int64_t{kQueryTile} * HS), max = layout.add(kQueryTile);
    sum = layout.add(kQueryTile), new_max = layout.add(kQueryTile);
    if (k16) kw = layout.add(int64_t{kKeyTile} * HS), vw = layout.add(int64_t{kKeyTile} * HS);
  }
};

// The backward's: K^T, V^T, P and dS tiles and the rows' deltas; with 16-bit storage also the
// widened k, q and dout tiles and the f32 accumulators of dk and dv (one key tile) and dq (every
// query row of the unit's `group` heads).
struct BackwardScratch {
  ScratchLayout layout;
  int64_t kt, vt, p, ds, delta, kw = 0, qw = 0, dow = 0, dk = 0, dv = 0, dq = 0;
  BackwardScratch(int HS, int group, int64_t T, bool k16) {
    kt = layout.add(int64_t{HS} * kKeyTile), vt = layout.add(int64_t{HS} * kKeyTile);
    p = layout.add(kQueryTile * kKeyTile), ds = layout.add(kQueryTile * kKeyTile), delta = layout.add(group * T);
    if (k16) {
      kw = layout.add(int64_t{kKeyTile} * HS), qw = layout.add(int64_t{kQueryTile} * HS);
      dow = layout.add(int64_t{kQueryTile} * HS), dk = layout.add(int64_t{kKeyTile} * HS);
      dv = layout.add(int64_t{kKeyTile} * HS), dq = layout.add(group * T * HS);
    }
  }
};

// Per-thread scratch for one call, from the tagged allocator.
template <typename T>
Buffer allocate_scratch(const ScratchLayout& layout, int threads) {
  return Buffer(static_cast<size_t>(layout.per_thread()) * threads * sizeof(T), MemTag::workspace, Device::cpu,
                /*zero=*/false);
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

// Stores the f32 tile (rows, cols), src_ld apart, into S rows dst_ld apart.
template <typename S>
void store_tile(const float* src, int64_t rows, int cols, int64_t src_ld, S* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) store(dst + r * dst_ld + c, src[r * src_ld + c]);
}

// Causal mask: how many of the n keys starting at j0 query i may see, between 0 and n.
int visible_keys(int64_t i, int64_t j0, int n) { return static_cast<int>(std::clamp<int64_t>(i - j0 + 1, 0, n)); }

// The forward works on S^T (keys x queries): then q^T is the operand tile_gemm wants row-major,
// transposed once per unit rather than k once per key tile, and the softmax's per-query max and
// sum run down the columns, vectorized across queries with no horizontal reductions.
template <typename S>
void forward_impl(const Dims& d, S* out, compute_t<S>* lse, const S* qkv) {
  using T = compute_t<S>;
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const T scale = T(1) / std::sqrt(T(d.HS));
  const int64_t n_qtiles = (d.T + kQueryTile - 1) / kQueryTile;
  const ForwardScratch at(d.HS, is_16bit<S>);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(at.layout, threads);

#pragma omp parallel num_threads(threads)
  {
    T* base = static_cast<T*>(scratch.data()) + omp_get_thread_num() * at.layout.per_thread();
    T *qt = base + at.qt, *st = base + at.st, *o = base + at.o;
    T *row_max = base + at.max, *row_sum = base + at.sum, *new_max = base + at.new_max;
    T *kw = base + at.kw, *vw = base + at.vw;
    // Static schedule, query tiles fastest: a thread takes consecutive tiles of one head, whose
    // keys and values are then still in its cache.
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < d.B * d.NH * n_qtiles; ++unit) {
      const int64_t i0 = unit % n_qtiles * kQueryTile;
      const int64_t b = unit / n_qtiles / d.NH;
      const int h = static_cast<int>(unit / n_qtiles % d.NH), g = d.heads.kv_of(h);
      const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.T - i0));
      transpose(qkv + (b * d.T + i0) * d.qkv_row + d.q_col(h), M, d.HS, d.qkv_row, qt, kQueryTile);
      std::fill_n(row_max, M, kMinusInf);
      std::fill_n(row_sum, M, T(0));
      std::fill_n(o, int64_t{M} * d.HS, T(0));
      // Keys past the tile's last query are hidden from all of it: stop there. Key 0, in the first
      // key tile, is visible to every query, so each row max is finite from then on.
      for (int64_t j0 = 0; j0 < i0 + M; j0 += kKeyTile) {
        const int N = static_cast<int>(std::min<int64_t>(kKeyTile, i0 + M - j0));
        const TileView<S> k = tile_of(qkv + (b * d.T + j0) * d.qkv_row + d.k_col(g), N, d.HS, d.qkv_row, kw);
        const TileView<S> v = tile_of(qkv + (b * d.T + j0) * d.qkv_row + d.v_col(g), N, d.HS, d.qkv_row, vw);
        tile_gemm(N, M, d.HS, scale, k.data, k.ld, 1, qt, kQueryTile, st, kQueryTile, Store::set);
        std::copy_n(row_max, M, new_max);
        for (int j = 0; j < N; ++j) {
          T* st_row = st + int64_t{j} * kQueryTile;
          // Queries before key j0 + j may not see it; exp(-inf) = 0 below.
          std::fill_n(st_row, std::clamp<int64_t>(j0 + j - i0, 0, M), kMinusInf);
          for (int i = 0; i < M; ++i) new_max[i] = st_row[i] > new_max[i] ? st_row[i] : new_max[i];
        }
        // Rescale what earlier key tiles contributed to each query's new max.
        for (int i = 0; i < M; ++i) {
          const T correction = vec_exp(row_max[i] - new_max[i]);
          row_sum[i] *= correction;
          row_max[i] = new_max[i];
          for (int c = 0; c < d.HS; ++c) o[int64_t{i} * d.HS + c] *= correction;
        }
        for (int j = 0; j < N; ++j) {
          T* p_row = st + int64_t{j} * kQueryTile;
          for (int i = 0; i < M; ++i) {
            p_row[i] = vec_exp(p_row[i] - row_max[i]);
            row_sum[i] += p_row[i];
          }
        }
        round_tile<S>(st, N, M, kQueryTile);  // P to S for P.V; row_sum has the f32 P
        tile_gemm(M, d.HS, N, T(1), st, 1, kQueryTile, v.data, v.ld, o, d.HS, Store::add);
      }
      for (int i = 0; i < M; ++i) {
        const T inv_sum = T(1) / row_sum[i];
        S* out_row = out + (b * d.T + i0 + i) * d.out_row + d.q_col(h);
        for (int c = 0; c < d.HS; ++c) store(out_row + c, o[int64_t{i} * d.HS + c] * inv_sum);
        lse[(b * d.NH + h) * d.T + i0 + i] = row_max[i] + std::log(row_sum[i]);
      }
    }
  }
}

template <typename S>
void backward_impl(const Dims& d, S* dqkv, const S* dout, const S* qkv, const S* out, const compute_t<S>* lse) {
  using T = compute_t<S>;
  constexpr bool k16 = is_16bit<S>;
  const T scale = T(1) / std::sqrt(T(d.HS));
  const int group = d.group();
  const BackwardScratch at(d.HS, group, d.T, k16);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(at.layout, threads);

#pragma omp parallel num_threads(threads)
  {
    T* base = static_cast<T*>(scratch.data()) + omp_get_thread_num() * at.layout.per_thread();
    T *kt = base + at.kt, *vt = base + at.vt, *p = base + at.p, *ds = base + at.ds, *delta = base + at.delta;
    T *kw = base + at.kw, *qw = base + at.qw, *dow = base + at.dow;
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
          delta[hh * d.T + i] = dot;
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
        const TileView<S> k = tile_of(qkv_b + j0 * d.qkv_row + d.k_col(g), N, d.HS, d.qkv_row, kw);
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
        transpose(qkv_b + j0 * d.qkv_row + d.k_col(g), N, d.HS, d.qkv_row, kt, kKeyTile);
        transpose(qkv_b + j0 * d.qkv_row + d.v_col(g), N, d.HS, d.qkv_row, vt, kKeyTile);
        for (int hh = 0; hh < heads; ++hh) {
          const int h = h0 + hh;
          // Query tiles wholly above this key tile see none of it.
          for (int64_t i0 = j0 / kQueryTile * kQueryTile; i0 < d.T; i0 += kQueryTile) {
            const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.T - i0));
            const TileView<S> q = tile_of(qkv_b + i0 * d.qkv_row + d.q_col(h), M, d.HS, d.qkv_row, qw);
            const TileView<S> dout_tile = tile_of(dout_b + i0 * d.out_row + d.q_col(h), M, d.HS, d.out_row, dow);
            T* dq;
            int64_t dq_ld;
            if constexpr (k16) {
              dq = dq_acc + (hh * d.T + i0) * d.HS, dq_ld = d.HS;
            } else {
              dq = dqkv_b + i0 * d.qkv_row + d.q_col(h), dq_ld = d.qkv_row;
            }
            const T* lse_tile = lse + (b * d.NH + h) * d.T + i0;
            const T* delta_tile = delta + hh * d.T + i0;
            tile_gemm(M, N, d.HS, scale, q.data, q.ld, 1, kt, kKeyTile, p, kKeyTile, Store::set);
            for (int i = 0; i < M; ++i) {
              T* p_row = p + int64_t{i} * kKeyTile;
              const int visible = visible_keys(i0 + i, j0, N);
              const T row_lse = lse_tile[i];
              // All N, then zero the hidden ones: a loop over `visible` would run its remainder
              // one scalar exp at a time.
              for (int j = 0; j < N; ++j) p_row[j] = vec_exp(p_row[j] - row_lse);
              std::fill(p_row + visible, p_row + N, T(0));
            }
            tile_gemm(M, N, d.HS, T(1), dout_tile.data, dout_tile.ld, 1, vt, kKeyTile, ds, kKeyTile, Store::set);
            for (int i = 0; i < M; ++i) {
              const T* p_row = p + int64_t{i} * kKeyTile;
              T* ds_row = ds + int64_t{i} * kKeyTile;
              for (int j = 0; j < N; ++j) ds_row[j] = p_row[j] * (ds_row[j] - delta_tile[i]);
            }
            // P and dS to S for their products (16-bit storage); dS above used the f32 P.
            round_tile<S>(p, M, N, kKeyTile);
            round_tile<S>(ds, M, N, kKeyTile);
            tile_gemm(N, d.HS, M, T(1), p, 1, kKeyTile, dout_tile.data, dout_tile.ld, dv, dkv_ld, Store::add);
            // dS above holds P * (dP - D); the 1 / sqrt(HS) of S = q.k * scale goes in alpha.
            tile_gemm(N, d.HS, M, scale, ds, 1, kKeyTile, q.data, q.ld, dk, dkv_ld, Store::add);
            tile_gemm(M, d.HS, N, scale, ds, kKeyTile, 1, k.data, k.ld, dq, dq_ld, Store::add);
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
  const int64_t per_thread = std::max(ForwardScratch(head_size, k16).layout.per_thread(),
                                      BackwardScratch(head_size, heads.group, seq_len, k16).layout.per_thread());
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
