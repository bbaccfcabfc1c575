// The tensor-parallel split of a model: which heads, columns and rows each rank holds, and that
// the ranks' layouts together hold every element of the model once, initialised as one process
// initialises it.
#include "model/tensor_shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/parameters.h"

namespace dt {
namespace {

std::vector<int64_t> part_sizes(int64_t count, int parts) {
  std::vector<int64_t> sizes;
  int64_t next = 0;
  for (int i = 0; i < parts; ++i) {
    const kernels::FlatRange r = even_part(count, parts, i);
    EXPECT_EQ(r.begin, next);  // the parts tile [0, count)
    next = r.end;
    sizes.push_back(r.size());
  }
  EXPECT_EQ(next, count);
  return sizes;
}

TEST(TensorShard, SplitsAsEvenlyAsPossible) {
  EXPECT_EQ(part_sizes(6, 4), (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(part_sizes(997, 4), (std::vector<int64_t>{250, 249, 249, 249}));
  EXPECT_EQ(part_sizes(128, 3), (std::vector<int64_t>{43, 43, 42}));
}

// llama-tiny: 6 query heads reading 2 key/value heads (3 each).
TEST(TensorShard, HeadsSplitKeyValueHeadsOrCopyThem) {
  const ModelConfig llama = model_preset("llama-tiny");
  // 2 ranks: one key/value head each, with its three query heads.
  for (int r = 0; r < 2; ++r) {
    const HeadShard h = shard_dims(llama, {r, 2}).heads;
    EXPECT_TRUE(h.kv_split);
    EXPECT_EQ(h.q_begin, 3 * r);
    EXPECT_EQ(h.q_end, 3 * r + 3);
    EXPECT_EQ(h.kv_begin, r);
    EXPECT_EQ(h.kv_end, r + 1);
    EXPECT_EQ(h.phase(), 0);
    EXPECT_TRUE(h.owns_kv(r));
  }
  // 3 ranks: query heads 0-1, 2-3, 4-5. The middle rank reads both key/value heads and owns
  // head 1 (its head 3 is that group's first query head); rank 2 holds a copy of head 1.
  const HeadShard middle = shard_dims(llama, {1, 3}).heads;
  EXPECT_FALSE(middle.kv_split);
  EXPECT_EQ(middle.q_begin, 2);
  EXPECT_EQ(middle.kv_begin, 0);
  EXPECT_EQ(middle.kv_end, 2);
  EXPECT_EQ(middle.phase(), 2);  // local head 0 (head 2) reads local 0, local 1 (head 3) local 1
  EXPECT_FALSE(middle.owns_kv(0));
  EXPECT_TRUE(middle.owns_kv(1));  // head 3 is key/value head 1's first query head
  const HeadShard last = shard_dims(llama, {2, 3}).heads;
  EXPECT_EQ(last.kv_begin, 1);
  EXPECT_FALSE(last.owns_kv(1));
  // 4 ranks: 2, 2, 1, 1 query heads.
  std::vector<int> counts;
  for (int r = 0; r < 4; ++r) counts.push_back(shard_dims(llama, {r, 4}).heads.n_head());
  EXPECT_EQ(counts, (std::vector<int>{2, 2, 1, 1}));
}

TEST(TensorShard, MoreRanksThanHeadsNamesTheKeyAndASizeThatWorks) {
  try {
    check_tensor_parallel(model_preset("gpt2-tiny"), 4);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("parallel.tp = 4"), std::string::npos) << what;
    EXPECT_NE(what.find("3 attention heads"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.tp <= 3"), std::string::npos) << what;
  }
  EXPECT_THROW(check_tensor_parallel(model_preset("gpt2-tiny"), 0), ConfigError);
}

// Every rank's tensors, initialised by each rank alone, are the whole model's at the places
// their slices name; every element of the model is held by some rank and owned by exactly one;
// the gradient norm's ranges are the owned elements.
void expect_shards_tile_the_model(const ModelConfig& config, int tp) {
  SCOPED_TRACE(str(model_family_name(config.family), " over tp ", tp));
  const ParameterLayout whole_layout(config);
  FlatTensors whole(whole_layout, MemTag::workspace);
  init_parameters(whole, 7);
  std::map<std::string, std::vector<int>> owners;  // per element of each whole tensor
  std::map<std::string, std::vector<int>> holders;
  for (const ParamInfo& p : whole_layout.params()) {
    owners[p.name].assign(static_cast<size_t>(p.numel()), 0);
    holders[p.name].assign(static_cast<size_t>(p.numel()), 0);
  }
  for (int r = 0; r < tp; ++r) {
    const ParameterLayout layout(config, kParamAlignment, {r, tp});
    FlatTensors shard(layout, MemTag::workspace);
    init_parameters(shard, 7);
    int64_t owned_elements = 0;
    for (const ParamInfo& p : layout.params()) {
      const float* mine = shard.unpadded(p).ptr<float>();
      const float* reference = whole.unpadded(p.name).ptr<float>();
      int64_t covered = 0;
      for (const ParamInfo::Run& run : p.runs()) {
        ASSERT_EQ(std::memcmp(mine + run.local, reference + run.global, static_cast<size_t>(run.count) * 4), 0)
            << p.name << " rank " << r << " run at " << run.local;
        for (int64_t i = 0; i < run.count; ++i) {
          owners[p.name][static_cast<size_t>(run.global + i)] += run.owned;
          holders[p.name][static_cast<size_t>(run.global + i)] += 1;
        }
        owned_elements += run.owned ? run.count : 0;
        covered += run.count;
      }
      EXPECT_EQ(covered, p.numel()) << p.name;
    }
    int64_t in_owned_ranges = 0;
    for (const kernels::FlatRange& range : layout.owned_ranges()) in_owned_ranges += range.size();
    EXPECT_EQ(in_owned_ranges, owned_elements) << "rank " << r;
  }
  for (const auto& [name, counts] : owners)
    for (size_t i = 0; i < counts.size(); ++i) {
      ASSERT_EQ(counts[i], 1) << name << " element " << i << " owned by " << counts[i] << " ranks";
      ASSERT_GE(holders.at(name)[i], 1) << name << " element " << i;
    }
}

TEST(TensorShard, ShardsHoldEveryElementOnceInitialisedAsOneProcess) {
  ModelConfig gpt2_six_heads = model_preset("gpt2-tiny");
  gpt2_six_heads.n_head = 6;
  for (int tp : {1, 2, 3}) expect_shards_tile_the_model(model_preset("gpt2-tiny"), tp);
  for (int tp : {4, 5, 6}) expect_shards_tile_the_model(gpt2_six_heads, tp);
  for (int tp : {1, 2, 3, 4, 6}) expect_shards_tile_the_model(model_preset("llama-tiny"), tp);
}

// The slices of one layer at tp 4 over llama-tiny, written out: rank 1 holds query heads 2 and 3,
// and the copy of key/value head 0 (owned by rank 0) and key/value head 1 (its own: head 3 is
// that group's first).
TEST(TensorShard, QkvRowsOfACopyingRank) {
  const ModelConfig config = model_preset("llama-tiny");  // C 48, 6 heads of 8, 2 kv heads
  const ParameterLayout layout(config, kParamAlignment, {1, 4});
  const ParamInfo& qkv = layout.find("h.0.attn.qkv.weight");
  EXPECT_EQ(qkv.shape, (Shape{(2 + 2 + 2) * 8, 48}));
  std::vector<std::tuple<int64_t, int64_t, bool>> pieces;
  for (const SlicePiece& p : qkv.slice.pieces) pieces.emplace_back(p.range.begin, p.range.end, p.owned);
  EXPECT_EQ(pieces, (std::vector<std::tuple<int64_t, int64_t, bool>>{
                        {16, 32, true}, {48, 56, false}, {56, 64, true}, {64, 72, false}, {72, 80, true}}));
  const ParamInfo& proj = layout.find("h.0.attn.proj.weight");
  EXPECT_EQ(proj.shape, (Shape{48, 16}));
  EXPECT_EQ(proj.slice.dim, 1);
  const ParamInfo& fc = layout.find("h.0.mlp.fc.weight");  // F 128 over 4: 32 gate and 32 up rows
  EXPECT_EQ(fc.shape, (Shape{64, 48}));
  EXPECT_EQ(fc.slice.pieces[1].range.begin, 128 + 32);
  EXPECT_EQ(layout.find("lm_head").shape, (Shape{249, 48}));
  EXPECT_EQ(layout.find("lm_head").stored_rows, 256);
  EXPECT_FALSE(layout.find("ln_f.weight").slice.pieces[0].owned);
}

}  // namespace
}  // namespace dt
