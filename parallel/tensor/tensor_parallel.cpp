#include "parallel/tensor/tensor_parallel.h"

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/convert.h"
#include "kernels/vocab_parallel_cross_entropy.h"

namespace dt {

namespace {

// A sum of 16-bit values taken in f32: waiting rounds the f32 sum back into them.
class WidenedSum final : public Work {
 public:
  WidenedSum(Tensor values, Buffer widened, CollectiveHandle sum)
      : values_(values), widened_(std::move(widened)), sum_(std::move(sum)) {}
  void wait() override {
    if (!widened_.data()) return;
    sum_.wait();
    kernels::convert(values_, widened_.view(DType::f32, values_.shape));
    widened_ = Buffer();
  }
  bool done() override { return !widened_.data() || sum_.done(); }

 private:
  Tensor values_;
  Buffer widened_;
  CollectiveHandle sum_;
};

}  // namespace

TensorParallel::TensorParallel(Communicator& group, const ModelConfig& config)
    : group_(group), config_(config), dims_(shard_dims(config, {group.rank(), group.size()})) {}

CollectiveHandle TensorParallel::sum(Tensor t) {
  if (t.dtype == DType::f32) return group_.all_reduce(t, ReduceOp::sum);
  Buffer widened(t.bytes() / dtype_size(t.dtype) * sizeof(float), MemTag::communication, t.device, false);
  const Tensor f32 = widened.view(DType::f32, t.shape);
  kernels::convert(f32, t);
  CollectiveHandle summing = group_.all_reduce(f32, ReduceOp::sum);
  CollectiveInfo info = summing.info();
  return {std::make_unique<WidenedSum>(t, std::move(widened), std::move(summing)), std::move(info)};
}

CollectiveHandle TensorParallel::column_input_gradient(Tensor dx) { return sum(dx); }

Tensor TensorParallel::row_output(Tensor y) {
  sum(y).wait();
  return y;
}

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
  for (const int which : {0, 1}) {  // keys, then values
    const size_t local_at = static_cast<size_t>((h.n_head() + which * h.n_kv_head()) * HS) * element;
    const size_t model_at = static_cast<size_t>((which * NKV + h.kv_begin) * HS) * element;
    copy_rows(model + model_at, model_row, local + local_at, row, held, static_cast<size_t>(N), dqkv.device);
  }
  sum(all.view(dqkv.dtype, {N * 2 * NKV * HS})).wait();
  for (const int which : {0, 1}) {
    const size_t local_at = static_cast<size_t>((h.n_head() + which * h.n_kv_head()) * HS) * element;
    const size_t model_at = static_cast<size_t>((which * NKV + h.kv_begin) * HS) * element;
    copy_rows(local + local_at, row, model + model_at, model_row, held, static_cast<size_t>(N), dqkv.device);
  }
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

}  // namespace dt
