#include "kernels/moe_router_loss.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks that rows (N, E), named `name`, sets the float type: f32 or f64.
void check_rows(std::string_view op, const Tensor& rows, const char* name) {
  DT_CHECK(rows.dtype == DType::f32 || rows.dtype == DType::f64, op, ": ", name, " is ", rows.describe(),
           ", expected f32 (the router's) or f64");
  DT_CHECK(rows.ndim() == 2 && rows.dim(1) >= 1, op, ": ", name, " is ", rows.describe(),
           ", expected (N, E) with E >= 1 experts");
}

void expect_like(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& like, const Shape& shape) {
  expect_dtype(op, arg, t, like.dtype, like.device);
  expect_shape(op, arg, t, shape);
}

}  // namespace

void moe_router_stats(Tensor counts, Tensor probs, Tensor z, Tensor scores, Tensor experts, Tensor logits,
                      MoeScore score) {
  constexpr std::string_view op = "moe_router_stats";
  const Tensor& sets = scores.defined() ? scores : logits;
  check_rows(op, sets, scores.defined() ? "scores" : "logits");
  const int64_t N = sets.dim(0), E = sets.dim(1);
  const Tensor& per_sequence = counts.defined() ? counts : probs.defined() ? probs : z;
  DT_CHECK(per_sequence.defined(), op, ": no output asked for (counts, probs and z are all undefined)");
  DT_CHECK(per_sequence.ndim() >= 1 && per_sequence.dim(0) >= 1 && N % per_sequence.dim(0) == 0, op,
           ": the outputs' S = ", per_sequence.describe(), " sequences must divide the N = ", N, " rows");
  const int64_t S = per_sequence.dim(0);
  if (counts.defined() || probs.defined()) {
    DT_CHECK(scores.defined(), op, ": counts and probs read the scores, which are undefined");
    if (counts.defined()) {
      expect_like(op, "counts", counts, sets, {S, E});
      DT_CHECK(experts.defined() && experts.ndim() == 2 && experts.dim(0) == N, op, ": experts is ",
               experts.describe(), ", expected (", N, ", k) i32");
      expect_dtype(op, "experts", experts, DType::i32, sets.device);
    }
    if (probs.defined()) expect_like(op, "probs", probs, sets, {S, E});
    DT_CHECK(score == MoeScore::softmax || score == MoeScore::sigmoid, op, ": unknown score function ",
             static_cast<int>(score));
  }
  if (z.defined()) {
    DT_CHECK(logits.defined(), op, ": z reads the logits, which are undefined");
    expect_like(op, "logits", logits, sets, {N, E});
    expect_like(op, "z", z, sets, {S});
  }
  const std::initializer_list<std::pair<const char*, Tensor>> outputs = {{"counts", counts}, {"probs", probs}, {"z", z}};
  for (const auto& [name, out] : outputs) {
    if (!out.defined()) continue;
    for (const auto& [in_name, in] : {std::pair{"scores", scores}, {"experts", experts}, {"logits", logits}})
      if (in.defined()) expect_disjoint(op, name, out, in_name, in);
    for (const auto& [other_name, other] : outputs)
      if (other.defined() && other.data != out.data) expect_disjoint(op, name, out, other_name, other);
  }
  DT_DISPATCH_DEVICE(moe_router_stats, sets.device, counts, probs, z, scores, experts, logits, score);
}

void moe_balance_backward(Tensor dscores, Tensor counts, Tensor scores, float scale, MoeScore score) {
  constexpr std::string_view op = "moe_balance_backward";
  check_rows(op, scores, "scores");
  const int64_t N = scores.dim(0), E = scores.dim(1);
  DT_CHECK(counts.ndim() == 2 && counts.dim(0) >= 1 && N % counts.dim(0) == 0, op, ": counts is ",
           counts.describe(), ", expected (S, ", E, ") with S sequences dividing the N = ", N, " rows");
  expect_like(op, "counts", counts, scores, {counts.dim(0), E});
  expect_like(op, "dscores", dscores, scores, {N, E});
  DT_CHECK(score == MoeScore::softmax || score == MoeScore::sigmoid, op, ": unknown score function ",
           static_cast<int>(score));
  expect_disjoint(op, "dscores", dscores, "counts", counts);
  expect_disjoint(op, "dscores", dscores, "scores", scores);
  DT_DISPATCH_DEVICE(moe_balance_backward, scores.device, dscores, counts, scores, scale, score);
}

void moe_z_loss_backward(Tensor dlogits, Tensor logits, float scale) {
  constexpr std::string_view op = "moe_z_loss_backward";
  check_rows(op, logits, "logits");
  expect_like(op, "dlogits", dlogits, logits, logits.shape);
  expect_disjoint(op, "dlogits", dlogits, "logits", logits);
  DT_DISPATCH_DEVICE(moe_z_loss_backward, logits.device, dlogits, logits, scale);
}

}  // namespace dt::kernels
