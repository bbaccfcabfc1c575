// The byte-level BPE tokenizer: exact round trips on any bytes, a hand-made tokenizer.json, and
// Hugging Face tokenizers as the reference both ways (their trainer -> our encoder, our trainer
// -> their encoder), for GPT-2's and Llama 3's patterns.
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/byte_unicode.h"
#include "tests/testing.h"

namespace dt {
namespace {

// Accents, CJK, emoji, digits, whitespace runs, contractions in both cases, CRLF, Unicode
// spaces and a special token: the cases where pre-tokenizers differ.
constexpr const char* kMultilingual =
    "Héllo wörld! Ça va? naïve café, déjà vu — «quotes» and “curly” ones.\n"
    "日本語のテキストです。中文字符测试。한국어 문장입니다.\n"
    "Emoji: 😀🚀👍🏽 and 🇫🇷 flags; math ∑∫√ π≈3.14159.\n"
    "Numbers 1234567890 1,000,000 0.5 2024-05-20 v1.2.3 x86_64\n"
    "\t\ttabs   three spaces    four\n\n\nthree newlines\r\nCRLF line\u00A0nbsp\u3000ideographic\n"
    "don't won't I'm you're we've they'll he'd DON'T WE'VE It'S\n"
    "text<|endoftext|>after the special token <|endoftext|>\n"
    "    indented code(x) { return a->b[i] + 0x1F; }   \n"
    "trailing spaces   ";

std::string write_file(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name), std::ios::binary) << text;
  return dir.file(name);
}

// Debian's license texts plus the multilingual sample: ~150 KB that any machine has.
std::vector<std::filesystem::path> corpus(const testing::TempDir& dir) {
  std::vector<std::filesystem::path> files;
  for (const char* name : {"GPL-3", "Apache-2.0", "MPL-2.0", "Artistic"}) files.push_back(str("/usr/share/common-licenses/", name));
  std::string sample;
  for (int i = 0; i < 20; ++i) sample += kMultilingual;  // often enough that its pairs get merges
  files.push_back(write_file(dir, "multilingual.txt", sample));
  return files;
}

const Tokenizer& small_tokenizer() {
  static const Tokenizer t = [] {
    testing::TempDir dir;
    return train_tokenizer(corpus(dir), 600);
  }();
  return t;
}

TEST(Tokenizer, RoundTripsRandomBytesAndInvalidUtf8) {
  const Tokenizer& t = small_tokenizer();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(rng() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    ASSERT_EQ(t.decode(t.encode(bytes)), bytes) << "trial " << trial;
  }
  for (const std::string& bytes : {std::string("\xff\xfe abc \xc3"), std::string("\xed\xa0\x80 surrogate"),
                                  std::string("\xc0\xaf overlong \xf4\x90\x80\x80 too big"), std::string("\0 nul\n", 7),
                                  std::string("ab\x80\x80 cd\xe2\x82")})
    EXPECT_EQ(t.decode(t.encode(bytes)), bytes);
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_EQ(t.decode({}), "");
  EXPECT_EQ(t.decode(t.encode(kMultilingual)), kMultilingual);
}

TEST(Tokenizer, RecognisesSpecialTokensAndRejectsBadIds) {
  const Tokenizer& t = small_tokenizer();
  const int32_t eot = t.eot_token();
  EXPECT_EQ(eot, t.vocab_size() - 1);  // special tokens come last
  EXPECT_EQ(t.special_token("<|endoftext|>"), eot);
  EXPECT_FALSE(t.special_token("<|nope|>").has_value());
  const auto ids = t.encode("a<|endoftext|><|endoftext|>b");
  ASSERT_EQ(std::count(ids.begin(), ids.end(), eot), 2);
  EXPECT_EQ(t.decode(ids), "a<|endoftext|><|endoftext|>b");
  EXPECT_EQ(t.encode("<|endoftext|>"), std::vector<int32_t>{eot});
  const int32_t bad[] = {1, t.vocab_size()};
  try {
    t.decode(bad);
    FAIL() << "decode accepted an id beyond the vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str("id ", t.vocab_size(), " is not in [0, vocab_size = ", t.vocab_size())),
              std::string::npos) << e.what();
  }
  const auto batch = t.encode_batch({"one doc", "", "two <|endoftext|> docs"});
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0], t.encode("one doc"));
  EXPECT_TRUE(batch[1].empty());
  EXPECT_EQ(batch[2], t.encode("two <|endoftext|> docs"));
}

TEST(Tokenizer, TrainingStopsAtTheVocabularySizeAndSavesLoadably) {
  testing::TempDir dir;
  const Tokenizer& t = small_tokenizer();
  EXPECT_EQ(t.vocab_size(), 600);
  t.save(dir.file("t.json"));
  const Tokenizer loaded = Tokenizer::load(dir.file("t.json"));
  EXPECT_EQ(loaded.vocab_size(), 600);
  EXPECT_EQ(loaded.encode(kMultilingual), t.encode(kMultilingual));
  EXPECT_THROW(train_tokenizer({"/usr/share/common-licenses/GPL-3"}, 200), Error);
}

// A tokenizer.json written by hand: 256 bytes, three merges, one special token.
std::string tiny_json(const std::string& model_extra = "", const std::string& normalizer = "null") {
  std::ostringstream vocab;
  for (int b = 0; b < 256; ++b) {
    const std::string key = bytes_to_unicode(std::string(1, static_cast<char>(b)));
    vocab << (b ? "," : "") << '"' << (key == "\"" ? "\\\"" : key == "\\" ? "\\\\" : key) << "\":" << b;
  }
  vocab << R"(,"he":256,"ll":257,"hell":258,"Ġw":259)";
  return str(R"({"version":"1.0","added_tokens":[{"id":260,"content":"<|endoftext|>","special":true,)",
             R"("lstrip":false,"rstrip":false,"single_word":false,"normalized":false}],"normalizer":)", normalizer,
             R"(,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)",
             R"("model":{"type":"BPE",)", model_extra, R"("vocab":{)", vocab.str(),
             R"(},"merges":["h e","l l","he ll","Ġ w"]}})");
}

TEST(Tokenizer, LoadsAHandMadeTokenizerJson) {
  testing::TempDir dir;
  const Tokenizer t = Tokenizer::load(write_file(dir, "tiny.json", tiny_json()));
  EXPECT_EQ(t.vocab_size(), 261);
  EXPECT_EQ(t.eot_token(), 260);
  // "hello" -> he + ll -> hell, o; " world" -> Ġw, o, r, l, d
  EXPECT_EQ(t.encode("hello world<|endoftext|>"),
            (std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd', 260}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{258, 'o', 259}), "hello w");
  // Merges also load in the [left, right] form of newer HF versions.
  std::string pairs = tiny_json();
  const std::string strings = R"(["h e","l l","he ll","Ġ w"])";
  pairs.replace(pairs.find(strings), strings.size(), R"([["h","e"],["l","l"],["he","ll"],["Ġ","w"]])");
  EXPECT_EQ(Tokenizer::load(write_file(dir, "pairs.json", pairs)).encode("hello"), t.encode("hello"));
}

TEST(Tokenizer, RejectsWhatItDoesNotImplementNamingTheField) {
  testing::TempDir dir;
  const auto expect_error = [&](const std::string& json, const std::string& message) {
    try {
      Tokenizer::load(write_file(dir, "bad.json", json));
      ADD_FAILURE() << "loaded a tokenizer with " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir.file("bad.json")), std::string::npos) << e.what();
    }
  };
  expect_error(tiny_json("", R"({"type":"NFC"})"), "normalizer is {\"type\":\"NFC\"}");
  expect_error(tiny_json(R"("byte_fallback":true,)"), "model.byte_fallback is true; only false is supported");
  std::string unigram = tiny_json();
  unigram.replace(unigram.find(R"("type":"BPE")"), 12, R"("type":"Unigram")");
  expect_error(unigram, "model.type is \"Unigram\"; only \"BPE\" is supported");
  std::string missing_byte = tiny_json();
  missing_byte.replace(missing_byte.find(R"("a":97,)"), 7, "");
  expect_error(missing_byte, "has no token with id 97");
  expect_error("{not json", "is not valid JSON");
  EXPECT_THROW(Tokenizer::load(dir.file("absent.json")), Error);
}

// --- against Hugging Face tokenizers ---

std::vector<std::vector<int32_t>> hf_encode(const std::string& tokenizer_json, const std::vector<std::filesystem::path>& files,
                                            const testing::TempDir& dir) {
  std::string args = str("encode --tokenizer ", tokenizer_json, " --out ", dir.file("hf_ids.txt"));
  for (const auto& f : files) args += " " + f.string();
  EXPECT_EQ(testing::run_reference_script("tokenizer_reference.py", args), 0);
  std::vector<std::vector<int32_t>> out;
  std::ifstream in(dir.file("hf_ids.txt"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    out.emplace_back(std::istream_iterator<int32_t>(ids), std::istream_iterator<int32_t>());
  }
  return out;
}

void expect_same_encoding(const std::string& tokenizer_json, const std::vector<std::filesystem::path>& files,
                          const testing::TempDir& dir) {
  const Tokenizer ours = Tokenizer::load(tokenizer_json);
  const auto theirs = hf_encode(tokenizer_json, files, dir);
  ASSERT_EQ(theirs.size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string text = testing::file_bytes(files[i]);
    const auto ids = ours.encode(text);
    EXPECT_EQ(ids, theirs[i]) << tokenizer_json << " on " << files[i] << " (" << ids.size() << " vs " << theirs[i].size()
                              << " tokens)";
    EXPECT_EQ(ours.decode(ids), text);
  }
}

class TokenizerHf : public ::testing::TestWithParam<PreTokenizerPattern> {};

TEST_P(TokenizerHf, TrainsTheSameMergesAndEncodesIdenticallyBothWays) {
  testing::TempDir dir;
  const auto files = corpus(dir);
  const std::string pattern = GetParam() == PreTokenizerPattern::gpt2 ? "gpt2" : "llama3";
  std::string args = str("train --pattern ", pattern, " --vocab-size 2000 --out ", dir.file("hf.json"));
  for (const auto& f : files) args += " " + f.string();
  ASSERT_EQ(testing::run_reference_script("tokenizer_reference.py", args), 0);
  const Tokenizer ours = train_tokenizer(files, 2000, {"<|endoftext|>"}, GetParam());
  ours.save(dir.file("ours.json"));

  // The trainers agree merge for merge (compared as bytes: the two number tokens differently).
  const Tokenizer hf = Tokenizer::load(dir.file("hf.json"));
  const auto merges_as_bytes = [](const Tokenizer& t) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [a, b] : t.parts().merges) out.emplace_back(t.parts().token_bytes[a], t.parts().token_bytes[b]);
    return out;
  };
  EXPECT_EQ(merges_as_bytes(ours), merges_as_bytes(hf));
  EXPECT_EQ(ours.vocab_size(), hf.vocab_size());

  // Each tokenizer.json encodes the corpus to the same ids in dtrain and in HF.
  expect_same_encoding(dir.file("hf.json"), files, dir);
  expect_same_encoding(dir.file("ours.json"), files, dir);
}

INSTANTIATE_TEST_SUITE_P(Patterns, TokenizerHf, ::testing::Values(PreTokenizerPattern::gpt2, PreTokenizerPattern::llama3),
                         [](const auto& info) { return info.param == PreTokenizerPattern::gpt2 ? "gpt2" : "llama3"; });

}  // namespace
}  // namespace dt
