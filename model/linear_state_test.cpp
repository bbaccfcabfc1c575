// Per-linear state is laid out from the block's declaration over the blocks a rank holds, and
// each linear layer of the model holds its own. (Its checkpoints: train/training_checkpoint_test.cpp.)
#include "model/linear_state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/transformer.h"
#include "tests/linear_state_testing.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::fp8_like_states;
using testing::three_blocks;

// The names the declaration gives, kind-major, over `layers`: what the layout must hold.
std::vector<std::string> expected_names(const ModelConfig& config, const std::vector<int>& layers) {
  std::vector<std::string> names;
  const std::vector<const LinearDeclaration*> linears = declare_block(config, 0).linears();
  for (const int l : layers)
    for (const LinearDeclaration* linear : linears) names.push_back(str(block_prefix(l), linear->name, ".amax_history"));
  for (const int l : layers)
    for (const LinearDeclaration* linear : linears)
      if (linear->name == "attn.qkv" || linear->name == "mlp.proj")
        names.push_back(str(block_prefix(l), linear->name, ".scale"));
  return names;
}

TEST(LinearStates, OneEntryPerDeclaredLinearOfEachHeldBlockWithTheDeclaredSizes) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig config = three_blocks(preset);
    // The whole model, and a pipeline rank's stage of blocks 1 and 2 under tensor parallelism
    // (the state is the whole tensor's: the shard does not change it).
    const ParameterLayout whole(config);
    const ParameterLayout stage(config, kParamAlignment, TensorShard{.rank = 1, .size = 2},
                                HeldUnits::of({StageUnits{.embeddings = false, .first_block = 1, .end_block = 3,
                                                          .head = true}},
                                              config.n_layer));
    for (const auto& [layout, layers] : {std::pair{&whole, std::vector<int>{0, 1, 2}}, {&stage, {1, 2}}}) {
      const LinearStates states(*layout, fp8_like_states(), Device::cpu);
      const std::vector<std::string> names = expected_names(config, layers);
      ASSERT_EQ(states.entries().size(), names.size()) << preset;
      int64_t offset = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        const LinearStates::Entry& e = states.entries()[i];
        EXPECT_EQ(e.name, names[i]) << preset;
        EXPECT_EQ(e.name, str(block_prefix(e.layer), e.linear, ".", states.declared()[e.kind].name));
        EXPECT_EQ(e.count, states.declared()[e.kind].count) << e.name;
        EXPECT_EQ(e.offset, offset) << e.name;  // contiguous, kind-major
        offset += e.count;
        const Tensor t = states.find(e.layer, e.linear, states.declared()[e.kind].name);
        EXPECT_EQ(t.data, states.at(e).data) << e.name;
        EXPECT_EQ(t.shape, (Shape{e.count})) << e.name;
      }
      EXPECT_EQ(LinearStates::bytes(*layout, fp8_like_states()), static_cast<size_t>(offset) * sizeof(float));
      // Each kind is one (entries, count) range; the scales start at 1, the histories at 0.
      const int64_t linears = static_cast<int64_t>(declare_block(config, 0).linears().size());
      const int64_t blocks = static_cast<int64_t>(layers.size());
      const Tensor histories = states.all("amax_history"), scales = states.all("scale");
      EXPECT_EQ(histories.shape, (Shape{blocks * linears, 16}));
      EXPECT_EQ(scales.shape, (Shape{blocks * 2, 2}));
      EXPECT_EQ(scales.data, static_cast<char*>(histories.data) + histories.bytes());
      for (int64_t i = 0; i < histories.numel(); ++i) EXPECT_EQ(histories.ptr<float>()[i], 0.0f);
      for (int64_t i = 0; i < scales.numel(); ++i) EXPECT_EQ(scales.ptr<float>()[i], 1.0f);
      // Every block's names, held here or not: what a checkpoint holds.
      EXPECT_EQ(states.model_names(), expected_names(config, {0, 1, 2})) << preset;
    }
    // A block another stage holds, and a kind the layer does not carry, are named.
    const LinearStates held(stage, fp8_like_states(), Device::cpu);
    EXPECT_NE(testing::error_of([&] { held.find(0, "attn.qkv", "amax_history"); }).find("h.0.attn.qkv.amax_history"),
              std::string::npos);
    EXPECT_NE(testing::error_of([&] { held.of(1, "attn.proj").get("scale"); }).find("it has amax_history"),
              std::string::npos);
  }
}

// The experts' grouped layers hold a weight per expert, and carry a kind's count once for each,
// expert by expert, so that (weights, count) rows stay one per weight.
TEST(LinearStates, AnExpertsLayerCarriesItsCountPerExpert) {
  const ModelConfig config = model_preset("moe-tiny");
  const ParameterLayout layout(config);
  const LinearStates states(layout, {{.name = "amax", .count = 3, .linears = {}, .initial = 0}}, Device::cpu);
  const int64_t E = config.moe.experts;
  EXPECT_EQ(states.find(0, "mlp.experts.fc", "amax").numel(), 3 * E);
  EXPECT_EQ(states.find(0, "mlp.experts.proj", "amax").numel(), 3 * E);
  EXPECT_EQ(states.find(0, "mlp.router", "amax").numel(), 3);
  EXPECT_EQ(states.find(0, "attn.qkv", "amax").numel(), 3);
  const int64_t weights = config.n_layer * (static_cast<int64_t>(declare_block(config, 0).linears().size()) - 2 + 2 * E);
  EXPECT_EQ(states.all("amax").shape, (Shape{weights, 3}));
}

TEST(LinearStates, NoneDeclaredAllocatesNothing) {
  const ParameterLayout layout(model_preset("gpt2-tiny"));
  const MemoryStats before = memory_stats(Device::cpu);
  const LinearStates none(layout, {}, Device::cpu);
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none.model_names().empty());
  EXPECT_EQ(LinearStates::bytes(layout, {}), 0u);
  EXPECT_EQ(memory_stats(Device::cpu).total_current_bytes, before.total_current_bytes);
  EXPECT_TRUE(none.of(0, "attn.qkv").empty());
}

TEST(LinearStates, AllocatesItsBytesUnderTheParametersTag) {
  const ParameterLayout layout(three_blocks("llama-tiny"));
  const MemoryStats before = memory_stats(Device::cpu);
  const LinearStates states(layout, fp8_like_states(), Device::cpu);
  const MemoryStats after = memory_stats(Device::cpu);
  EXPECT_EQ(after.current(MemTag::parameters) - before.current(MemTag::parameters),
            LinearStates::bytes(layout, fp8_like_states()));
  EXPECT_EQ(after.total_current_bytes - before.total_current_bytes, LinearStates::bytes(layout, fp8_like_states()));
  EXPECT_EQ(LinearStates::bytes(layout, fp8_like_states()), (3 * 4 * 16 + 3 * 2 * 2) * sizeof(float));
}

TEST(LinearStates, ADeclarationTheBlockCannotCarryIsRefusedByName) {
  const ParameterLayout layout(model_preset("gpt2-tiny"));
  const auto refused = [&](std::vector<LinearStateDeclaration> declared) {
    return testing::error_of([&] { LinearStates(layout, std::move(declared), Device::cpu); });
  };
  const std::string typo = refused({{.name = "scale", .count = 1, .linears = {"attn.qvk"}, .initial = 1}});
  EXPECT_NE(typo.find("'attn.qvk'"), std::string::npos) << typo;
  EXPECT_NE(typo.find("did you mean 'attn.qkv'"), std::string::npos) << typo;
  EXPECT_NE(typo.find("attn.qkv, attn.proj, mlp.fc, mlp.proj"), std::string::npos) << typo;
  EXPECT_NE(refused({{.name = "amax", .count = 0, .linears = {}, .initial = 0}}).find("declare at least 1"),
            std::string::npos);
  EXPECT_NE(refused({{.name = "", .count = 1, .linears = {}, .initial = 0}}).find("has no name"), std::string::npos);
  EXPECT_NE(refused({{.name = "amax", .count = 1, .linears = {}, .initial = 0},
                     {.name = "amax", .count = 2, .linears = {}, .initial = 0}})
                .find("'amax' is declared twice"),
            std::string::npos);
}

// The model's layers reach their state: each block's linear layers hold views of exactly their
// entries, on every stage of a pipeline rank as in one process.
TEST(LinearStates, EachLinearLayerOfTheModelHoldsItsOwnState) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig config = three_blocks(preset);
    const RankStages pipeline{.all = {{.embeddings = true, .first_block = 0, .end_block = 1, .head = false},
                                      {.embeddings = false, .first_block = 1, .end_block = 3, .head = true}},
                              .held = {1},
                              .deferred_weights = false};
    for (const RankStages& stages : {RankStages{}, pipeline}) {
      Transformer model(config, 1, 8, Recompute::none, DType::f32, Device::cpu, {}, nullptr, stages, nullptr,
                        fp8_like_states());
      const LinearStates& states = model.linear_states();
      int blocks = 0;
      for (const Stage* stage : model.stages()) {
        if (stage == nullptr) continue;
        for (const Block& block : stage->blocks()) {
          ++blocks;
          for (const LinearDeclaration* linear : declare_block(config, 0).linears()) {
            const LinearStateView& view = block.linear_state(linear->name);
            EXPECT_EQ(view.get("amax_history").data, states.find(block.layer(), linear->name, "amax_history").data)
                << preset << " " << block.layer() << " " << linear->name;
            const bool scaled = linear->name == "attn.qkv" || linear->name == "mlp.proj";
            EXPECT_EQ(view.all().size(), scaled ? 2u : 1u) << linear->name;
            if (scaled) {
              EXPECT_EQ(view.get("scale").data, states.find(block.layer(), linear->name, "scale").data);
            }
          }
        }
      }
      EXPECT_EQ(blocks, stages.all.empty() ? 3 : 2) << preset;
    }
    // Without a declaration no layer holds any.
    const Transformer plain(config, 1, 8);
    EXPECT_TRUE(plain.linear_states().empty());
    for (const Block& block : plain.stages().front()->blocks())
      for (const LinearDeclaration* linear : declare_block(config, 0).linears())
        EXPECT_TRUE(block.linear_state(linear->name).empty()) << linear->name;
  }
}

}  // namespace
}  // namespace dt
