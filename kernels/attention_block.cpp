#include "kernels/attention_block.h"

#include <string_view>

#include "kernels/dispatch.h"

namespace dt::kernels {
namespace {

// Checks q, kv and the mask against the heads and returns HS.
int64_t checked_head_size(std::string_view op, const Tensor& q, const Tensor& kv, const AttentionHeads& h,
                          BlockMask mask) {
  expect_storage_dtype(op, q);
  DT_CHECK(q.ndim() == 3 && kv.ndim() == 3 && h.n_head > 0 && h.n_kv_head > 0, op, ": q ", q.describe(), ", kv ",
           kv.describe(), " for ", h.n_head, " query and ", h.n_kv_head, " key/value heads");
  const int64_t heads = h.n_head + 2 * int64_t{h.n_kv_head};
  DT_CHECK(q.dim(2) % heads == 0, op, ": q's rows of ", q.dim(2), " are not (NH + 2*NKV) * HS for NH = ", h.n_head,
           ", NKV = ", h.n_kv_head);
  const int64_t HS = q.dim(2) / heads;
  expect_dtype(op, "kv", kv, q.dtype, q.device);
  expect_shape(op, "kv", kv, {q.dim(0), kv.dim(1), 2 * h.n_kv_head * HS});
  DT_CHECK(mask == BlockMask::full || kv.dim(1) == q.dim(1), op, ": a causal block of ", q.dim(1),
           " queries and ", kv.dim(1), " keys; the causal mask is the diagonal block's, of equal lengths");
  return HS;
}

}  // namespace

void attention_block_forward(Tensor out, Tensor lse, Tensor q, Tensor kv, AttentionHeads heads, BlockMask mask,
                             bool first) {
  constexpr std::string_view op = "attention_block_forward";
  const int64_t HS = checked_head_size(op, q, kv, heads, mask), B = q.dim(0), Tq = q.dim(1);
  const DType acc = accumulation_dtype(q.dtype);
  expect_dtype(op, "out", out, acc, q.device);
  expect_dtype(op, "lse", lse, acc, q.device);
  expect_shape(op, "out", out, {B, Tq, heads.n_head * HS});
  expect_shape(op, "lse", lse, {B, heads.n_head, Tq});
  DT_DISPATCH_DEVICE(attention_block_forward, q.device, out, lse, q, kv, heads, mask, first);
}

void attention_block_backward(Tensor dq, Tensor dkv, Tensor dout, Tensor q, Tensor kv, Tensor out, Tensor lse,
                              AttentionHeads heads, BlockMask mask) {
  constexpr std::string_view op = "attention_block_backward";
  const int64_t HS = checked_head_size(op, q, kv, heads, mask), B = q.dim(0), Tq = q.dim(1);
  const DType acc = accumulation_dtype(q.dtype);
  expect_dtype(op, "dq", dq, acc, q.device);
  expect_dtype(op, "dkv", dkv, acc, q.device);
  expect_dtype(op, "dout", dout, q.dtype, q.device);
  expect_dtype(op, "out", out, q.dtype, q.device);
  expect_dtype(op, "lse", lse, acc, q.device);
  expect_shape(op, "dq", dq, {B, Tq, heads.n_head * HS});
  expect_shape(op, "dkv", dkv, kv.shape);
  expect_shape(op, "dout", dout, {B, Tq, heads.n_head * HS});
  expect_shape(op, "out", out, {B, Tq, heads.n_head * HS});
  expect_shape(op, "lse", lse, {B, heads.n_head, Tq});
  DT_DISPATCH_DEVICE(attention_block_backward, q.device, dq, dkv, dout, q, kv, out, lse, heads, mask);
}

}  // namespace dt::kernels
