// Products of small tiles, for CPU kernels that work tile by tile (attention).
//
//   tile_gemm(Store::set):  c(M, N)  = alpha * a(M, K) @ b(K, N)
//   tile_gemm(Store::add):  c(M, N) += alpha * a(M, K) @ b(K, N)
//
// a is read through two strides (element (m, k) at a[m * a_row + k * a_col]), so a transposed
// operand costs nothing. b and c are row-major with leading dimensions ldb and ldc and unit
// stride along N, the dimension the kernel vectorizes; a caller whose b is transposed copies it
// once into scratch. c must not alias a or b. Any M, N, K >= 0; remainders take narrower kernels.
//
// Why not cblas_sgemm: it needs both operands in memory with unit stride along one dimension
// (a transposed score tile would need a copy), and at this size it is no faster. 64 x 64 x 64,
// one core of this project's Xeon (Emerald Rapids), 20,000 repetitions, three trials: OpenBLAS
// 0.3.21 with its SkylakeX kernels 162-166 GFLOP/s, this kernel 178-183.
#pragma once

#include <cstdint>
#include <cstring>

namespace dt::kernels::cpu {

enum class Store { set, add };

namespace tile_detail {

// One vector register of T (GCC/Clang vector extension): 64 bytes where the build targets
// AVX-512, 32 (AVX2) otherwise. And the same type for memory at any element-aligned address.
#ifdef __AVX512F__
constexpr int kVectorBytes = 64;
#else
constexpr int kVectorBytes = 32;
#endif
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(kVectorBytes)));
  typedef T unaligned __attribute__((vector_size(kVectorBytes), aligned(sizeof(T)), may_alias));
};
template <typename T>
constexpr int kLanes = static_cast<int>(sizeof(typename Vec<T>::type) / sizeof(T));

template <typename T>
inline typename Vec<T>::type load(const T* p) {
  return *reinterpret_cast<const typename Vec<T>::unaligned*>(p);
}
template <typename T>
inline void store(T* p, typename Vec<T>::type v) {
  *reinterpret_cast<typename Vec<T>::unaligned*>(p) = v;
}

// An MR x (NV registers) block of c, its accumulators held in registers over the whole K loop.
template <typename T, int MR, int NV, Store S>
inline void block(int K, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb, T* c,
                  int64_t ldc) {
  using V = typename Vec<T>::type;
  constexpr int W = kLanes<T>;
  V acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = V{};
  for (int k = 0; k < K; ++k) {
    V bk[NV];
    for (int v = 0; v < NV; ++v) bk[v] = load(b + k * ldb + v * W);
    for (int m = 0; m < MR; ++m) {
      const T am = a[m * a_row + k * a_col];
      for (int v = 0; v < NV; ++v) acc[m][v] += am * bk[v];
    }
  }
  for (int m = 0; m < MR; ++m) {
    for (int v = 0; v < NV; ++v) {
      T* cv = c + m * ldc + v * W;
      if constexpr (S == Store::add) {
        store(cv, load(cv) + alpha * acc[m][v]);
      } else {
        store(cv, alpha * acc[m][v]);
      }
    }
  }
}

// The columns left over after the last full register: one at a time.
template <typename T, int MR, Store S>
inline void column(int K, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb, T* c,
                   int64_t ldc) {
  T acc[MR] = {};
  for (int k = 0; k < K; ++k)
    for (int m = 0; m < MR; ++m) acc[m] += a[m * a_row + k * a_col] * b[k * ldb];
  for (int m = 0; m < MR; ++m) c[m * ldc] = alpha * acc[m] + (S == Store::add ? c[m * ldc] : T(0));
}

// Rows [0, MR) of c: the widest blocks first, then single registers, then single columns.
template <typename T, int MR, int NV, Store S>
inline void row_panel(int N, int K, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb,
                      T* c, int64_t ldc) {
  constexpr int W = kLanes<T>;
  int n = 0;
  for (; n + NV * W <= N; n += NV * W) block<T, MR, NV, S>(K, alpha, a, a_row, a_col, b + n, ldb, c + n, ldc);
  for (; n + W <= N; n += W) block<T, MR, 1, S>(K, alpha, a, a_row, a_col, b + n, ldb, c + n, ldc);
  for (; n < N; ++n) column<T, MR, S>(K, alpha, a, a_row, a_col, b + n, ldb, c + n, ldc);
}

template <typename T, int MR, int NV, Store S>
void gemm(int M, int N, int K, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb, T* c,
          int64_t ldc) {
  int m = 0;
  for (; m + MR <= M; m += MR)
    row_panel<T, MR, NV, S>(N, K, alpha, a + m * a_row, a_row, a_col, b, ldb, c + m * ldc, ldc);
  for (; m < M; ++m) row_panel<T, 1, NV, S>(N, K, alpha, a + m * a_row, a_row, a_col, b, ldb, c + m * ldc, ldc);
}

}  // namespace tile_detail

// AVX-512: 8 rows x 2 registers, 16 accumulators + 2 b registers of the 32 zmm registers; each
// a element loaded is used for 2 FMAs. Measured on 64^3 f32 tiles: 8 x 2 at 150 GFLOP/s, 6 x 4
// at 153, 4 x 2 at 124; 8 x 2 is chosen because tiles of 64 rows divide by 8.
// AVX2 has 16 ymm registers: 6 x 2 is 12 accumulators + 2 b + 1 broadcast a. The AVX-512 shape
// there needed 32 registers and spilled: attention took half of a training step. Training
// steps of a 4-layer d_model 256 gpt2 at sequence 256, batch 8, 2 threads of an AVX2 EPYC
// (`dtrain bench step`, two runs each; this shared machine varies by a fifth): the old 8 x 2
// of 64-byte vectors 1,030-1,110 tokens/s; with 32-byte vectors 4 x 2 3,130-3,580, 6 x 2
// 2,880-3,780 (seven runs), 8 x 1 2,920-3,170, 4 x 3 2,810-3,100.
template <typename T>
void tile_gemm(int M, int N, int K, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t ldb,
               T* c, int64_t ldc, Store store) {
#ifdef __AVX512F__
  constexpr int kRows = 8, kRegisters = 2;
#else
  constexpr int kRows = 6, kRegisters = 2;
#endif
  if (store == Store::add) {
    tile_detail::gemm<T, kRows, kRegisters, Store::add>(M, N, K, alpha, a, a_row, a_col, b, ldb, c, ldc);
  } else {
    tile_detail::gemm<T, kRows, kRegisters, Store::set>(M, N, K, alpha, a, a_row, a_col, b, ldb, c, ldc);
  }
}

}  // namespace dt::kernels::cpu
