// Byte-level BPE, as GPT-2 and Llama 3 tokenize: text -> token ids -> the same bytes.
//
// Encoding (what Hugging Face's tokenizers does for these models, id for id):
//   1. added tokens ("<|endoftext|>", ...) are cut out of the text first, leftmost match
//      first and the longest at one position; each becomes its id;
//   2. the text between them is pre-tokenized by the tokenizer's regex (data/pretokenizer.h);
//   3. each piece starts as its bytes (one token per byte) and its pairs are merged by rank,
//      lowest rank first and leftmost among equals, until no pair has a merge. With
//      ignore_merges (Llama 3), a piece that is itself in the vocabulary is that one token.
// Pieces repeat (" the", " and"), so each encoding call keeps a cache of piece -> ids.
// Post-processing (a Llama 3 <|begin_of_text|> prefix) is not applied: callers add what they
// want, as `dtrain data prepare` adds the end-of-text token before each document.
//
// decode() concatenates the tokens' bytes, so decode(encode(bytes)) == bytes for every byte
// sequence, invalid UTF-8 included (see pretokenizer.h for how it is split).
//
// Ids: tokenizers trained here put byte b at id b, merged tokens at 256.. in the order they
// were learnt, and special tokens last; loaded ones keep the ids of their tokenizer.json.
//
// A Tokenizer is immutable after construction; every const method may be called from many
// threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/pretokenizer.h"

namespace dt {

// A token matched in the text before pre-tokenization. `special` is written to
// tokenizer.json (HF skips special tokens when decoding with skip_special_tokens).
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = true;
};

// What a tokenizer.json holds, in bytes and ids.
struct TokenizerParts {
  std::vector<std::string> token_bytes;                 // (V): the bytes of each id
  std::vector<std::pair<int32_t, int32_t>> merges;      // rank order; each pair's bytes joined is a token
  std::vector<AddedToken> added;                        // their token_bytes are their content
  std::string pattern = std::string(kGpt2Pattern);      // the pre-tokenizer regex
  bool ignore_merges = false;                           // HF's BPE option (true for Llama 3)
};

class Tokenizer {
 public:
  // Validates the parts (every byte has a token, every merge makes a token, ids are unique);
  // `source` names them in errors (a file path, or "trained tokenizer").
  Tokenizer(TokenizerParts parts, std::string source);

  // A Hugging Face tokenizer.json with a byte-level BPE model; throws dt::Error naming the
  // file and field for anything else (a normalizer, byte_fallback, a Unigram model, ...).
  static Tokenizer load(const std::filesystem::path& tokenizer_json);
  // Writes tokenizer.json atomically (temporary file, fsync, rename), loadable by HF tokenizers.
  void save(const std::filesystem::path& tokenizer_json) const;

  std::vector<int32_t> encode(std::string_view text) const;
  // Encodes documents in parallel (OpenMP threads over documents, one piece cache per thread).
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& docs) const;
  // The bytes of the tokens; throws dt::Error naming an id that is not below vocab_size().
  std::string decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(parts_.token_bytes.size()); }  // added tokens included
  std::optional<int32_t> special_token(std::string_view text) const;  // the id of an added token
  // "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3); throws dt::Error when neither exists.
  int32_t eot_token() const;
  const TokenizerParts& parts() const { return parts_; }
  const std::string& source() const { return source_; }

 private:
  friend class PieceEncoder;
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

  TokenizerParts parts_;
  std::string source_;
  PreTokenizer pretokenizer_;
  std::vector<int32_t> byte_token_;                       // (256): the token of each single byte
  std::unordered_map<uint64_t, Merge> merges_;            // pair_key(a, b) -> rank and result
  std::unordered_map<std::string, int32_t> vocab_;        // bytes -> id, added tokens excluded
  std::vector<size_t> added_by_length_;                   // indices into parts_.added, longest first
  std::vector<bool> added_first_byte_;                    // (256): some added token starts with it
};

// Learns a byte-level BPE tokenizer from text files (data/bpe_trainer.h).
Tokenizer train_tokenizer(const std::vector<std::filesystem::path>& files, int vocab_size,
                          std::vector<std::string> special_tokens = {"<|endoftext|>"},
                          PreTokenizerPattern pattern = PreTokenizerPattern::gpt2);

}  // namespace dt
