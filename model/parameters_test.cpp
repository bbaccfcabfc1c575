#include "model/parameters.h"

#include <gtest/gtest.h>

#include <cstring>

namespace dt {
namespace {

// An element's initial value depends only on (seed, parameter name, index). A model with a
// larger vocabulary and more positions stores every block parameter at another offset and
// initialises it after more draws, yet every shared element is bit-identical: all blocks, and
// the first rows of both embeddings (element index = row * C + column, the same in both).
TEST(Parameters, InitDependsOnlyOnSeedNameAndIndex) {
  const ModelConfig small = model_preset("gpt2-tiny");
  ModelConfig large = small;
  large.vocab_size = 1500;
  large.max_seq_len = 80;
  const ParameterLayout layout_small(small), layout_large(large);
  FlatTensors ps(layout_small, MemTag::parameters), pl(layout_large, MemTag::parameters);
  init_parameters(ps, 42);
  init_parameters(pl, 42);
  for (const ParamInfo& info : layout_small.params()) {
    const Tensor a = ps.unpadded(info), b = pl.unpadded(info.name).slice_rows(0, info.shape[0]);
    ASSERT_EQ(a.shape, b.shape) << info.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0) << info.name;
  }
  EXPECT_NE(layout_small.find("h.0.ln_1.weight").offset, layout_large.find("h.0.ln_1.weight").offset);
  FlatTensors other_seed(layout_small, MemTag::parameters);
  init_parameters(other_seed, 43);
  const Tensor a = ps.unpadded("h.0.attn.qkv.weight"), b = other_seed.unpadded("h.0.attn.qkv.weight");
  EXPECT_NE(std::memcmp(a.data, b.data, a.bytes()), 0);
}

TEST(Parameters, PaddingRowsAndGapsAreZeroAndOffsetsAligned) {
  const ParameterLayout layout(model_preset("gpt2-tiny"));  // vocab 997 stored as 1024 rows
  FlatTensors p(layout, MemTag::parameters);
  init_parameters(p, 1);
  const ParamInfo& wte = layout.find("wte");
  const Tensor stored = p.stored(wte);
  const float* f = stored.ptr<float>();
  for (int64_t i = wte.numel(); i < stored.numel(); ++i) ASSERT_EQ(f[i], 0.0f) << i;
  for (const ParamInfo& info : layout.params()) EXPECT_EQ(info.offset % kParamAlignment, 0) << info.name;
  EXPECT_EQ(p.unpadded("ln_f.weight").ptr<float>()[0], 1.0f);
  EXPECT_EQ(p.unpadded("h.1.mlp.fc.bias").ptr<float>()[0], 0.0f);
}

// An expert-parallel rank's layout holds its experts (4 over 3 ranks: 2, 1, 1) as rows of the
// whole tensors, last in each block's unit in a piece that starts and ends at the unit multiple;
// every expert is held by one rank, and a unit without experts has an empty piece at its end.
TEST(Parameters, ExpertParallelRanksHoldTheirExpertsLastInEachUnit) {
  const ModelConfig c = model_preset("moe-tiny");
  std::vector<int64_t> held(4, 0);
  for (int r = 0; r < 3; ++r) {
    const ParameterLayout layout(c, 64, {}, {}, {r, 3});
    const ParamInfo& fc = layout.find("h.1.mlp.experts.fc.weight");
    EXPECT_EQ(fc.shape[0], r == 0 ? 2 : 1);
    EXPECT_EQ(fc.slice.whole[0], 4);
    const kernels::FlatRange mine = fc.slice.pieces[0].range;
    for (int64_t e = mine.begin; e < mine.end; ++e) ++held[static_cast<size_t>(e)];
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const kernels::FlatRange unit = layout.units()[u], experts = layout.experts_of_unit(u);
      EXPECT_EQ(experts.end, unit.end);
      EXPECT_EQ(experts.begin % 64, 0);
      for (const ParamInfo& p : layout.params()) {
        if (layout.unit_of(p) == u) {
          EXPECT_EQ(p.is_expert, p.offset >= experts.begin) << p.name;
        }
      }
    }
    EXPECT_EQ(layout.experts_of_unit(0).size(), 0);  // the embeddings
    EXPECT_GT(layout.experts_of_unit(layout.block_unit(1)).size(), 0);
  }
  EXPECT_EQ(held, std::vector<int64_t>(4, 1));
}

TEST(Parameters, UnknownNameSuggestsTheClosest) {
  const ParameterLayout layout(model_preset("gpt2-tiny"));
  try {
    layout.find("h.1.attn.qkv.weigth");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'h.1.attn.qkv.weight'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
