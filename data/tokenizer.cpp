#include "data/tokenizer.h"

#include <algorithm>
#include <exception>
#include <mutex>

#include "core/error.h"

namespace dt {

namespace {

// Pieces longer than this are encoded but not cached: they rarely repeat, and a long
// whitespace or digit run would otherwise pin its bytes in the cache.
constexpr size_t kMaxCachedPieceBytes = 64;
// The cache is dropped when it holds this many pieces, bounding an encoder's memory.
constexpr size_t kMaxCachedPieces = size_t{1} << 18;

}  // namespace

Tokenizer::Tokenizer(TokenizerParts parts, std::string source)
    : parts_(std::move(parts)), source_(std::move(source)), pretokenizer_(parts_.pattern) {
  const auto fail = [&](const std::string& what) { throw Error(str("tokenizer '", source_, "': ", what)); };
  const int64_t vocab_size = static_cast<int64_t>(parts_.token_bytes.size());
  std::vector<bool> is_added(parts_.token_bytes.size(), false);
  added_first_byte_.assign(256, false);
  for (size_t i = 0; i < parts_.added.size(); ++i) {
    const AddedToken& t = parts_.added[i];
    if (t.id < 0 || t.id >= vocab_size) fail(str("added token '", t.content, "' has id ", t.id, ", outside [0, ", vocab_size, ")"));
    if (t.content.empty()) fail(str("added token ", t.id, " is empty"));
    if (is_added[t.id]) fail(str("two added tokens have id ", t.id));
    is_added[t.id] = true;
    parts_.token_bytes[t.id] = t.content;
    added_by_length_.push_back(i);
    added_first_byte_[static_cast<uint8_t>(t.content[0])] = true;
  }
  std::stable_sort(added_by_length_.begin(), added_by_length_.end(),
                   [&](size_t a, size_t b) { return parts_.added[a].content.size() > parts_.added[b].content.size(); });
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (is_added[id]) continue;
    if (!vocab_.emplace(parts_.token_bytes[id], id).second)
      fail(str("tokens ", vocab_.at(parts_.token_bytes[id]), " and ", id, " have the same bytes"));
  }
  byte_token_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end())
      fail(str("no token for byte ", b, "; byte-level BPE needs all 256 single-byte tokens (train with the full byte "
               "alphabet, e.g. HF's initial_alphabet=ByteLevel.alphabet())"));
    byte_token_[b] = it->second;
  }
  for (size_t rank = 0; rank < parts_.merges.size(); ++rank) {
    const auto [a, b] = parts_.merges[rank];
    if (a < 0 || b < 0 || a >= vocab_size || b >= vocab_size)
      fail(str("merge ", rank, " joins ids ", a, " and ", b, ", outside [0, ", vocab_size, ")"));
    const auto it = vocab_.find(parts_.token_bytes[a] + parts_.token_bytes[b]);
    if (it == vocab_.end()) fail(str("merge ", rank, " (ids ", a, " + ", b, ") makes a token that is not in the vocabulary"));
    // A pair listed twice keeps its later rank, as HF's map built from the list does.
    merges_[pair_key(a, b)] = {static_cast<int32_t>(rank), it->second};
  }
}

// Encodes text with the scratch space and piece cache of one thread.
class PieceEncoder {
 public:
  explicit PieceEncoder(const Tokenizer& tokenizer) : t_(tokenizer) {}

  void encode(std::string_view text, std::vector<int32_t>& out) {
    while (!text.empty()) {
      const auto [at, added] = find_added(text);
      pieces_.clear();
      t_.pretokenizer_.split(text.substr(0, at), pieces_);
      for (const std::string_view piece : pieces_) encode_piece(piece, out);
      if (added == nullptr) break;
      out.push_back(added->id);
      text.remove_prefix(at + added->content.size());
    }
  }

 private:
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbouring live symbols, -1 at the ends
  };
  struct Candidate {
    int32_t rank, pos;  // the pair (pos, its next) merges at this rank
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };

  // The first added token in text (its offset, or text.size() and nullptr when none).
  std::pair<size_t, const AddedToken*> find_added(std::string_view text) const {
    if (t_.added_by_length_.empty()) return {text.size(), nullptr};
    for (size_t at = 0; at < text.size(); ++at) {
      if (!t_.added_first_byte_[static_cast<uint8_t>(text[at])]) continue;
      for (const size_t i : t_.added_by_length_)
        if (text.substr(at).starts_with(t_.parts_.added[i].content)) return {at, &t_.parts_.added[i]};
    }
    return {text.size(), nullptr};
  }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) {
    const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
    if (cacheable) {
      if (const auto it = cache_.find(piece); it != cache_.end()) {
        out.insert(out.end(), cached_ids_.begin() + it->second.first, cached_ids_.begin() + it->second.second);
        return;
      }
    }
    const size_t start = out.size();
    merge(piece, out);
    if (!cacheable) return;
    if (cache_.size() >= kMaxCachedPieces) cache_.clear(), cached_ids_.clear();
    cache_.emplace(piece, std::pair{cached_ids_.size(), cached_ids_.size() + (out.size() - start)});
    cached_ids_.insert(cached_ids_.end(), out.begin() + start, out.end());
  }

  // The BPE merge loop over one piece: a min-heap of mergeable adjacent pairs by (rank,
  // position); entries made stale by an earlier merge are recognised and skipped when popped.
  void merge(std::string_view piece, std::vector<int32_t>& out) {
    if (t_.parts_.ignore_merges) {
      if (const auto it = t_.vocab_.find(std::string(piece)); it != t_.vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const int32_t n = static_cast<int32_t>(piece.size());
    symbols_.resize(n);
    for (int32_t i = 0; i < n; ++i) symbols_[i] = {t_.byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    heap_.clear();
    const auto push = [&](int32_t pos) {
      const int32_t next = symbols_[pos].next;
      if (next < 0) return;
      const auto it = t_.merges_.find(Tokenizer::pair_key(symbols_[pos].id, symbols_[next].id));
      if (it == t_.merges_.end()) return;
      heap_.push_back({it->second.rank, pos});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const Candidate top = heap_.back();
      heap_.pop_back();
      Symbol& left = symbols_[top.pos];
      if (left.id < 0 || left.next < 0) continue;  // merged away, or now last
      const Symbol& right = symbols_[left.next];
      const auto it = t_.merges_.find(Tokenizer::pair_key(left.id, right.id));
      if (it == t_.merges_.end() || it->second.rank != top.rank) continue;  // the pair changed since
      const int32_t removed = left.next;
      left.id = it->second.id;
      left.next = right.next;
      if (left.next >= 0) symbols_[left.next].prev = top.pos;
      symbols_[removed].id = -1;
      if (left.prev >= 0) push(left.prev);
      push(top.pos);
    }
    for (int32_t i = 0; i >= 0; i = symbols_[i].next) out.push_back(symbols_[i].id);
  }

  const Tokenizer& t_;
  std::vector<std::string_view> pieces_;
  std::vector<Symbol> symbols_;
  std::vector<Candidate> heap_;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache_;  // piece -> range of cached_ids_
  std::vector<int32_t> cached_ids_;
};

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  PieceEncoder(*this).encode(text, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& docs) const {
  std::vector<std::vector<int32_t>> out(docs.size());
  std::exception_ptr failure;
  std::mutex failure_mutex;
  // The cache keys are views into docs, which outlive the parallel region.
#pragma omp parallel
  {
    PieceEncoder encoder(*this);
#pragma omp for schedule(dynamic, 8)
    for (size_t i = 0; i < docs.size(); ++i) {
      try {
        out[i].reserve(docs[i].size() / 3);
        encoder.encode(docs[i], out[i]);
      } catch (...) {  // an exception must not leave an OpenMP region
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      throw Error(str("cannot decode token ", i, ": id ", ids[i], " is not in [0, vocab_size = ", vocab_size(),
                      ") of tokenizer '", source_, "'; the ids come from a different tokenizer"));
    out += parts_.token_bytes[ids[i]];
  }
  return out;
}

std::optional<int32_t> Tokenizer::special_token(std::string_view text) const {
  for (const AddedToken& t : parts_.added)
    if (t.content == text) return t.id;
  return std::nullopt;
}

int32_t Tokenizer::eot_token() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>"})
    if (const auto id = special_token(name)) return *id;
  throw Error(str("tokenizer '", source_, "' has no end-of-text token (<|endoftext|> or <|end_of_text|>) among its ",
                  "added tokens; train it with --special \"<|endoftext|>\""));
}

}  // namespace dt
