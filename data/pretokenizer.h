// Pre-tokenization: the regex split that byte-level BPE applies before merging, so that merges
// never cross a word, number or whitespace boundary.
//
// The text is cut, as Hugging Face's Split with behaviour "Isolated" does, into the pattern's
// matches and the (in practice absent) gaps between them; every byte of the text lands in
// exactly one piece, in order. Patterns are compiled by PCRE2 with UTF and UCP (so \s, \p{L}
// and \p{N} are Unicode classes) and JIT-compiled where PCRE2 supports JIT on this CPU.
//
// Invalid UTF-8 (HF never sees it: Python strings are valid by construction) is handled so
// that every byte sequence round-trips: the text is split into maximal valid UTF-8 runs, each
// run is matched on its own (PCRE2_NO_UTF_CHECK, since it was just validated), and each byte
// that starts no valid character becomes a piece of its own. An invalid byte therefore also
// ends the run before it, as the end of the text would.
//
// A PreTokenizer is immutable and safe to share between threads; split() allocates its own
// match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

// The two patterns dtrain trains with; any other regex from a tokenizer.json also loads.
enum class PreTokenizerPattern { gpt2, llama3 };

// GPT-2's pattern (HF's ByteLevel pre-tokenizer with use_regex) and Llama 3's (tiktoken's
// cl100k-style pattern: case-insensitive contractions, numbers in groups of up to three).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string_view pattern_regex(PreTokenizerPattern pattern);
// "gpt2" or "llama3"; throws dt::Error listing both for anything else.
PreTokenizerPattern parse_pattern(std::string_view name);

// The length of the longest prefix of text that is valid UTF-8 (no overlong forms,
// surrogates or code points above U+10FFFF).
size_t valid_utf8_prefix(std::string_view text);

// Whether GPT-2's and Llama 3's patterns always have a piece boundary at byte `at`, whatever
// text lies beyond the bytes [at - 2, at + 2): true between an ASCII graphic character and a
// space followed by an ASCII letter ("word| next"), and after a newline that sits between two
// ASCII graphic characters ("end.\n|Next"). Streaming code cuts long text only there, so
// encoding the parts gives the tokens of the whole (no pattern alternative reaches across).
bool is_safe_cut(std::string_view text, size_t at);

class PreTokenizer {
 public:
  // Compiles regex; throws dt::Error quoting PCRE2's message and the offset in the pattern.
  explicit PreTokenizer(std::string regex);
  const std::string& regex() const { return regex_; }

  // Appends the pieces of text to `pieces` (views into text).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  std::string regex_;
  std::shared_ptr<void> code_;  // pcre2_code_8, freed by pcre2_code_free_8
};

}  // namespace dt
