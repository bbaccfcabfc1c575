#include "parallel/pipeline/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace dt::pipeline {
namespace {

std::vector<int> blocks_per_stage(const std::vector<StageUnits>& stages) {
  std::vector<int> out;
  for (const StageUnits& s : stages) out.push_back(s.end_block - s.first_block);
  return out;
}

TEST(Partition, StagesAreContiguousWithTheEmbeddingsFirstAndTheHeadLast) {
  const ModelConfig config = model_preset("gpt2-124m");  // 12 blocks
  for (int stages = 1; stages <= 12; ++stages) {
    const std::vector<StageUnits> parts = partition_stages(config, stages, 1024);
    ASSERT_EQ(static_cast<int>(parts.size()), stages);
    int next = 0;
    for (size_t s = 0; s < parts.size(); ++s) {
      EXPECT_EQ(parts[s].first_block, next) << "stage " << s;
      EXPECT_GT(parts[s].end_block, parts[s].first_block) << "stage " << s;
      EXPECT_EQ(parts[s].embeddings, s == 0);
      EXPECT_EQ(parts[s].head, s + 1 == parts.size());
      next = parts[s].end_block;
    }
    EXPECT_EQ(next, 12);
  }
}

// The head's output projection counts: gpt2-124m's (2 x 768 x 50257 per token, 77 MFLOP) is
// about five blocks' work (15.7 MFLOP each at 1024 tokens), so over 4 stages the last takes one
// block and the other 11 go to the first three, none above 4; a small vocabulary splits evenly;
// 7 blocks over 4 stages work.
TEST(Partition, TheHeadsWorkIsCounted) {
  const std::vector<int> gpt2 = blocks_per_stage(partition_stages(model_preset("gpt2-124m"), 4, 1024));
  EXPECT_EQ(gpt2.back(), 1);
  EXPECT_EQ(gpt2[0] + gpt2[1] + gpt2[2], 11);
  EXPECT_LE(*std::max_element(gpt2.begin(), gpt2.end()), 4);
  ModelConfig small_vocab = model_preset("gpt2-124m");
  small_vocab.vocab_size = 256;
  EXPECT_EQ(blocks_per_stage(partition_stages(small_vocab, 4, 1024)), (std::vector<int>{3, 3, 3, 3}));
  small_vocab.n_layer = 7;
  const std::vector<int> seven = blocks_per_stage(partition_stages(small_vocab, 4, 1024));
  EXPECT_EQ(seven.size(), 4u);
  EXPECT_EQ(*std::max_element(seven.begin(), seven.end()), 2);
}

TEST(Partition, MoreStagesThanBlocksNamesWhatWorks) {
  try {
    partition_stages(model_preset("gpt2-tiny"), 3, 64);  // 2 blocks
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("3 pipeline stages"), std::string::npos) << what;
    EXPECT_NE(what.find("more pipeline stages than the model's 2 blocks (model.n_layer)"), std::string::npos) << what;
    EXPECT_NE(what.find("use at most 2 stages"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dt::pipeline
