// Token shards in llm.c's format, so shards made by llm.c's scripts train here and ours there.
//
// A shard is a 1,024-byte header of 256 little-endian int32 — header[0] the magic number,
// header[1] the version, header[2] the token count, the rest zero — followed by the tokens:
//   magic 20240520, version 1: uint16 tokens (vocabularies up to 65,536, GPT-2's)
//   magic 20240801, version 7: uint32 tokens (larger vocabularies, Llama 3's)
//
// TokenShardWriter streams tokens into a shard in constant memory and makes it appear
// atomically (temporary file, fsync, rename). TokenShard maps a shard read-only, validates its
// header and size on opening, and checks every token it hands out against the vocabulary, so a
// bad id is reported with the file and its offset when it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace dt {

constexpr int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 7;
constexpr int64_t kShardHeaderBytes = 1024;

// 2 for vocabularies that fit uint16, else 4.
int token_bytes_for_vocab(int64_t vocab_size);

class TokenShardWriter {
 public:
  // Starts a shard for a vocabulary of vocab_size tokens (which picks uint16 or uint32).
  TokenShardWriter(std::filesystem::path path, int64_t vocab_size);
  ~TokenShardWriter();  // an unfinished shard is removed; `path` is never left half-written
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  // Appends tokens; each must be below vocab_size.
  void append(std::span<const uint32_t> tokens);
  int64_t size() const { return count_; }
  // Writes the header, syncs and renames the shard into place.
  void finish();

 private:
  void flush();
  std::filesystem::path path_, temporary_;
  int64_t vocab_size_;
  int bytes_per_token_;
  int fd_ = -1;
  int64_t count_ = 0;
  std::string pending_;  // encoded tokens not yet written
};

class TokenShard {
 public:
  // Maps `path` and validates its header against its size; vocab_size bounds the ids.
  TokenShard(std::filesystem::path path, int64_t vocab_size);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard& operator=(TokenShard&&) = delete;

  const std::filesystem::path& path() const { return path_; }
  int64_t size() const { return count_; }
  int bytes_per_token() const { return bytes_per_token_; }
  // Copies tokens [begin, begin + out.size()) into out; throws dt::Error naming the file and
  // the token's offset when one is not below the vocabulary size.
  void read(int64_t begin, std::span<int32_t> out) const;

 private:
  std::filesystem::path path_;
  int64_t vocab_size_;
  int bytes_per_token_ = 2;
  int64_t count_ = 0;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace dt
