#include "parallel/tensor/tensor_parallel.h"

#include <functional>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/convert.h"
#include "kernels/vocab_parallel_cross_entropy.h"

namespace dt {

namespace {

// A collective followed by a step on the host's side of it (rounding an f32 sum back into 16-bit
// values, moving rows out of padded parts), run by wait(). The buffers the collective works on
// live as long as it.
class Finished final : public Work {
 public:
  Finished(CollectiveHandle collective, std::function<void()> finish, std::vector<Buffer> buffers)
      : collective_(std::move(collective)), finish_(std::move(finish)), buffers_(std::move(buffers)) {}
  void wait() override {
    if (!finish_) return;
    collective_.wait();
    finish_();
    finish_ = nullptr;
    buffers_.clear();
  }
  bool done() override { return !finish_ || collective_.done(); }

 private:
  CollectiveHandle collective_;
  std::function<void()> finish_;
  std::vector<Buffer> buffers_;
};

CollectiveHandle finished(CollectiveHandle collective, std::function<void()> finish, std::vector<Buffer> buffers) {
  CollectiveInfo info = collective.info();
  return {std::make_unique<Finished>(std::move(collective), std::move(finish), std::move(buffers)), std::move(info)};
}

// Rows [begin, begin + count) of a (rows, width) tensor.
Tensor row_block(Tensor t, int64_t begin, int64_t count) { return t.slice_rows(begin, count); }

}  // namespace

TensorParallel::TensorParallel(Communicator& group, const ModelConfig& config, bool sequence_parallel)
    : group_(group),
      config_(config),
      dims_(shard_dims(config, {group.rank(), group.size()})),
      sequence_parallel_(sequence_parallel) {}

TensorParallel::CommunicationBytes TensorParallel::communication_bytes(const ModelConfig& config, TensorShard shard,
                                                                      int64_t tokens, DType precision,
                                                                      bool sequence_parallel) {
  const ShardDims dims = shard_dims(config, shard);
  const auto f32 = [](int64_t n) { return static_cast<size_t>(n) * sizeof(float); };
  const auto stored = [&](int64_t n) { return static_cast<size_t>(n) * dtype_size(precision); };
  const bool wide = precision == DType::f32;
  const int64_t N = tokens, R = shard.size, C = config.d_model, P = (N + R - 1) / R;
  CommunicationBytes bytes;
  // The loss: every rank's three statistics per token (cross_entropy).
  bytes.loss = f32(R * N * 3);
  if (!sequence_parallel) {
    // Each block's two row outputs and two input gradients, summed whole (sum: widened first).
    bytes.largest_sum = f32(N * C);
    if (!wide) bytes.staging = std::max(bytes.staging, f32(N * C));
  } else {
    // The norms' partial weight gradients (layers.cpp: LayerNorm's weight and bias, RMSNorm's
    // weight); the activations move by reduce-scatter and all-gather, staged when padded or 16-bit.
    bytes.largest_sum = f32(config.traits().norm == NormKind::layernorm ? 2 * C : C);
    if (!wide || N % R != 0) bytes.staging = std::max(bytes.staging, f32(R * P * C) + f32(P * C));
    if (N % R != 0) bytes.staging = std::max(bytes.staging, stored(P * C) + stored(R * P * C));
  }
  if (!dims.heads.kv_split) {  // sum_copied_head_gradients: the model's key/value columns
    const int64_t columns = N * 2 * config.kv_heads() * dims.head_size;
    bytes.largest_sum = std::max(bytes.largest_sum, f32(columns));
    bytes.staging = std::max(bytes.staging, stored(columns) + (wide ? 0 : f32(columns)));
  }
  return bytes;
}

kernels::FlatRange TensorParallel::rows(int64_t n) const {
  return sequence_parallel_ ? even_part(n, group_.size(), group_.rank()) : kernels::FlatRange{0, n};
}

CollectiveHandle TensorParallel::sum(Tensor t) {
  if (t.dtype == DType::f32) return group_.all_reduce(t, ReduceOp::sum);
  Buffer widened(static_cast<size_t>(t.numel()) * sizeof(float), MemTag::communication, t.device, false);
  const Tensor f32 = widened.view(DType::f32, t.shape);
  kernels::convert(f32, t);
  std::vector<Buffer> buffers;
  buffers.push_back(std::move(widened));
  return finished(group_.all_reduce(f32, ReduceOp::sum), [t, f32] { kernels::convert(t, f32); }, std::move(buffers));
}

CollectiveHandle TensorParallel::scatter_sum(Tensor whole, Tensor local) {
  const int64_t R = group_.size(), N = whole.dim(0), C = whole.dim(1), P = (N + R - 1) / R;
  if (whole.dtype == DType::f32 && N == P * R) return group_.reduce_scatter(local, whole, ReduceOp::sum);
  // Each rank's rows at the start of an equal, zero-padded slot, in f32.
  Buffer in(static_cast<size_t>(R * P * C) * sizeof(float), MemTag::communication, whole.device);
  Buffer out(static_cast<size_t>(P * C) * sizeof(float), MemTag::communication, whole.device, false);
  const Tensor padded = in.view(DType::f32, {R * P, C}), mine = out.view(DType::f32, {P, C});
  for (int r = 0; r < R; ++r) {
    const kernels::FlatRange rows = even_part(N, static_cast<int>(R), r);
    kernels::convert(row_block(padded, r * P, rows.size()), row_block(whole, rows.begin, rows.size()));
  }
  std::vector<Buffer> buffers;
  buffers.push_back(std::move(in));
  buffers.push_back(std::move(out));
  return finished(group_.reduce_scatter(mine, padded, ReduceOp::sum),
                  [local, mine] { kernels::convert(local, row_block(mine, 0, local.dim(0))); }, std::move(buffers));
}

void TensorParallel::gather(Tensor whole, Tensor local) {
  const int64_t R = group_.size(), N = whole.dim(0), C = whole.dim(1), P = (N + R - 1) / R;
  if (N == P * R) return group_.all_gather(whole, local).wait();
  // Equal slots, each rank's rows at the start of its own; then the rows moved together.
  const size_t element = dtype_size(whole.dtype);
  Buffer in(static_cast<size_t>(P * C) * element, MemTag::communication, whole.device);
  Buffer out(static_cast<size_t>(R * P * C) * element, MemTag::communication, whole.device, false);
  const Tensor mine = in.view(whole.dtype, {P, C}), all = out.view(whole.dtype, {R * P, C});
  copy_bytes(mine.data, mine.device, local.data, local.device, local.bytes());
  group_.all_gather(all, mine).wait();
  for (int r = 0; r < R; ++r) {
    const kernels::FlatRange rows = even_part(N, static_cast<int>(R), r);
    const Tensor from = row_block(all, r * P, rows.size()), to = row_block(whole, rows.begin, rows.size());
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

Tensor TensorParallel::column_input(Tensor x, Tensor whole) {
  if (!sequence_parallel_) return x;
  gather(whole, x);
  return whole;
}

PendingSum TensorParallel::column_input_gradient(Tensor dx, Tensor local) {
  if (!sequence_parallel_) return {dx, sum(dx)};
  return {local, scatter_sum(dx, local)};
}

Tensor TensorParallel::row_output(Tensor y, Tensor local) {
  if (!sequence_parallel_) {
    sum(y).wait();
    return y;
  }
  scatter_sum(y, local).wait();
  return local;
}

Tensor TensorParallel::row_output_gradient(Tensor dy, Tensor whole) { return column_input(dy, whole); }

void TensorParallel::sum_partial_gradients(Tensor grads) { sum(grads).wait(); }

void TensorParallel::max_over_group(Tensor values) { group_.all_reduce(values, ReduceOp::max).wait(); }

void TensorParallel::sum_copied_head_gradients(Tensor dqkv) {
  const HeadShard& h = dims_.heads;
  if (h.kv_split) return;
  // This rank's key and value heads' columns, at their places among the model's (N, 2, NKV, HS),
  // zeros elsewhere; summed over the group; and back.
  const int64_t N = dqkv.dim(0), HS = dims_.head_size, NKV = config_.kv_heads();
  const size_t element = dtype_size(dqkv.dtype), held = static_cast<size_t>(h.n_kv_head() * HS) * element;
  const size_t row = static_cast<size_t>(dqkv.dim(1)) * element, model_row = static_cast<size_t>(2 * NKV * HS) * element;
  const Buffer all(static_cast<size_t>(N) * model_row, MemTag::communication, dqkv.device);
  auto* local = static_cast<char*>(dqkv.data);
  auto* model = static_cast<char*>(all.data());
  const auto local_at = [&](int which) { return static_cast<size_t>((h.n_head() + which * h.n_kv_head()) * HS) * element; };
  const auto model_at = [&](int which) { return static_cast<size_t>((which * NKV + h.kv_begin) * HS) * element; };
  for (const int which : {0, 1})  // keys, then values
    copy_rows(model + model_at(which), model_row, local + local_at(which), row, held, static_cast<size_t>(N),
              dqkv.device);
  sum(all.view(dqkv.dtype, {N * 2 * NKV * HS})).wait();
  for (const int which : {0, 1})
    copy_rows(local + local_at(which), row, model + model_at(which), model_row, held, static_cast<size_t>(N),
              dqkv.device);
}

void TensorParallel::cross_entropy(Tensor losses, Tensor logits, Tensor targets, kernels::FlatRange vocab,
                                   bool with_gradient, float loss_scale) {
  // Every rank's statistics of its slice, gathered in rank order (kernels/vocab_parallel_cross_entropy.h).
  const int64_t N = logits.dim(0), R = group_.size();
  const Buffer all(static_cast<size_t>(R * N * 3) * dtype_size(losses.dtype), MemTag::communication, logits.device);
  const Tensor all_stats = all.view(losses.dtype, {R, N, 3});
  const Tensor mine = all_stats.slice_rows(group_.rank(), 1);
  kernels::vocab_slice_statistics(mine.reshape({N, 3}), logits, targets, vocab.begin, vocab.size());
  group_.all_gather(all_stats.reshape({R * N * 3}), mine.reshape({N * 3})).wait();
  kernels::vocab_parallel_cross_entropy(losses, logits, all_stats, targets, vocab.begin, vocab.size(), with_gradient,
                                        loss_scale);
}

void gather_shards(Communicator& group, const FlatTensors& shard, FlatTensors* whole,
                   const std::function<ParameterLayout(int rank)>& layout_of,
                   const std::function<bool(const ParamInfo&)>& include) {
  const bool lead = group.rank() == 0;
  DT_CHECK(lead == (whole != nullptr), "gathering shards: rank 0 of the group, and only it, passes the whole");
  if (!lead) return group.send(shard.all(), 0).wait();
  place_slices(shard, *whole);
  for (int r = 1; r < group.size(); ++r) {
    const ParameterLayout theirs = layout_of(r);
    const FlatTensors received(theirs, MemTag::workspace, shard.device());
    group.recv(received.all(), r).wait();
    place_slices(received, *whole, include);
  }
}

}  // namespace dt
