// Learning byte-level BPE merges from text: Hugging Face's BpeTrainer algorithm, merge for merge.
//
// Words (pre-tokenizer pieces) are counted once; each word starts as its bytes. Then, until
// the vocabulary is full, the most frequent adjacent pair (counted over all words, weighted by
// word count) becomes a new token and is merged in every word that holds it. Pair counts are
// kept incrementally: a merge reports only the pairs it destroyed and created, a pair -> words
// index says where to merge, and a max-heap of (count, pair) with stale entries refreshed
// lazily picks the next pair. Ties go to the smaller pair of ids in HF's numbering (bytes
// ordered by their code point in data/byte_unicode.h, then new tokens in creation order), so
// the merges are HF's own for the same word counts. Like HF's trainer, added tokens in the
// training text are not cut out first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/pretokenizer.h"

namespace dt {

using WordCounts = std::unordered_map<std::string, int64_t>;

// Pieces of every file (each file one text, read in constant memory), counted in parallel.
WordCounts count_words(const std::vector<std::filesystem::path>& files, const PreTokenizer& pretokenizer);

struct LearnedMerges {
  std::vector<std::string> tokens;                   // new tokens' bytes; token k has id 256 + k
  std::vector<std::pair<int32_t, int32_t>> merges;   // rank order, in ids where byte b is id b
};

// Learns merges until 256 + tokens.size() == max_vocab or no pair is left. Two merges can make
// the same token ("ab"+"c", "a"+"bc"); HF keeps both, and so does this.
LearnedMerges learn_merges(const WordCounts& words, int64_t max_vocab);

}  // namespace dt
