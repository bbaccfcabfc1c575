#include "kernels/attention.h"

#include <string_view>

#include "kernels/dispatch.h"

namespace dt::kernels {
namespace {

// Checks the head counts against qkv and returns HS.
int64_t head_size(std::string_view op, const Tensor& qkv, const AttentionHeads& h) {
  const int n_head = h.n_head, n_kv_head = h.n_kv_head;
  DT_CHECK(qkv.ndim() == 3, op, ": qkv is ", qkv.describe(), ", expected (B, T, (NH + 2*NKV) * HS)");
  DT_CHECK(n_head > 0 && n_kv_head > 0, op, ": n_head = ", n_head, ", n_kv_head = ", n_kv_head,
           "; both must be positive");
  // Every key/value head is read, by whole runs of query heads: the first by head 0, the last by
  // the last.
  DT_CHECK(h.group > 0 && h.phase >= 0 && h.phase < h.group && h.kv_of(n_head - 1) == n_kv_head - 1, op,
           ": query heads (h + ", h.phase, ") / ", h.group, " for h < ", n_head, " do not read key/value heads 0 to ",
           n_kv_head - 1);
  const int64_t heads = n_head + 2 * int64_t{n_kv_head};
  DT_CHECK(qkv.dim(2) > 0 && qkv.dim(2) % heads == 0, op, ": qkv is ", qkv.describe(), ", its last dim must be (NH + 2*NKV) * HS = ",
           heads, " * HS for NH = ", n_head, ", NKV = ", n_kv_head);
  return qkv.dim(2) / heads;
}

}  // namespace

void attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  constexpr std::string_view op = "attention_forward";
  expect_storage_dtype(op, qkv);
  const int64_t HS = head_size(op, qkv, heads), B = qkv.dim(0), T = qkv.dim(1);
  expect_dtype(op, "out", out, qkv.dtype, qkv.device);
  expect_dtype(op, "lse", lse, accumulation_dtype(qkv.dtype), qkv.device);
  expect_shape(op, "out", out, {B, T, heads.n_head * HS});
  expect_shape(op, "lse", lse, {B, heads.n_head, T});
  expect_disjoint(op, "out", out, "qkv", qkv);
  expect_disjoint(op, "lse", lse, "qkv", qkv);
  DT_DISPATCH_DEVICE(attention_forward, qkv.device, out, lse, qkv, heads);
}

void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  constexpr std::string_view op = "attention_backward";
  expect_storage_dtype(op, qkv);
  const int64_t HS = head_size(op, qkv, heads), B = qkv.dim(0), T = qkv.dim(1);
  expect_dtype(op, "dqkv", dqkv, qkv.dtype, qkv.device);
  expect_dtype(op, "dout", dout, qkv.dtype, qkv.device);
  expect_dtype(op, "out", out, qkv.dtype, qkv.device);
  expect_dtype(op, "lse", lse, accumulation_dtype(qkv.dtype), qkv.device);
  expect_shape(op, "dqkv", dqkv, qkv.shape);
  expect_shape(op, "dout", dout, {B, T, heads.n_head * HS});
  expect_shape(op, "out", out, {B, T, heads.n_head * HS});
  expect_shape(op, "lse", lse, {B, heads.n_head, T});
  expect_disjoint(op, "dqkv", dqkv, "qkv", qkv);
  expect_disjoint(op, "dqkv", dqkv, "dout", dout);
  expect_disjoint(op, "dqkv", dqkv, "out", out);
  expect_disjoint(op, "dqkv", dqkv, "lse", lse);
  DT_DISPATCH_DEVICE(attention_backward, qkv.device, dqkv, dout, qkv, out, lse, heads);
}

}  // namespace dt::kernels
