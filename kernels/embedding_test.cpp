#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

constexpr int64_t B = 3, T = 5, C = 7, V = 11, L = 8;

testing::OwnedTensor repeating_ids() {
  auto ids = zeros(DType::i32, {B * T});
  for (int64_t i = 0; i < B * T; ++i) ids.ptr<int32_t>()[i] = static_cast<int32_t>((i * 7) % 4);  // ids repeat
  return ids;
}

TEST(Embedding, ForwardWithPositionsMatchesNaive) {
  auto ids = repeating_ids();
  auto wte = random_normal(DType::f32, {V, C}, 1), wpe = random_normal(DType::f32, {L, C}, 2);
  auto out = zeros(DType::f32, {B * T, C});
  embedding_forward(out.t, ids.t, wte.t);
  position_embedding_forward(out.t.reshape({B, T, C}), wpe.t);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(out.ptr<float>()[n * C + c],
                wte.ptr<float>()[ids.ptr<int32_t>()[n] * C + c] + wpe.ptr<float>()[(n % T) * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndIsDeterministic) {
  auto ids = repeating_ids();
  auto wte = random_normal(DType::f64, {V, C}, 3), wpe = random_normal(DType::f64, {L, C}, 4),
       dout = random_normal(DType::f64, {B * T, C}, 5);
  auto out = zeros(DType::f64, {B * T, C}), dwte = zeros(DType::f64, {V, C}), dwpe = zeros(DType::f64, {L, C});
  embedding_backward(dwte.t, ids.t, dout.t);
  position_embedding_backward(dwpe.t, dout.t.reshape({B, T, C}));
  auto loss = [&] {
    embedding_forward(out.t, ids.t, wte.t);
    position_embedding_forward(out.t.reshape({B, T, C}), wpe.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"wte", wte.t, dwte.t}, {"wpe", wpe.t, dwpe.t}});
  EXPECT_LE(r.worst_error, 1e-8) << r.where;  // linear function: differences exact to roundoff
  // Rows never looked up and positions past T get nothing.
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(element(dwte.t, 10 * C + c), 0.0);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(element(dwpe.t, (L - 1) * C + c), 0.0);

  auto again = zeros(DType::f64, {V, C});
  embedding_backward(again.t, ids.t, dout.t);
  EXPECT_EQ(std::memcmp(again.t.data, dwte.t.data, dwte.t.bytes()), 0);
}

}  // namespace
}  // namespace dt::kernels
