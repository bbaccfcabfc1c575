#include "data/bpe_trainer.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "data/byte_unicode.h"
#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace dt {

namespace {

using Pair = uint64_t;  // (a << 32 | b): ordering these numbers orders the pairs as tuples
Pair make_pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

// A queue entry: a pair, its count when queued, and the words to merge it in.
struct Candidate {
  Pair pair;
  int64_t count;
  std::vector<int32_t> words;
  // The heap's top is the highest count, then the smallest pair (HF's order).
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

struct Change {
  Pair pair;
  int delta;
};

// Merges every non-overlapping (a, b), left to right, into `merged`, reporting the neighbouring
// pairs lost and made (HF's Word::merge; the merged pair's own count is left to the caller).
void merge_word(std::vector<int32_t>& word, int32_t a, int32_t b, int32_t merged, std::vector<Change>& changes) {
  size_t out = 0;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] == a && i + 1 < word.size() && word[i + 1] == b) {
      if (out > 0) {
        changes.push_back({make_pair_key(word[out - 1], a), -1});
        changes.push_back({make_pair_key(word[out - 1], merged), +1});
      }
      if (i + 2 < word.size()) {
        changes.push_back({make_pair_key(b, word[i + 2]), -1});
        changes.push_back({make_pair_key(merged, word[i + 2]), +1});
      }
      word[out++] = merged;
      ++i;
    } else {
      word[out++] = word[i];
    }
  }
  word.resize(out);
}

}  // namespace

WordCounts count_words(const std::vector<std::filesystem::path>& files, const PreTokenizer& pretokenizer) {
  constexpr size_t kBatchPieces = 32;
  DocumentReader reader(files, DocSeparator::file);
  WordCounts total;
  std::vector<DocumentPiece> batch(kBatchPieces);
  while (true) {
    size_t n = 0;
    while (n < kBatchPieces && reader.next(batch[n])) ++n;
    if (n == 0) break;
    std::vector<WordCounts> counts(n);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < n; ++i) {
      std::vector<std::string_view> pieces;
      pretokenizer.split(batch[i].text, pieces);
      for (const std::string_view piece : pieces) ++counts[i][std::string(piece)];
    }
    for (const WordCounts& c : counts)
      for (const auto& [word, count] : c) total[word] += count;
  }
  return total;
}

LearnedMerges learn_merges(const WordCounts& word_counts, int64_t max_vocab) {
  // Ids here are HF's: bytes in the order of their code points, then new tokens.
  std::vector<int32_t> byte_of(256), id_of_byte(256);
  for (int b = 0; b < 256; ++b) byte_of[b] = b;
  std::sort(byte_of.begin(), byte_of.end(), [](int x, int y) { return byte_to_unicode(x) < byte_to_unicode(y); });
  std::vector<std::string> token_bytes(256);
  for (int id = 0; id < 256; ++id) id_of_byte[byte_of[id]] = id, token_bytes[id] = std::string(1, char(byte_of[id]));
  std::unordered_map<std::string, int32_t> id_of_token;

  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  for (const auto& [word, count] : word_counts) {
    std::vector<int32_t>& w = words.emplace_back();
    for (const char c : word) w.push_back(id_of_byte[static_cast<uint8_t>(c)]);
    counts.push_back(count);
  }
  std::unordered_map<Pair, int64_t> pair_counts;
  std::unordered_map<Pair, std::vector<int32_t>> where;  // pair -> words gaining it since last queued
  const auto note_word = [&](Pair pair, int32_t word) {
    auto& list = where[pair];
    if (list.empty() || list.back() != word) list.push_back(word);  // a word's changes arrive together
  };
  for (int32_t i = 0; i < static_cast<int32_t>(words.size()); ++i)
    for (size_t k = 0; k + 1 < words[i].size(); ++k) {
      const Pair pair = make_pair_key(words[i][k], words[i][k + 1]);
      pair_counts[pair] += counts[i];
      note_word(pair, i);
    }
  std::priority_queue<Candidate> queue;
  const auto queue_changed = [&] {
    for (auto& [pair, list] : where)
      if (const int64_t count = pair_counts[pair]; count > 0) queue.push({pair, count, std::move(list)});
    where.clear();
  };
  queue_changed();

  LearnedMerges out;
  std::vector<Change> changes;
  while (256 + static_cast<int64_t>(out.tokens.size()) < max_vocab && !queue.empty()) {
    Candidate top = std::move(const_cast<Candidate&>(queue.top()));
    queue.pop();
    if (const int64_t now = pair_counts[top.pair]; now != top.count) {  // stale: requeue at its count
      top.count = now;
      queue.push(std::move(top));
      continue;
    }
    if (top.count < 1) break;
    const int32_t a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair & 0xFFFFFFFF);
    std::string bytes = token_bytes[a] + token_bytes[b];
    auto [it, is_new] = id_of_token.emplace(bytes, static_cast<int32_t>(token_bytes.size()));
    const int32_t merged = it->second;
    if (is_new) {
      token_bytes.push_back(bytes);
      out.tokens.push_back(std::move(bytes));
    }
    out.merges.emplace_back(a, b);  // HF ids for now
    for (const int32_t i : top.words) {
      changes.clear();
      merge_word(words[i], a, b, merged, changes);
      for (const Change& c : changes) {
        pair_counts[c.pair] += c.delta * counts[i];
        if (c.delta > 0) note_word(c.pair, i);
      }
    }
    queue_changed();
  }
  // Into dtrain's ids: byte b is id b; new tokens keep their order from 256.
  const auto final_id = [&](int32_t id) { return id < 256 ? byte_of[id] : id; };
  for (auto& [x, y] : out.merges) x = final_id(x), y = final_id(y);
  return out;
}

Tokenizer train_tokenizer(const std::vector<std::filesystem::path>& files, int vocab_size,
                          std::vector<std::string> special_tokens, PreTokenizerPattern pattern) {
  const int64_t specials = static_cast<int64_t>(special_tokens.size());
  if (vocab_size < 256 + specials)
    throw Error(str("vocabulary size ", vocab_size, " is below the 256 byte tokens plus ", specials,
                    " special tokens; ask for at least ", 256 + specials));
  TokenizerParts parts;
  parts.pattern = pattern_regex(pattern);
  const LearnedMerges learned = learn_merges(count_words(files, PreTokenizer(parts.pattern)), vocab_size - specials);
  for (int b = 0; b < 256; ++b) parts.token_bytes.emplace_back(1, static_cast<char>(b));
  parts.token_bytes.insert(parts.token_bytes.end(), learned.tokens.begin(), learned.tokens.end());
  parts.merges = learned.merges;
  for (std::string& content : special_tokens) {
    parts.added.push_back({.id = static_cast<int32_t>(parts.token_bytes.size()), .content = content, .special = true});
    parts.token_bytes.push_back(std::move(content));
  }
  return Tokenizer(std::move(parts), "trained tokenizer");
}

}  // namespace dt
