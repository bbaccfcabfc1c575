// The shards of a dataset split, read as one stream of tokens in shard-name order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "data/token_shard.h"

namespace dt {

class TokenDataset {
 public:
  // Opens every shard; throws dt::Error naming the first bad one.
  TokenDataset(std::vector<std::filesystem::path> shards, int64_t vocab_size);

  // The files in `directory` whose names start with `prefix` and end in ".bin", in name order
  // (llm.c's layout: "train_000001.bin", ...). Throws when there are none, naming the pattern.
  static std::vector<std::filesystem::path> shards_in(const std::filesystem::path& directory,
                                                      const std::string& prefix);
  // Whether `directory` holds any such file (an optional split, such as validation).
  static bool has_shards(const std::filesystem::path& directory, const std::string& prefix);

  int64_t size() const { return total_; }
  // Tokens [begin, begin + out.size()) of the concatenated stream, across shard boundaries.
  void read(int64_t begin, std::span<int32_t> out) const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;  // first stream position of each shard
  int64_t total_ = 0;
};

}  // namespace dt
