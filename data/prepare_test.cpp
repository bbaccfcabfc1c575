// `data prepare`: its shards hold exactly encode() of each document after an end-of-text token,
// the validation split is the first documents, and streaming in tiny blocks changes nothing.
#include "data/prepare.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/token_dataset.h"
#include "tests/testing.h"

namespace dt {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer t = train_tokenizer({"/usr/share/common-licenses/GPL-3"}, 500);
  return t;
}

std::vector<int32_t> read_split(const std::filesystem::path& dir, const std::string& prefix) {
  const TokenDataset data(TokenDataset::shards_in(dir, prefix), tokenizer().vocab_size());
  std::vector<int32_t> out(data.size());
  data.read(0, out);
  return out;
}

// The documents of a file split on blank lines, as the reader defines them.
std::vector<std::string> paragraphs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> docs;
  std::string line, doc;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (!doc.empty()) docs.push_back(doc), doc.clear();
    } else {
      doc += (doc.empty() ? "" : "\n") + line;
    }
  }
  if (!doc.empty()) docs.push_back(doc);
  return docs;
}

TEST(Prepare, ShardsHoldEotThenEachDocumentAndTheFirstDocumentsAreValidation) {
  testing::TempDir dir;
  const std::vector<std::filesystem::path> inputs = {"/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/MPL-2.0"};
  const auto summary = prepare_data(tokenizer(), {.inputs = inputs, .out_dir = dir.path(), .val_tokens = 500, .shard_tokens = 4000});
  std::vector<int32_t> expected, expected_val;
  int64_t documents = 0;
  for (const auto& input : inputs)
    for (const std::string& doc : paragraphs(input)) {
      ++documents;
      std::vector<int32_t>& split = expected_val.size() < 500 ? expected_val : expected;
      split.push_back(tokenizer().eot_token());
      const auto ids = tokenizer().encode(doc);
      split.insert(split.end(), ids.begin(), ids.end());
    }
  EXPECT_EQ(summary.documents, documents);
  EXPECT_EQ(read_split(dir.path(), "val_"), expected_val);
  EXPECT_EQ(read_split(dir.path(), "train_"), expected);
  EXPECT_EQ(summary.val_tokens, static_cast<int64_t>(expected_val.size()));
  EXPECT_GE(summary.val_tokens, 500);
  EXPECT_EQ(summary.train_shards.size(), static_cast<size_t>((expected.size() + 3999) / 4000));
  EXPECT_EQ(summary.train_shards.front().filename(), "train_000000.bin");
  EXPECT_EQ(summary.val_shards.front().filename(), "val_000000.bin");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))  // no temporary file is left
    EXPECT_EQ(entry.path().extension(), ".bin") << entry.path();
}

TEST(Prepare, StreamingInTinyBlocksGivesTheSameShards) {
  testing::TempDir big, tiny;
  for (const DocSeparator separator : {DocSeparator::blank_lines, DocSeparator::line, DocSeparator::file}) {
    PrepareOptions options{.inputs = {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Artistic"},
                           .out_dir = big.path(),
                           .val_fraction = 0.1,
                           .separator = separator};
    const auto a = prepare_data(tokenizer(), options);
    options.out_dir = tiny.path();
    options.block_bytes = 64;    // documents longer than 256 bytes come in pieces
    options.batch_bytes = 1000;  // and in many batches
    const auto b = prepare_data(tokenizer(), options);
    EXPECT_EQ(a.documents, b.documents);
    EXPECT_GT(a.val_tokens, 0);
    EXPECT_EQ(read_split(big.path(), "val_"), read_split(tiny.path(), "val_"));
    EXPECT_EQ(read_split(big.path(), "train_"), read_split(tiny.path(), "train_"));
  }
  // With whole files as documents, the two files are two documents, the tokens of each text.
  const auto files = read_split(tiny.path(), "train_");
  EXPECT_EQ(std::count(files.begin(), files.end(), tokenizer().eot_token()), 1);  // GPT-3 is the validation split
}

TEST(Prepare, RejectsBadInputsBeforeWriting) {
  testing::TempDir dir;
  std::ofstream(dir.file("empty.txt")).close();
  const auto message = [&](const PrepareOptions& options) -> std::string {
    try {
      prepare_data(tokenizer(), options);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({.inputs = {dir.file("absent.txt")}, .out_dir = dir.file("out")}).find(
                str("cannot read input text file '", dir.file("absent.txt"), "'")),
            std::string::npos);
  EXPECT_NE(message({.inputs = {dir.file("empty.txt")}, .out_dir = dir.file("out")}).find(
                str("input text file '", dir.file("empty.txt"), "' is empty")),
            std::string::npos);
  EXPECT_NE(message({.inputs = {"/usr/share/common-licenses/GPL-3"}, .out_dir = dir.file("empty.txt/sub")}).find(
                str("cannot create output directory '", dir.file("empty.txt/sub"), "'")),
            std::string::npos);
}

}  // namespace
}  // namespace dt
