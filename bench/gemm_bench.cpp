#include "bench/gemm_bench.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/buffer.h"
#include "core/rng.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/grouped_linear.h"
#include "kernels/linear.h"
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

// Fills a buffer's f32 elements with N(0, 1) values.
void fill(const Buffer& b, const char* stream) {
  fill_normal(static_cast<float*>(b.data()), static_cast<int64_t>(b.bytes() / sizeof(float)), 0, ElementRng(1, stream), 0,
              1);
}

// The experts' layers, each pass as one grouped call (kernels/grouped_linear.h: a linear call per
// expert on its rows) against one linear call over the same rows with one weight: the same FLOPs
// in one product. The N · top_k rows are routed evenly, N · top_k / E per expert.
void time_expert_layers(const ModelConfig& c, int64_t N, int reps) {
  const int64_t E = c.moe.experts, R = N * c.moe.routing.top_k;
  std::vector<int64_t> offsets(static_cast<size_t>(E) + 1);
  for (int64_t e = 0; e <= E; ++e) offsets[static_cast<size_t>(e)] = R * e / E;
  std::printf("# experts: %lld rows (%lld tokens x top %lld) over %lld experts, %lld to %lld each; f32, the training "
              "kernels\n",
              static_cast<long long>(R), static_cast<long long>(N), static_cast<long long>(c.moe.routing.top_k),
              static_cast<long long>(E), static_cast<long long>(R / E), static_cast<long long>((R + E - 1) / E));
  std::printf("#%-26s %6s %6s %14s %14s %14s\n", "product", "in", "out", "grouped", "one_linear", "grouped/one");
  double grouped_total = 0, dense_total = 0, flops_total = 0;
  for (const BlockDeclaration* block : block_declarations(c))
    for (const LinearDeclaration* linear : block->linears()) {
      if (!linear->per_expert) continue;
      const int64_t in = linear->in_features(c), out = linear->out_features(c);
      const Buffer x(static_cast<size_t>(R * in) * sizeof(float), MemTag::workspace),
          y(static_cast<size_t>(R * out) * sizeof(float), MemTag::workspace),
          w(static_cast<size_t>(E * out * in) * sizeof(float), MemTag::workspace),
          dw(static_cast<size_t>(E * out * in) * sizeof(float), MemTag::workspace);
      fill(x, "experts.x"), fill(y, "experts.y"), fill(w, "experts.w"), fill(dw, "experts.dw");
      const Tensor xt = x.view(DType::f32, {R, in}), yt = y.view(DType::f32, {R, out});
      const Tensor wt = w.view(DType::f32, {E, out, in}), dwt = dw.view(DType::f32, {E, out, in});
      const Tensor w0 = w.view(DType::f32, {out, in}), dw0 = dw.view(DType::f32, {out, in});
      const double flops = 2.0 * R * in * out;
      const std::vector<std::tuple<const char*, std::function<void()>, std::function<void()>>> passes = {
          {"forward", [&] { kernels::grouped_linear_forward(yt, xt, wt, offsets); },
           [&] { kernels::linear_forward(yt, xt, w0, Tensor{}); }},
          {"d_input", [&] { kernels::grouped_linear_backward_input(xt, yt, wt, offsets); },
           [&] { kernels::linear_backward_input(xt, yt, w0); }},
          {"d_weight", [&] { kernels::grouped_linear_backward_weight(dwt, yt, xt, offsets); },
           [&] { kernels::linear_backward_weight(dw0, Tensor{}, yt, xt); }}};
      for (const auto& [pass, grouped, dense] : passes) {
        const double g = median_seconds(reps, grouped), d = median_seconds(reps, dense);
        grouped_total += g, dense_total += d, flops_total += flops;
        std::printf(" %-26s %6lld %6lld %9.0f GF/s %9.0f GF/s %13.2f\n", str(linear->name, " ", pass).c_str(),
                    static_cast<long long>(in), static_cast<long long>(out), flops / g / 1e9, flops / d / 1e9, d / g);
      }
    }
  std::printf("result experts_grouped_gflop_per_s=%.1f experts_one_linear_gflop_per_s=%.1f grouped_over_one=%.3f\n",
              flops_total / grouped_total / 1e9, flops_total / dense_total / 1e9, dense_total / grouped_total);
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
  // Every distinct block's linear layers; the experts' are timed as grouped products, after.
  for (const BlockDeclaration* block : block_declarations(c))
    for (const LinearDeclaration* linear : block->linears())
      if (!linear->per_expert) add_linear(products, linear->name, N, linear->in_features(c), linear->out_features(c));
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
  if (c.moe.experts > 0) time_expert_layers(c, N, o.reps);
}

}  // namespace dt
