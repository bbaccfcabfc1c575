#include "data/token_shard.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::TempDir;

std::vector<uint32_t> ramp(int64_t n, int64_t vocab) {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % vocab);
  return tokens;
}

std::vector<int32_t> read_all(const TokenShard& shard) {
  std::vector<int32_t> out(static_cast<size_t>(shard.size()));
  shard.read(0, out);
  return out;
}

class TokenShards : public ::testing::TestWithParam<int64_t> {};  // the vocabulary size

TEST_P(TokenShards, RoundTripInLlmcsFormatBothWays) {
  const int64_t vocab = GetParam(), n = 100003;
  TempDir dir;
  const std::vector<uint32_t> tokens = ramp(n, vocab);
  {
    TokenShardWriter writer(dir.file("ours.bin"), vocab);
    writer.append(std::span(tokens).first(12345));  // streamed in pieces
    writer.append(std::span(tokens).subspan(12345));
    writer.finish();
  }
  const TokenShard ours(dir.file("ours.bin"), vocab);
  EXPECT_EQ(ours.size(), n);
  EXPECT_EQ(ours.bytes_per_token(), vocab <= 65536 ? 2 : 4);
  const std::vector<int32_t> back = read_all(ours);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<int32_t>(tokens[i])) << i;
  EXPECT_EQ(std::filesystem::file_size(dir.file("ours.bin")), static_cast<uintmax_t>(1024 + n * ours.bytes_per_token()));

  // llm.c's reader accepts ours; its writer's shard reads here.
  const std::string args = str(vocab, " ", n);
  EXPECT_EQ(testing::run_reference_script("llmc_shard.py", str("check ", dir.file("ours.bin"), " ", args)), 0);
  ASSERT_EQ(testing::run_reference_script("llmc_shard.py", str("write ", dir.file("llmc.bin"), " ", args)), 0);
  EXPECT_EQ(read_all(TokenShard(dir.file("llmc.bin"), vocab)), back);
}

// GPT-2's vocabulary fits uint16 (version 1); Llama 3's needs uint32 (version 7).
INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenShards, ::testing::Values(50257, 128256),
                         [](const auto& info) { return str("vocab", info.param); });

std::string open_error(const std::string& path, int64_t vocab, bool read_everything = false) {
  try {
    const TokenShard shard(path, vocab);
    if (read_everything) read_all(shard);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::vector<int32_t>& header, size_t payload_bytes) {
  std::vector<int32_t> full(256, 0);
  std::copy(header.begin(), header.end(), full.begin());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(full.data()), 1024);
  out << std::string(payload_bytes, '\1');
}

TEST(TokenShard, BadShardsAreNamedWithWhatIsWrong) {
  TempDir dir;
  write_bytes(dir.file("magic.bin"), {12345, 1, 4}, 8);
  EXPECT_NE(open_error(dir.file("magic.bin"), 100).find("magic.bin': header starts with magic 12345 version 1; a token "
                                                          "shard has magic 20240520"),
            std::string::npos)
      << open_error(dir.file("magic.bin"), 100);
  write_bytes(dir.file("truncated.bin"), {kShardMagicU16, kShardVersionU16, 10}, 12);
  EXPECT_NE(open_error(dir.file("truncated.bin"), 100)
                .find("the header counts 10 tokens (1044 bytes with the header) but the file has 1036 bytes: it is "
                      "truncated"),
            std::string::npos)
      << open_error(dir.file("truncated.bin"), 100);
  std::ofstream(dir.file("short.bin")) << "abc";
  EXPECT_NE(open_error(dir.file("short.bin"), 100).find("is 3 bytes, shorter than the 1024-byte header"),
            std::string::npos);
  EXPECT_NE(open_error(dir.file("absent.bin"), 100).find("absent.bin': cannot open: No such file"), std::string::npos);

  // A token id at or above the vocabulary is found when read, with its offset.
  {
    TokenShardWriter writer(dir.file("ids.bin"), 1000);
    const std::vector<uint32_t> tokens = {1, 2, 999, 3};
    writer.append(tokens);
    writer.finish();
  }
  const std::string ids = open_error(dir.file("ids.bin"), 500, true);
  EXPECT_NE(ids.find("ids.bin': token 2 (byte offset 1028) is 999, not below the model's vocabulary size 500"),
            std::string::npos)
      << ids;
}

TEST(TokenShard, TheWriterRejectsOutOfVocabularyIdsAndLeavesNoPartialFile) {
  TempDir dir;
  {
    TokenShardWriter writer(dir.file("x.bin"), 10);
    const std::vector<uint32_t> tokens = {1, 10};
    try {
      writer.append(tokens);
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token 1 is 10, not below the vocabulary size 10"), std::string::npos)
          << e.what();
    }
  }  // abandoned without finish()
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 0u);
  try {
    TokenShardWriter(dir.path() / "no_such_dir" / "x.bin", 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/x.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
