#include "data/token_dataset.h"

#include <algorithm>

#include "core/error.h"

namespace dt {

TokenDataset::TokenDataset(std::vector<std::filesystem::path> shards, int64_t vocab_size) {
  DT_CHECK(!shards.empty(), "a token dataset needs at least one shard");
  for (auto& path : shards) {
    starts_.push_back(total_);
    shards_.emplace_back(std::move(path), vocab_size);
    total_ += shards_.back().size();
  }
}

namespace {

// The shard files of a split, in name order; empty when there are none.
std::vector<std::filesystem::path> find_shards(const std::filesystem::path& directory, const std::string& prefix) {
  std::vector<std::filesystem::path> shards;
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) return shards;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with(prefix) && name.ends_with(".bin")) shards.push_back(entry.path());
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

}  // namespace

std::vector<std::filesystem::path> TokenDataset::shards_in(const std::filesystem::path& directory,
                                                           const std::string& prefix) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    throw Error(str("data directory '", directory.string(), "' does not exist or is not a directory; check data.dir "
                    "or run `dtrain data prepare`"));
  std::vector<std::filesystem::path> shards = find_shards(directory, prefix);
  if (shards.empty())
    throw Error(str("no shards '", prefix, "*.bin' in '", directory.string(), "'; run `dtrain data prepare` or "
                    "point data.dir at a directory of llm.c shards"));
  return shards;
}

bool TokenDataset::has_shards(const std::filesystem::path& directory, const std::string& prefix) {
  return !find_shards(directory, prefix).empty();
}

void TokenDataset::read(int64_t begin, std::span<int32_t> out) const {
  DT_CHECK(begin >= 0 && begin + static_cast<int64_t>(out.size()) <= total_, "read of [", begin, ", ",
           begin + static_cast<int64_t>(out.size()), ") from a dataset of ", total_, " tokens");
  // The shard holding `begin`, then onwards.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1);
  size_t done = 0;
  while (done < out.size()) {
    const int64_t at = begin + static_cast<int64_t>(done) - starts_[s];
    const size_t n = std::min(out.size() - done, static_cast<size_t>(shards_[s].size() - at));
    shards_[s].read(at, out.subspan(done, n));
    done += n;
    ++s;
  }
}

}  // namespace dt
