#include "kernels/cpu/onednn_matmul.h"

#include <dnnl.hpp>
#include <unordered_map>

#include "core/error.h"

namespace dt::kernels::cpu {

namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::data_type onednn_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    default:
      DT_CHECK(false, "onednn_matmul takes f32 or bf16, not ", dtype_name(dtype));
  }
  __builtin_unreachable();
}

// The (rows, cols) matrix op(X) of a row-major stored matrix with leading dimension ld.
dnnl::memory::desc matrix(int64_t rows, int64_t cols, const MatmulOperand& x, DType dtype) {
  const dnnl::memory::dims strides = x.transposed ? dnnl::memory::dims{1, x.ld} : dnnl::memory::dims{x.ld, 1};
  return dnnl::memory::desc({rows, cols}, onednn_type(dtype), strides);
}

}  // namespace

void onednn_matmul(int64_t M, int64_t N, int64_t K, MatmulOperand a, MatmulOperand b, DType ab_dtype, void* c,
                   int64_t ldc, DType c_dtype, bool accumulate, const void* bias) {
  try {
    const auto a_md = matrix(M, K, a, ab_dtype), b_md = matrix(K, N, b, ab_dtype);
    const auto c_md = matrix(M, N, {c, ldc, false}, c_dtype);
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::engine& engine = cpu_engine();
    const dnnl::memory::desc bias_md =
        bias ? dnnl::memory::desc({1, N}, onednn_type(ab_dtype), dnnl::memory::dims{N, 1}) : dnnl::memory::desc();
    const dnnl::matmul::primitive_desc pd(
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    dnnl::stream stream(engine);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(a_md, engine, const_cast<void*>(a.data))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine, const_cast<void*>(b.data))},
        {DNNL_ARG_DST, dnnl::memory(c_md, engine, c)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine, const_cast<void*>(bias)));
    dnnl::matmul(pd).execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(str("oneDNN matmul of (", M, " x ", K, ") by (", K, " x ", N, "), ", dtype_name(ab_dtype), " -> ",
                    dtype_name(c_dtype), " failed: ", e.what(), " (status ", static_cast<int>(e.status), ")"));
  }
}

bool onednn_has_native_bf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace dt::kernels::cpu
