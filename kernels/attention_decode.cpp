#include "kernels/attention_decode.h"

#include <string_view>

#include "kernels/dispatch.h"

namespace dt::kernels {

void attention_decode(Tensor out, Tensor q, Tensor kv, int n_head, int n_kv_head) {
  constexpr std::string_view op = "attention_decode";
  expect_float_dtype(op, q);
  DT_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0, op, ": n_head = ", n_head, ", n_kv_head = ",
           n_kv_head, "; n_head must be a positive multiple of n_kv_head");
  DT_CHECK(q.ndim() == 2 && q.dim(1) > 0 && q.dim(1) % n_head == 0, op, ": q is ", q.describe(),
           ", expected (M, NH*HS) with NH = ", n_head);
  const int64_t M = q.dim(0), HS = q.dim(1) / n_head;
  DT_CHECK(kv.ndim() == 2 && kv.dim(0) >= M && kv.dim(1) == 2 * n_kv_head * HS, op, ": kv is ", kv.describe(),
           ", expected (T, 2*NKV*HS) = (T, ", 2 * n_kv_head * HS, ") with T >= M = ", M,
           ": the cache must already hold the queries' own positions");
  expect_dtype(op, "kv", kv, q.dtype, q.device);
  expect_dtype(op, "out", out, q.dtype, q.device);
  expect_shape(op, "out", out, q.shape);
  expect_disjoint(op, "out", out, "q", q);
  expect_disjoint(op, "out", out, "kv", kv);
  DT_DISPATCH_DEVICE(attention_decode, q.device, out, q, kv, n_head, n_kv_head);
}

}  // namespace dt::kernels
