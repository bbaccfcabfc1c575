#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
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

// 16-bit storage: the lookup copies stored bits; the position add is elementwise, so the bits of
// the f32 kernel on the widened inputs, rounded once; dwte and dwpe (f32) add the same widened
// values in the same order as the f32 kernel, so they equal its results exactly.
TEST(Embedding, SixteenBitStorageIsTheF32KernelOnWidenedInputs) {
  using testing::widened;
  const auto ids = repeating_ids();
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto wte = testing::random_storage(S, {V, C}, 101), wpe = testing::random_storage(S, {L, C}, 102),
               dout = testing::random_storage(S, {B * T, C}, 103);
    const auto wte32 = widened(wte.t), wpe32 = widened(wpe.t), dout32 = widened(dout.t);
    auto out = zeros(S, {B * T, C}), out32 = zeros(DType::f32, {B * T, C});
    embedding_forward(out.t, ids.t, wte.t);
    embedding_forward(out32.t, ids.t, wte32.t);
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(out32.t, S).t), 0);
    position_embedding_forward(out.t.reshape({B, T, C}), wpe.t);
    position_embedding_forward(out32.t.reshape({B, T, C}), wpe32.t);
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(out32.t, S).t), 0);

    auto dwte = random_normal(DType::f32, {V, C}, 104), dwpe = random_normal(DType::f32, {L, C}, 105);
    const auto dwte32 = testing::converted(dwte.t, DType::f32), dwpe32 = testing::converted(dwpe.t, DType::f32);
    embedding_backward(dwte.t, ids.t, dout.t);
    embedding_backward(dwte32.t, ids.t, dout32.t);
    EXPECT_EQ(testing::max_abs_difference(dwte.t, dwte32.t), 0);
    position_embedding_backward(dwpe.t, dout.t.reshape({B, T, C}));
    position_embedding_backward(dwpe32.t, dout32.t.reshape({B, T, C}));
    EXPECT_EQ(testing::max_abs_difference(dwpe.t, dwpe32.t), 0);
  }
}

// A tensor-parallel rank's slice of the table, ids [4, 8): its rows are the whole table's, an id
// outside gives zeros, and backward adds into its rows only, the whole table's gradient there.
TEST(Embedding, ASliceOfTheTableLooksUpAndLearnsItsOwnRows) {
  auto some_ids = zeros(DType::i32, {B * T});
  for (int64_t i = 0; i < B * T; ++i) some_ids.ptr<int32_t>()[i] = static_cast<int32_t>((i * 5) % V);
  constexpr int64_t first = 4, rows = 4;
  const auto wte = random_normal(DType::f32, {V, C}, 6), dout = random_normal(DType::f32, {B * T, C}, 7);
  const Tensor slice = wte.t.slice_rows(first, rows);
  auto out = random_normal(DType::f32, {B * T, C}, 8), whole_out = zeros(DType::f32, {B * T, C});
  embedding_forward(out.t, some_ids.t, slice, first);
  embedding_forward(whole_out.t, some_ids.t, wte.t);
  auto dwte = zeros(DType::f32, {V, C}), dslice = zeros(DType::f32, {rows, C});
  embedding_backward(dwte.t, some_ids.t, dout.t);
  embedding_backward(dslice.t, some_ids.t, dout.t, first);
  for (int64_t n = 0; n < B * T; ++n) {
    const int32_t id = some_ids.ptr<int32_t>()[n];
    const bool held = id >= first && id < first + rows;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(element(out.t, n * C + c), held ? element(whole_out.t, n * C + c) : 0.0) << n;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(element(dslice.t, r * C + c), element(dwte.t, (first + r) * C + c));
}

TEST(Embedding, WrongStorageCombinationsAreRejectedByName) {
  const auto ids = repeating_ids();
  const auto wte = zeros(DType::bf16, {V, C}), wpe = zeros(DType::bf16, {L, C}), dout = zeros(DType::bf16, {B * T, C});
  const auto out32 = zeros(DType::f32, {B * T, C});
  std::string m = testing::error_message([&] { embedding_forward(out32.t, ids.t, wte.t); });
  EXPECT_NE(m.find("embedding_forward: out is f32"), std::string::npos) << m;
  m = testing::error_message([&] { embedding_backward(wte.t, ids.t, dout.t); });
  EXPECT_NE(m.find("embedding_backward: dtable is bf16"), std::string::npos) << m;
  m = testing::error_message([&] { position_embedding_forward(out32.t.reshape({B, T, C}), wpe.t); });
  EXPECT_NE(m.find("position_embedding_forward: out is f32"), std::string::npos) << m;
  m = testing::error_message([&] { position_embedding_backward(wpe.t, dout.t.reshape({B, T, C})); });
  EXPECT_NE(m.find("position_embedding_backward: dwpe is bf16"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
