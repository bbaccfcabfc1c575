#include "kernels/vocab_parallel_cross_entropy.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

void check(std::string_view op, const Tensor& logits, const Tensor& targets, int64_t first_id, int64_t rows,
           int32_t ignore_index) {
  expect_storage_dtype(op, logits);
  DT_CHECK(logits.ndim() == 2 && rows >= 1 && rows <= logits.dim(1) && first_id >= 0, op, ": logits ",
           logits.describe(), " must be (N, Vp) with 1 <= rows = ", rows, " <= Vp, first id ", first_id);
  const int64_t N = logits.dim(0);
  DT_CHECK(targets.dtype == DType::i32 && targets.shape == Shape({N}), op, ": targets ", targets.describe());
  const std::vector<int32_t> host = host_values<int32_t>(targets);  // a copy when targets are on a GPU
  for (int64_t n = 0; n < N; ++n)
    DT_CHECK(host[n] >= 0 || host[n] == ignore_index, op, ": target ", host[n], " at row ", n,
             " is negative and not the ignore index ", ignore_index);
}

}  // namespace

void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index) {
  constexpr std::string_view op = "vocab_slice_statistics";
  check(op, logits, targets, first_id, rows, ignore_index);
  expect_dtype(op, "stats", stats, accumulation_dtype(logits.dtype), logits.device);
  expect_shape(op, "stats", stats, {logits.dim(0), 3});
  DT_DISPATCH_DEVICE(vocab_slice_statistics, logits.device, stats, logits, targets, first_id, rows, ignore_index);
}

void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale, int32_t ignore_index) {
  constexpr std::string_view op = "vocab_parallel_cross_entropy";
  check(op, logits, targets, first_id, rows, ignore_index);
  const DType stats_dtype = accumulation_dtype(logits.dtype);
  const int64_t N = logits.dim(0);
  expect_dtype(op, "losses", losses, stats_dtype, logits.device);
  expect_shape(op, "losses", losses, {N});
  expect_dtype(op, "all_stats", all_stats, stats_dtype, logits.device);
  DT_CHECK(all_stats.ndim() == 3 && all_stats.dim(0) >= 1 && all_stats.dim(1) == N && all_stats.dim(2) == 3, op,
           ": all_stats ", all_stats.describe(), " must be (ranks, N, 3) with N = ", N);
  DT_DISPATCH_DEVICE(vocab_parallel_cross_entropy, logits.device, losses, logits, all_stats, targets, first_id, rows,
                     with_gradient, loss_scale, ignore_index);
}

}  // namespace dt::kernels
