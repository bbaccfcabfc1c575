#include "parallel/context/ring_attention.h"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/trace.h"
#include "kernels/convert.h"
#include "kernels/rope.h"

namespace dt {

namespace k = kernels;

namespace {

size_t bytes_of(DType dtype, int64_t n) { return static_cast<size_t>(n) * dtype_size(dtype); }

// Columns [first, first + width) of every row of x (rows, W) into `to` (rows, width), or back.
void copy_columns(Tensor to, int64_t to_first, const Tensor& from, int64_t from_first, int64_t width) {
  const size_t e = dtype_size(from.dtype);
  copy_rows(static_cast<char*>(to.data) + to_first * e, static_cast<size_t>(to.dim(1)) * e,
            static_cast<const char*>(from.data) + from_first * e, static_cast<size_t>(from.dim(1)) * e,
            static_cast<size_t>(width) * e, static_cast<size_t>(from.dim(0)), from.device);
}

}  // namespace

RingAttention::CallBytes RingAttention::call_bytes(int64_t batch, int64_t local_len, int64_t head_size,
                                                   kernels::AttentionHeads heads, DType storage, bool rope,
                                                   kernels::cpu::BlockScratchBytes kernels) {
  const int64_t N = batch * local_len, A = heads.n_head * head_size, KV = 2 * heads.n_kv_head * head_size;
  const DType acc = storage == DType::f64 ? DType::f64 : DType::f32;
  const bool widened = storage != acc;
  CallBytes bytes;
  bytes.activations = 2 * bytes_of(storage, N * KV) + 2 * bytes_of(acc, N * KV);  // backward's blocks and grads
  const size_t forward = (widened ? bytes_of(acc, N * A) : 0) + kernels.forward;
  const size_t rounded = widened ? bytes_of(storage, N * (A + KV)) : 0;  // after the blocks
  const size_t backward = bytes_of(acc, N * A) + std::max(kernels.backward, rounded);
  bytes.workspace = (rope ? 2 * bytes_of(DType::f32, local_len * (head_size / 2)) : 0) + std::max(forward, backward);
  return bytes;
}

RingAttention::RingAttention(Communicator& group, ContextLayout layout, kernels::AttentionHeads heads,
                             int64_t batch, Tensor rope_cos, Tensor rope_sin)
    : group_(group),
      layout_(layout),
      heads_(heads),
      B_(batch),
      Tl_(layout.local_len()),
      Tc_(layout.chunk_len()) {
  layout_.validate();
  DT_CHECK(group.size() == layout.ranks && group.rank() == layout.rank, "ring attention of cp rank ", layout.rank,
           " of ", layout.ranks, " over a group of ", group.size(), " as rank ", group.rank());
  if (!rope_cos.defined()) return;
  // The tables' rows of this rank's chunks, one after another.
  const int64_t half = rope_cos.dim(1);
  cos_ = Buffer(bytes_of(rope_cos.dtype, Tl_ * half), MemTag::workspace, rope_cos.device, false);
  sin_ = Buffer(bytes_of(rope_sin.dtype, Tl_ * half), MemTag::workspace, rope_sin.device, false);
  const std::vector<int> chunks = layout_.own_chunks();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const size_t row = bytes_of(rope_cos.dtype, half), at = i * static_cast<size_t>(Tc_) * row;
    const size_t from = static_cast<size_t>(chunks[i] * Tc_) * row, n = static_cast<size_t>(Tc_) * row;
    copy_bytes(static_cast<char*>(cos_.data()) + at, rope_cos.device, static_cast<const char*>(rope_cos.data) + from,
               rope_cos.device, n);
    copy_bytes(static_cast<char*>(sin_.data()) + at, rope_sin.device, static_cast<const char*>(rope_sin.data) + from,
               rope_sin.device, n);
  }
}

template <typename Fn>
void RingAttention::for_each_pair(int owner, Fn&& fn) const {
  const std::vector<int> queries = layout_.own_chunks(), keys = layout_.chunks_of(owner);
  for (int64_t b = 0; b < B_; ++b)
    for (size_t a = 0; a < queries.size(); ++a)
      for (size_t c = 0; c < keys.size(); ++c) {
        if (keys[c] > queries[a]) continue;  // a later chunk: masked out entirely
        fn(b, static_cast<int64_t>(a), static_cast<int64_t>(c),
           keys[c] == queries[a] ? k::BlockMask::causal : k::BlockMask::full);
      }
}

Tensor RingAttention::rows(const Tensor& t, int64_t b, int64_t chunk) const {
  return t.slice_rows(b * Tl_ + chunk * Tc_, Tc_).reshape({1, Tc_, t.dim(1)});
}

Tensor RingAttention::lse_rows(const Tensor& lse, int64_t b, int64_t chunk) const {
  const int64_t NH = heads_.n_head, local_chunks = static_cast<int64_t>(layout_.own_chunks().size());
  return lse.reshape({lse.numel()}).slice_rows((b * local_chunks + chunk) * NH * Tc_, NH * Tc_).reshape({1, NH, Tc_});
}

std::array<Buffer, 2> RingAttention::key_value_blocks(const Tensor& qkv, int64_t A) const {
  const int64_t N = B_ * Tl_, KV = qkv.dim(1) - A;
  std::array<Buffer, 2> blocks = {Buffer(bytes_of(qkv.dtype, N * KV), MemTag::activations, qkv.device, false),
                                  Buffer(bytes_of(qkv.dtype, N * KV), MemTag::activations, qkv.device, false)};
  copy_columns(blocks[0].view(qkv.dtype, {N, KV}), 0, qkv, A, KV);
  return blocks;
}

void RingAttention::rotate(Tensor qkv, bool backward) const {
  if (cos_.data() == nullptr) return;
  const int64_t half = cos_.bytes() / dtype_size(DType::f32) / Tl_;
  const Tensor q = qkv.reshape({B_, Tl_, qkv.dim(1)}), cos = cos_.view(DType::f32, {Tl_, half}),
               sin = sin_.view(DType::f32, {Tl_, half});
  if (backward)
    k::rope_backward(q, cos, sin, heads_.n_head, heads_.n_kv_head);
  else
    k::rope_forward(q, cos, sin, heads_.n_head, heads_.n_kv_head);
}

void RingAttention::forward(Tensor qkv, Tensor atty, Tensor lse) {
  rotate(qkv, /*backward=*/false);
  rerun(qkv, atty, lse);
}

void RingAttention::rerun(Tensor qkv, Tensor atty, Tensor lse) {
  const int64_t N = B_ * Tl_, W = qkv.dim(1), A = atty.dim(1), KV = W - A;
  const int64_t local_chunks = static_cast<int64_t>(layout_.own_chunks().size());
  const DType storage = qkv.dtype, acc = storage == DType::f64 ? DType::f64 : DType::f32;
  const int P = group_.size(), r = group_.rank();
  // The block in hand and the one arriving, each (N, KV): this rank's keys and values first.
  const std::array<Buffer, 2> blocks = key_value_blocks(qkv, A);
  // The output accumulates in f32: atty itself when it is f32.
  Buffer out_acc;
  const Tensor out =
      storage == acc ? atty
                     : (out_acc = Buffer(bytes_of(acc, N * A), MemTag::workspace, qkv.device, false)).view(acc, {N, A});
  std::vector<bool> started(static_cast<size_t>(B_ * local_chunks), false);
  for (int step = 0; step < P; ++step) {
    const Tensor block = blocks[step % 2].view(storage, {N, KV});
    // The next block travels while this one is computed.
    CollectiveHandle passed;
    if (step + 1 < P) {
      passed = group_.exchange(block, (r + 1) % P, blocks[(step + 1) % 2].view(storage, {N, KV}), (r - 1 + P) % P);
      bytes_sent_ += static_cast<int64_t>(block.bytes());
    }
    const trace::ComputeScope span(str("ring attention forward, step ", step));
    for_each_pair((r - step + P) % P, [&](int64_t b, int64_t a, int64_t c, k::BlockMask mask) {
      const size_t which = static_cast<size_t>(b * local_chunks + a);
      k::attention_block_forward(rows(out, b, a), lse_rows(lse, b, a), rows(qkv, b, a), rows(block, b, c), heads_, mask,
                                 !started[which]);
      started[which] = true;
    });
    if (step + 1 < P) passed.wait();
  }
  if (storage != acc) k::convert(atty, out);
}

void RingAttention::backward(Tensor dqkv, Tensor datty, Tensor qkv, Tensor atty, Tensor lse) {
  const int64_t N = B_ * Tl_, W = qkv.dim(1), A = atty.dim(1), KV = W - A;
  const DType storage = qkv.dtype, acc = storage == DType::f64 ? DType::f64 : DType::f32;
  const Device device = qkv.device;
  const int P = group_.size(), r = group_.rank();
  // Each block travels with its keys' and values' gradient (f32), which every rank adds to.
  const std::array<Buffer, 2> blocks = key_value_blocks(qkv, A);
  const Buffer grads[2] = {Buffer(bytes_of(acc, N * KV), MemTag::activations, device, true),
                           Buffer(bytes_of(acc, N * KV), MemTag::activations, device, false)};
  const Buffer dq_acc(bytes_of(acc, N * A), MemTag::workspace, device, true);
  const Tensor dq = dq_acc.view(acc, {N, A});
  for (int step = 0; step < P; ++step) {
    const Tensor block = blocks[step % 2].view(storage, {N, KV}), grad = grads[step % 2].view(acc, {N, KV});
    CollectiveHandle passed;
    if (step + 1 < P) {  // the keys and values travel while this step computes
      passed = group_.exchange(block, (r + 1) % P, blocks[(step + 1) % 2].view(storage, {N, KV}), (r - 1 + P) % P);
      bytes_sent_ += static_cast<int64_t>(block.bytes());
    }
    std::optional<trace::ComputeScope> span(std::in_place, str("ring attention backward, step ", step));
    for_each_pair((r - step + P) % P, [&](int64_t b, int64_t a, int64_t c, k::BlockMask mask) {
      k::attention_block_backward(rows(dq, b, a), rows(grad, b, c), rows(datty, b, a), rows(qkv, b, a),
                                  rows(block, b, c), rows(atty, b, a), lse_rows(lse, b, a), heads_, mask);
    });
    // The block's gradient goes on with it; after the last step, to the block's owner (the next
    // rank): the gradient that arrives is this rank's own, complete.
    span.reset();
    if (P > 1) {
      bytes_sent_ += static_cast<int64_t>(grad.bytes());
      group_.exchange(grad, (r + 1) % P, grads[(step + 1) % 2].view(acc, {N, KV}), (r - 1 + P) % P).wait();
    }
    if (step + 1 < P) passed.wait();
  }
  // The gradients into dqkv's columns, in the storage type: q, then this rank's keys and values.
  const Tensor own = grads[P == 1 ? 0 : P % 2].view(acc, {N, KV});
  if (storage == acc) {
    copy_columns(dqkv, 0, dq, 0, A);
    copy_columns(dqkv, A, own, 0, KV);
  } else {
    const Buffer rounded(bytes_of(storage, N * W), MemTag::workspace, device, false);
    const Tensor q16 = rounded.view(storage, {N * W}).slice_rows(0, N * A).reshape({N, A});
    const Tensor kv16 = rounded.view(storage, {N * W}).slice_rows(N * A, N * KV).reshape({N, KV});
    k::convert(q16, dq);
    k::convert(kv16, own);
    copy_columns(dqkv, 0, q16, 0, A);
    copy_columns(dqkv, A, kv16, 0, KV);
  }
  rotate(dqkv, /*backward=*/true);
}

}  // namespace dt
