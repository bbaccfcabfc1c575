#include "kernels/cross_entropy.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
void check(std::string_view op, const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t V,
           int32_t ignore_index) {
  expect_storage_dtype(op, logits);
  expect_dtype(op, "losses", losses, accumulation_dtype(logits.dtype), logits.device);
  DT_CHECK(logits.ndim() == 2 && V >= 1 && V <= logits.dim(1), op, ": logits ", logits.describe(),
           " must be (N, Vp) with 1 <= V = ", V, " <= Vp");
  const int64_t N = logits.dim(0);
  expect_shape(op, "losses", losses, {N});
  DT_CHECK(targets.dtype == DType::i32 && targets.shape == Shape({N}), op, ": targets ", targets.describe());
  const std::vector<int32_t> host = host_values<int32_t>(targets);  // a copy when targets are on a GPU
  const int32_t* t = host.data();
  for (int64_t n = 0; n < N; ++n)
    DT_CHECK((t[n] >= 0 && t[n] < V) || t[n] == ignore_index, op, ": target ", t[n], " at row ", n,
             " outside [0, ", V, ") and not the ignore index ", ignore_index);
}
}  // namespace

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size, int32_t ignore_index) {
  check("cross_entropy_forward", losses, logits, targets, vocab_size, ignore_index);
  DT_DISPATCH_DEVICE(cross_entropy_forward, logits.device, losses, logits, targets, vocab_size, ignore_index);
}

void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index) {
  check("cross_entropy_forward_backward", losses, logits, targets, vocab_size, ignore_index);
  DT_DISPATCH_DEVICE(cross_entropy_forward_backward, logits.device, losses, logits, targets, vocab_size, loss_scale,
                     ignore_index);
}

}  // namespace dt::kernels
