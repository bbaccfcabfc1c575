#include "data/data_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::TempDir;

constexpr int64_t kVocab = 1000;

// Token i of the whole stream is i % kVocab, split over shards of the given sizes.
std::vector<std::filesystem::path> write_shards(const TempDir& dir, const std::vector<int64_t>& sizes) {
  std::vector<std::filesystem::path> paths;
  int64_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    paths.push_back(dir.path() / str("train_", s, ".bin"));
    TokenShardWriter writer(paths.back(), kVocab);
    std::vector<uint32_t> tokens;
    for (int64_t i = 0; i < sizes[s]; ++i) tokens.push_back(static_cast<uint32_t>(next++ % kVocab));
    writer.append(tokens);
    writer.finish();
  }
  return paths;
}

struct Batches {
  std::vector<int32_t> tokens, targets;
};

// n batches of (B, T) from a loader.
Batches take(DataLoader& loader, int B, int T, int n) {
  Batches out;
  testing::OwnedTensor tokens = testing::zeros(DType::i32, {B, T}), targets = testing::zeros(DType::i32, {B, T});
  for (int i = 0; i < n; ++i) {
    loader.next(tokens.t, targets.t);
    out.tokens.insert(out.tokens.end(), tokens.ptr<int32_t>(), tokens.ptr<int32_t>() + B * T);
    out.targets.insert(out.targets.end(), targets.ptr<int32_t>(), targets.ptr<int32_t>() + B * T);
  }
  return out;
}

TEST(DataLoader, WithoutShufflingSampleKIsTheWindowAtKTimesSeqLenAcrossShards) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {500, 3, 700}), kVocab);  // boundaries inside windows
  constexpr int T = 16, B = 4;
  DataLoader loader(dataset, T, B, 1, false);
  EXPECT_EQ(loader.samples_per_epoch(), (1203 - 1) / T);
  const Batches b = take(loader, B, T, 10);
  for (int64_t s = 0; s < 40; ++s)
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(b.tokens[s * T + t], (s * T + t) % kVocab) << "sample " << s;
      ASSERT_EQ(b.targets[s * T + t], (s * T + t + 1) % kVocab) << "sample " << s;
    }
}

TEST(DataLoader, GlobalSamplesDoNotDependOnTheMicroBatchSize) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {2000}), kVocab);
  DataLoader by_two(dataset, 8, 2, 9, true), by_eight(dataset, 8, 8, 9, true);
  const Batches a = take(by_two, 2, 8, 40), b = take(by_eight, 8, 8, 10);  // 80 samples, past an epoch of 249
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
}

// Three data-parallel ranks reading micro-batches of 2 read, between them, what one loader
// reads in micro-batches of 6: rank r the r-th pair of each six, across an epoch boundary, and
// all three end in the one loader's state.
TEST(DataLoader, DataParallelRanksSplitEachWindowInRankOrder) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {2000}), kVocab);
  constexpr int T = 8, steps = 50;  // 300 samples, past an epoch of 249
  DataLoader whole(dataset, T, 6, 9, true);
  const Batches all = take(whole, 6, T, steps);
  for (int r = 0; r < 3; ++r) {
    DataLoader rank(dataset, T, 2, 9, true, r, 3);
    const Batches mine = take(rank, 2, T, steps);
    for (int s = 0; s < steps; ++s)
      for (int i = 0; i < 2 * T; ++i) {
        ASSERT_EQ(mine.tokens[s * 2 * T + i], all.tokens[(s * 6 + 2 * r) * T + i]) << "rank " << r << " step " << s;
        ASSERT_EQ(mine.targets[s * 2 * T + i], all.targets[(s * 6 + 2 * r) * T + i]);
      }
    EXPECT_EQ(rank.state(), whole.state());
  }
}

TEST(DataLoader, RestoringTheStateResumesExactlyAcrossEpochs) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {300}), kVocab);
  constexpr int T = 10, B = 3;  // 29 samples per epoch: batches straddle epochs
  DataLoader straight(dataset, T, B, 4, true);
  const Batches all = take(straight, B, T, 30);
  EXPECT_EQ(straight.state().epoch, 3);  // 90 samples = 3 epochs and 3

  DataLoader first(dataset, T, B, 4, true);
  take(first, B, T, 12);
  const DataLoaderState saved = first.state();
  DataLoader resumed(dataset, T, B, 4, true);
  resumed.restore(saved);
  const Batches rest = take(resumed, B, T, 18);
  EXPECT_EQ(std::vector<int32_t>(all.tokens.begin() + 12 * B * T, all.tokens.end()), rest.tokens);

  // Each epoch visits every sample once, in a new order.
  std::vector<int32_t> epoch0(all.tokens.begin(), all.tokens.begin() + 29 * T),
      epoch1(all.tokens.begin() + 29 * T, all.tokens.begin() + 58 * T);
  EXPECT_NE(epoch0, epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  EXPECT_EQ(epoch0, epoch1);
}

TEST(DataLoader, TooLittleDataOrNoShardsAreNamed) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {10}), kVocab);
  try {
    DataLoader loader(dataset, 16, 1, 1, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the dataset holds 10 tokens, fewer than one sequence of seq_len + 1 = 17"),
              std::string::npos)
        << e.what();
  }
  try {
    TokenDataset::shards_in(dir.path(), "val");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no shards 'val*.bin' in"), std::string::npos) << e.what();
  }
  EXPECT_EQ(TokenDataset::shards_in(dir.path(), "train").size(), 1u);
}

TEST(DataLoader, ABadTokenIsReportedByNextWithFileAndOffset) {
  TempDir dir;
  const TokenDataset dataset(write_shards(dir, {100}), 50);  // tokens go up to 99
  DataLoader loader(dataset, 8, 1, 1, false);
  testing::OwnedTensor tokens = testing::zeros(DType::i32, {1, 8}), targets = testing::zeros(DType::i32, {1, 8});
  for (int i = 0; i < 6; ++i) loader.next(tokens.t, targets.t);  // samples 0-5 read tokens 0-48
  try {
    loader.next(tokens.t, targets.t);  // sample 6 reads tokens 48-56
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train_0.bin': token 50 (byte offset 1124) is 50"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
