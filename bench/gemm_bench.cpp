#include "bench/gemm_bench.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/rng.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/onednn_matmul.h"
#include "model/block_declaration.h"

namespace dt {

namespace {

// C(M, N) = op(A)(M, K) @ op(B)(K, N), as one pass of a linear layer computes it.
struct Product {
  std::string name;
  int64_t M, N, K;
  bool trans_a, trans_b;
};

// The three products of each linear layer (y = x W^T): forward, input gradient, weight gradient.
void add_linear(std::vector<Product>& out, const std::string& name, int64_t rows, int64_t in, int64_t out_features) {
  out.push_back({name + " forward", rows, out_features, in, false, true});
  out.push_back({name + " d_input", rows, in, out_features, false, false});
  out.push_back({name + " d_weight", out_features, in, rows, true, false});
}

double median_seconds(int reps, const std::function<void()>& run) {
  run();  // warm-up: primitive creation, weight packing buffers, page faults
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

void run_gemm_bench(const GemmBenchOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (o.reps < 1) throw Error(str("bench gemm: --reps = ", o.reps, " must be at least 1"));
  validate_model_config(o.model);
  kernels::cpu::ensure_blas_ready();
  const ModelConfig& c = o.model;
  const int64_t N = static_cast<int64_t>(o.batch_size) * o.seq_len;
  std::vector<Product> products;
  for (const BlockDeclaration* block : block_declarations(c))
    for (const LinearDeclaration* linear : block->linears())
      add_linear(products, linear->name, N, linear->in_features(c), linear->out_features(c));
  add_linear(products, "classifier", N, c.d_model, c.padded_vocab_size());

  int64_t largest = 0;
  for (const Product& p : products) largest = std::max({largest, p.M * p.K, p.K * p.N, p.M * p.N});
  Buffer a(largest * sizeof(float), MemTag::workspace), b(largest * sizeof(float), MemTag::workspace),
      out(largest * sizeof(float), MemTag::workspace);
  Buffer a16(largest * sizeof(uint16_t), MemTag::workspace), b16(largest * sizeof(uint16_t), MemTag::workspace);
  fill_normal(static_cast<float*>(a.data()), largest, 0, ElementRng(1, "gemm.a"), 0, 1);
  fill_normal(static_cast<float*>(b.data()), largest, 0, ElementRng(1, "gemm.b"), 0, 1);
  for (int64_t i = 0; i < largest; ++i) {
    static_cast<uint16_t*>(a16.data())[i] = float_to_bf16(static_cast<float*>(a.data())[i]);
    static_cast<uint16_t*>(b16.data())[i] = float_to_bf16(static_cast<float*>(b.data())[i]);
  }

  std::printf("# dtrain bench gemm: %s d_model=%d, %lld tokens (batch %d x seq %d), %d threads, median of %d\n",
              std::string(model_family_name(c.family)).c_str(), c.d_model, static_cast<long long>(N), o.batch_size,
              o.seq_len, omp_get_max_threads(), o.reps);
  // oneDNN 2.6 creates no bf16 matmul for a CPU without bf16 units; training then widens bf16
  // to f32 for sgemm (kernels/cpu/linear.cpp), which the openblas_f32 column times.
  const bool native_bf16 = kernels::cpu::onednn_has_native_bf16();
  std::printf("# oneDNN bf16: %s\n", native_bf16 ? "on dedicated units (AMX or AVX-512 BF16)"
                                                : "not available on this CPU (no bf16 units); its column reads nan");
  std::printf("#%-22s %6s %6s %6s %16s %14s %14s %10s\n", "product", "M", "N", "K", "openblas_f32", "onednn_f32",
              "onednn_bf16", "bf16/blas");
  double total_flops = 0, total_blas = 0, total_dnnl = 0, total_bf16 = 0;
  for (const Product& p : products) {
    // Row-major leading dimensions of the stored operands.
    const int64_t lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
    const double flops = 2.0 * p.M * p.N * p.K;
    const double blas = median_seconds(o.reps, [&] {
      cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans, p.M, p.N,
                  p.K, 1.0f, static_cast<float*>(a.data()), lda, static_cast<float*>(b.data()), ldb, 0.0f,
                  static_cast<float*>(out.data()), p.N);
    });
    const auto onednn = [&](const Buffer& x, const Buffer& y, DType dtype) {
      return median_seconds(o.reps, [&] {
        kernels::cpu::onednn_matmul(p.M, p.N, p.K, {x.data(), lda, p.trans_a}, {y.data(), ldb, p.trans_b}, dtype,
                                    out.data(), p.N, DType::f32, false);
      });
    };
    const double dnnl = onednn(a, b, DType::f32), bf16 = native_bf16 ? onednn(a16, b16, DType::bf16) : NAN;
    total_flops += flops, total_blas += blas, total_dnnl += dnnl, total_bf16 += bf16;
    std::printf(" %-22s %6lld %6lld %6lld %11.0f GF/s %9.0f GF/s %9.0f GF/s %9.1fx\n", p.name.c_str(),
                static_cast<long long>(p.M), static_cast<long long>(p.N), static_cast<long long>(p.K), flops / blas / 1e9,
                flops / dnnl / 1e9, flops / bf16 / 1e9, blas / bf16);
  }
  std::printf("# all products of one layer and the classifier: openblas_f32 %.1f ms, onednn_f32 %.1f ms, onednn_bf16 "
              "%.1f ms (%.1fx)\n",
              total_blas * 1e3, total_dnnl * 1e3, total_bf16 * 1e3, total_blas / total_bf16);
  std::printf("result openblas_f32_gflop_per_s=%.1f onednn_f32_gflop_per_s=%.1f onednn_bf16_gflop_per_s=%.1f\n",
              total_flops / total_blas / 1e9, total_flops / total_dnnl / 1e9, total_flops / total_bf16 / 1e9);
}

}  // namespace dt
