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

  int group() const { return NH / NKV; }
  int64_t q_col(int h) const { return int64_t{h} * HS; }
  int64_t k_col(int g) const { return int64_t{NH + g} * HS; }
  int64_t v_col(int g) const { return int64_t{NH + NKV + g} * HS; }
};

Dims dims_of(const Tensor& qkv, int n_head, int n_kv_head) {
  Dims d{.B = qkv.dim(0), .T = qkv.dim(1), .NH = n_head, .NKV = n_kv_head, .HS = 0, .qkv_row = qkv.dim(2),
         .out_row = 0};
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

// Per-thread scratch for one call, from the tagged allocator.
template <typename T>
Buffer allocate_scratch(const ScratchLayout& layout, int threads) {
  return Buffer(static_cast<size_t>(layout.per_thread()) * threads * sizeof(T), MemTag::workspace, Device::cpu,
                /*zero=*/false);
}

// dst(cols, rows) = src(rows, cols)^T; src rows are ld apart, dst rows dst_ld apart.
template <typename T>
void transpose(const T* src, int rows, int cols, int64_t ld, T* dst, int64_t dst_ld) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[c * dst_ld + r] = src[r * ld + c];
}

// Causal mask: how many of the n keys starting at j0 query i may see, between 0 and n.
int visible_keys(int64_t i, int64_t j0, int n) { return static_cast<int>(std::clamp<int64_t>(i - j0 + 1, 0, n)); }

// The forward works on S^T (keys x queries): then q^T is the operand tile_gemm wants row-major,
// transposed once per unit rather than k once per key tile, and the softmax's per-query max and
// sum run down the columns, vectorized across queries with no horizontal reductions.
template <typename T>
void forward_impl(const Dims& d, T* out, T* lse, const T* qkv) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const T scale = T(1) / std::sqrt(T(d.HS));
  const int64_t n_qtiles = (d.T + kQueryTile - 1) / kQueryTile;
  ScratchLayout layout;
  const int64_t qt_at = layout.add(int64_t{d.HS} * kQueryTile), st_at = layout.add(kKeyTile * kQueryTile),
                o_at = layout.add(int64_t{kQueryTile} * d.HS), max_at = layout.add(kQueryTile),
                sum_at = layout.add(kQueryTile), new_max_at = layout.add(kQueryTile);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(layout, threads);

#pragma omp parallel num_threads(threads)
  {
    T* base = static_cast<T*>(scratch.data()) + omp_get_thread_num() * layout.per_thread();
    T *qt = base + qt_at, *st = base + st_at, *o = base + o_at;
    T *row_max = base + max_at, *row_sum = base + sum_at, *new_max = base + new_max_at;
    // Static schedule, query tiles fastest: a thread takes consecutive tiles of one head, whose
    // keys and values are then still in its cache.
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < d.B * d.NH * n_qtiles; ++unit) {
      const int64_t i0 = unit % n_qtiles * kQueryTile;
      const int64_t b = unit / n_qtiles / d.NH;
      const int h = static_cast<int>(unit / n_qtiles % d.NH), g = h / d.group();
      const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.T - i0));
      transpose(qkv + (b * d.T + i0) * d.qkv_row + d.q_col(h), M, d.HS, d.qkv_row, qt, kQueryTile);
      std::fill_n(row_max, M, kMinusInf);
      std::fill_n(row_sum, M, T(0));
      std::fill_n(o, int64_t{M} * d.HS, T(0));
      // Keys past the tile's last query are hidden from all of it: stop there. Key 0, in the first
      // key tile, is visible to every query, so each row max is finite from then on.
      for (int64_t j0 = 0; j0 < i0 + M; j0 += kKeyTile) {
        const int N = static_cast<int>(std::min<int64_t>(kKeyTile, i0 + M - j0));
        const T* k = qkv + (b * d.T + j0) * d.qkv_row + d.k_col(g);
        const T* v = qkv + (b * d.T + j0) * d.qkv_row + d.v_col(g);
        tile_gemm(N, M, d.HS, scale, k, d.qkv_row, 1, qt, kQueryTile, st, kQueryTile, Store::set);
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
        tile_gemm(M, d.HS, N, T(1), st, 1, kQueryTile, v, d.qkv_row, o, d.HS, Store::add);
      }
      for (int i = 0; i < M; ++i) {
        const T inv_sum = T(1) / row_sum[i];
        T* out_row = out + (b * d.T + i0 + i) * d.out_row + d.q_col(h);
        for (int c = 0; c < d.HS; ++c) out_row[c] = o[int64_t{i} * d.HS + c] * inv_sum;
        lse[(b * d.NH + h) * d.T + i0 + i] = row_max[i] + std::log(row_sum[i]);
      }
    }
  }
}

template <typename T>
void backward_impl(const Dims& d, T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse) {
  const T scale = T(1) / std::sqrt(T(d.HS));
  const int group = d.group();
  ScratchLayout layout;
  const int64_t kt_at = layout.add(int64_t{d.HS} * kKeyTile), vt_at = layout.add(int64_t{d.HS} * kKeyTile),
                p_at = layout.add(kQueryTile * kKeyTile), ds_at = layout.add(kQueryTile * kKeyTile),
                delta_at = layout.add(group * d.T);
  const int threads = omp_get_max_threads();
  const Buffer scratch = allocate_scratch<T>(layout, threads);

#pragma omp parallel num_threads(threads)
  {
    T* base = static_cast<T*>(scratch.data()) + omp_get_thread_num() * layout.per_thread();
    T *kt = base + kt_at, *vt = base + vt_at, *p = base + p_at, *ds = base + ds_at, *delta = base + delta_at;
#pragma omp for schedule(dynamic)
    for (int64_t unit = 0; unit < d.B * d.NKV; ++unit) {
      const int64_t b = unit / d.NKV;
      const int g = static_cast<int>(unit % d.NKV), h0 = g * group;
      const T* qkv_b = qkv + b * d.T * d.qkv_row;
      T* dqkv_b = dqkv + b * d.T * d.qkv_row;
      const T* dout_b = dout + b * d.T * d.out_row;
      // delta[hh, i] = D = dout . out, the softmax backward's row term for query head h0 + hh.
      // The unit's slice of dqkv (its query heads, then k and v) starts at zero: every
      // gradient below accumulates.
      for (int64_t i = 0; i < d.T; ++i) {
        for (int hh = 0; hh < group; ++hh) {
          const T* dout_row = dout_b + i * d.out_row + d.q_col(h0 + hh);
          const T* out_row = out + (b * d.T + i) * d.out_row + d.q_col(h0 + hh);
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int c = 0; c < d.HS; ++c) dot += dout_row[c] * out_row[c];
          delta[hh * d.T + i] = dot;
        }
        T* dqkv_row = dqkv_b + i * d.qkv_row;
        std::fill_n(dqkv_row + d.q_col(h0), int64_t{group} * d.HS, T(0));
        std::fill_n(dqkv_row + d.k_col(g), d.HS, T(0));
        std::fill_n(dqkv_row + d.v_col(g), d.HS, T(0));
      }
      for (int64_t j0 = 0; j0 < d.T; j0 += kKeyTile) {
        const int N = static_cast<int>(std::min<int64_t>(kKeyTile, d.T - j0));
        const T* k = qkv_b + j0 * d.qkv_row + d.k_col(g);
        T* dk = dqkv_b + j0 * d.qkv_row + d.k_col(g);
        T* dv = dqkv_b + j0 * d.qkv_row + d.v_col(g);
        transpose(k, N, d.HS, d.qkv_row, kt, kKeyTile);
        transpose(qkv_b + j0 * d.qkv_row + d.v_col(g), N, d.HS, d.qkv_row, vt, kKeyTile);
        for (int hh = 0; hh < group; ++hh) {
          const int h = h0 + hh;
          // Query tiles wholly above this key tile see none of it.
          for (int64_t i0 = j0 / kQueryTile * kQueryTile; i0 < d.T; i0 += kQueryTile) {
            const int M = static_cast<int>(std::min<int64_t>(kQueryTile, d.T - i0));
            const T* q = qkv_b + i0 * d.qkv_row + d.q_col(h);
            T* dq = dqkv_b + i0 * d.qkv_row + d.q_col(h);
            const T* dout_tile = dout_b + i0 * d.out_row + d.q_col(h);
            const T* lse_tile = lse + (b * d.NH + h) * d.T + i0;
            const T* delta_tile = delta + hh * d.T + i0;
            tile_gemm(M, N, d.HS, scale, q, d.qkv_row, 1, kt, kKeyTile, p, kKeyTile, Store::set);
            for (int i = 0; i < M; ++i) {
              T* p_row = p + int64_t{i} * kKeyTile;
              const int visible = visible_keys(i0 + i, j0, N);
              const T row_lse = lse_tile[i];
              // All N, then zero the hidden ones: a loop over `visible` would run its remainder
              // one scalar exp at a time.
              for (int j = 0; j < N; ++j) p_row[j] = vec_exp(p_row[j] - row_lse);
              std::fill(p_row + visible, p_row + N, T(0));
            }
            tile_gemm(N, d.HS, M, T(1), p, 1, kKeyTile, dout_tile, d.out_row, dv, d.qkv_row, Store::add);
            tile_gemm(M, N, d.HS, T(1), dout_tile, d.out_row, 1, vt, kKeyTile, ds, kKeyTile, Store::set);
            for (int i = 0; i < M; ++i) {
              const T* p_row = p + int64_t{i} * kKeyTile;
              T* ds_row = ds + int64_t{i} * kKeyTile;
              for (int j = 0; j < N; ++j) ds_row[j] = p_row[j] * (ds_row[j] - delta_tile[i]);
            }
            // dS above holds P * (dP - D); the 1 / sqrt(HS) of S = q.k * scale goes in alpha.
            tile_gemm(N, d.HS, M, scale, ds, 1, kKeyTile, q, d.qkv_row, dk, d.qkv_row, Store::add);
            tile_gemm(M, d.HS, N, scale, ds, kKeyTile, 1, k, d.qkv_row, dq, d.qkv_row, Store::add);
          }
        }
      }
    }
  }
}

}  // namespace

void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head) {
  const Dims d = dims_of(qkv, n_head, n_kv_head);
  switch (qkv.dtype) {
    case DType::f32: return forward_impl(d, out.ptr<float>(), lse.ptr<float>(), qkv.ptr<const float>());
    case DType::f64: return forward_impl(d, out.ptr<double>(), lse.ptr<double>(), qkv.ptr<const double>());
    default: DT_CHECK(false, "attention_forward: no CPU kernel for ", qkv.describe());
  }
}

void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head, int n_kv_head) {
  const Dims d = dims_of(qkv, n_head, n_kv_head);
  switch (qkv.dtype) {
    case DType::f32:
      return backward_impl(d, dqkv.ptr<float>(), dout.ptr<const float>(), qkv.ptr<const float>(),
                           out.ptr<const float>(), lse.ptr<const float>());
    case DType::f64:
      return backward_impl(d, dqkv.ptr<double>(), dout.ptr<const double>(), qkv.ptr<const double>(),
                           out.ptr<const double>(), lse.ptr<const double>());
    default: DT_CHECK(false, "attention_backward: no CPU kernel for ", qkv.describe());
  }
}

}  // namespace dt::kernels::cpu
