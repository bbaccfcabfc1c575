// The KV-cached forward of generation against the training forward: prefill and next() must give,
// at every position, the logits Transformer::forward gives for the whole sequence at once.
#include "model/inference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/transformer.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::error_of;

struct Case {
  const char* name;
  ModelConfig model;
  int prompt_len;  // tokens prefilled at once; the rest of the sequence goes through next()
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig sized(const char* preset, int max_seq_len) {
  ModelConfig c = model_preset(preset);
  c.max_seq_len = max_seq_len;
  return c;
}

std::vector<int32_t> token_ids(const ModelConfig& c, int count) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int t = 0; t < count; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 37 + 11) % c.vocab_size);
  return ids;
}

// A randomly initialised model and its training-forward logits (T, V) for `ids`.
struct Reference {
  std::unique_ptr<Transformer> model;
  testing::OwnedTensor logits;
};
Reference reference(const ModelConfig& config, const std::vector<int32_t>& ids) {
  const int T = static_cast<int>(ids.size());
  Reference r{std::make_unique<Transformer>(config, 1, T), testing::zeros(DType::f32, {T, config.vocab_size})};
  init_parameters(r.model->params(), 1234);
  testing::OwnedTensor tokens = testing::zeros(DType::i32, {1, T});
  std::copy(ids.begin(), ids.end(), tokens.ptr<int32_t>());
  r.model->forward(tokens.t, Tensor{});
  r.model->copy_logits(r.logits.t);
  return r;
}

double error_at(std::span<const float> logits, const testing::OwnedTensor& expected, int position) {
  std::vector<float> copy(logits.begin(), logits.end());
  const Tensor actual{.data = copy.data(), .dtype = DType::f32, .shape = {static_cast<int64_t>(copy.size())}};
  return testing::normalized_max_error(actual, expected.t.slice_rows(position, 1).reshape({actual.numel()}));
}

class InferenceVsTraining : public ::testing::TestWithParam<Case> {};

// Both sides run the same f32 kernels on the same weights; they differ only in summation order:
// the GEMMs of one row against those of T rows (BLAS blocks them differently), and the decode
// attention against the tiled flash attention (kernels/attention_decode_test.cpp bounds that at
// 1e-5 alone; measured ~1e-7). Those f32 roundings (~6e-8 relative each) pass through a couple
// of layers without growing much, so the logits agree to ~1e-6 of their largest magnitude; the
// bound 1e-5 is what the PyTorch comparisons of the same forward use. A wrong position (rotary or
// learned), a cache row off by one, or a missing key gives errors of order 1.
TEST_P(InferenceVsTraining, PrefillAndNextMatchTheFullForwardAtEveryPosition) {
  const Case& c = GetParam();
  const int T = c.model.max_seq_len;
  const std::vector<int32_t> ids = token_ids(c.model, T);
  const Reference ref = reference(c.model, ids);

  InferenceSession session(ref.model->params(), T);
  double worst = error_at(session.prefill(std::span(ids).first(c.prompt_len)), ref.logits, c.prompt_len - 1);
  for (int t = c.prompt_len; t < T; ++t) worst = std::max(worst, error_at(session.next(ids[t]), ref.logits, t));
  EXPECT_EQ(session.size(), T);
  std::printf("%s: prefill %d + next %d, worst normalized max error over positions %.3g\n", c.name, c.prompt_len,
              T - c.prompt_len, worst);
  EXPECT_LE(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Inference, InferenceVsTraining,
    ::testing::Values(Case{"gpt2", sized("gpt2-tiny", 64), 9},
                      // 6 query heads over 2 KV heads, untied output layer.
                      Case{"llama_gqa", sized("llama-tiny", 64), 9},
                      // Prompts longer than one prefill chunk (128 rows): 128 + 72 rows, then 100 steps.
                      Case{"gpt2_two_chunks", sized("gpt2-tiny", 300), 200},
                      Case{"llama_two_chunks_scaled_rope",
                           [] {
                             ModelConfig c = sized("llama-tiny", 300);
                             c.rope_scaling_factor = 8, c.rope_original_max_seq_len = 64;
                             return c;
                           }(),
                           200},
                      // Multi-query: one KV head.
                      Case{"llama_mqa_tied",
                           [] {
                             ModelConfig c = sized("llama-tiny", 40);
                             c.n_kv_head = 1, c.tied_embeddings = true;
                             return c;
                           }(),
                           1},
                      // Experts: a token's choice is its own, whether it comes in a prefill or alone.
                      Case{"moe", sized("moe-tiny", 64), 9},
                      Case{"moe_two_chunks", sized("moe-tiny", 300), 200},
                      // OLMoE's: the queries and keys normalized before rotary, each row its own.
                      Case{"olmoe_two_chunks", sized("olmoe-tiny", 300), 200},
                      // A gated shared expert beside them (Qwen-MoE's).
                      Case{"moe_shared_gated",
                           [] {
                             ModelConfig c = sized("moe-tiny", 64);
                             c.moe.shared_hidden = 24, c.moe.shared_gate = true;
                             return c;
                           }(),
                           9}),
    [](const auto& info) { return std::string(info.param.name); });

// prefill appends: a prompt given in pieces gives the logits of the prompt given at once, up to
// rounding (the GEMMs see other row counts, so other summation orders; bound as above). reset()
// starts over: the same calls again give the same bits.
TEST(InferenceSession, PrefillInPiecesAppendsAndResetStartsOver) {
  const ModelConfig config = sized("llama-tiny", 32);
  const std::vector<int32_t> ids = token_ids(config, 20);
  const Reference ref = reference(config, ids);
  InferenceSession session(ref.model->params(), 32);
  auto in_pieces = [&] {
    session.prefill(std::span(ids).first(7));
    session.prefill(std::span(ids).subspan(7, 6));
    const std::span<const float> logits = session.prefill(std::span(ids).subspan(13));
    return std::vector<float>(logits.begin(), logits.end());
  };
  const std::vector<float> first = in_pieces();
  EXPECT_EQ(session.size(), 20);
  EXPECT_LE(error_at(first, ref.logits, 19), 1e-5);
  session.reset();
  EXPECT_EQ(session.size(), 0);
  const std::vector<float> again = in_pieces();
  ASSERT_EQ(again.size(), first.size());
  EXPECT_EQ(0, std::memcmp(again.data(), first.data(), first.size() * sizeof(float)));
}

TEST(InferenceSession, CapacityTokenIdsAndSizesAreCheckedBeforeAnythingChanges) {
  const ModelConfig config = sized("gpt2-tiny", 16);
  const std::vector<int32_t> ids = token_ids(config, 12);
  const Reference ref = reference(config, ids);
  InferenceSession session(ref.model->params(), 12);
  session.prefill(std::span(ids).first(10));

  const std::string full = error_of([&] { session.prefill(std::span(ids).first(3)); });
  EXPECT_NE(full.find("holds 10 of max_tokens = 12 tokens and cannot take 3 more"), std::string::npos) << full;
  const std::string bad_id = error_of([&] { session.next(config.vocab_size); });
  EXPECT_NE(bad_id.find(str("token id ", config.vocab_size, " at index 0 is outside the vocabulary [0, ",
                            config.vocab_size, ")")),
            std::string::npos)
      << bad_id;
  EXPECT_NE(error_of([&] { session.next(-1); }).find("token id -1"), std::string::npos);
  EXPECT_NE(error_of([&] { session.prefill({}); }).find("empty prompt"), std::string::npos);
  EXPECT_EQ(session.size(), 10);  // nothing was appended by the failed calls
  // The two positions left still work, and match the full forward.
  session.next(ids[10]);
  EXPECT_LE(error_at(session.next(ids[11]), ref.logits, 11), 1e-5);
  EXPECT_NE(error_of([&] { session.next(ids[0]); }).find("cannot take 1 more"), std::string::npos);

  const std::string too_long = error_of([&] { InferenceSession(ref.model->params(), 17); });
  EXPECT_NE(too_long.find("max_tokens = 17 must be in [1, model.max_seq_len = 16]"), std::string::npos) << too_long;
}

}  // namespace
}  // namespace dt
