#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"

namespace dt {

namespace {

// Splits a run of valid UTF-8 into the pattern's matches and the gaps between them.
void split_valid(const pcre2_code* code, pcre2_match_data* match_data, const std::string& regex,
                 std::string_view run, std::vector<std::string_view>& pieces) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
  size_t at = 0;  // end of the last piece
  while (at < run.size()) {
    const int rc = pcre2_match(code, subject, run.size(), at, PCRE2_NO_UTF_CHECK, match_data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw Error(str("pre-tokenizer pattern failed to match: ", reinterpret_cast<const char*>(message),
                      "; pattern: ", regex));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t begin = ovector[0];
    size_t end = ovector[1];
    if (end == begin) {  // an empty match would never advance: take the character there as a piece
      end = begin + 1;
      while (end < run.size() && (static_cast<unsigned char>(run[end]) & 0xC0) == 0x80) ++end;
    }
    if (begin > at) pieces.push_back(run.substr(at, begin - at));  // a gap the pattern skipped
    pieces.push_back(run.substr(begin, end - begin));
    at = end;
  }
  if (at < run.size()) pieces.push_back(run.substr(at));
}

}  // namespace

std::string_view pattern_regex(PreTokenizerPattern pattern) {
  return pattern == PreTokenizerPattern::gpt2 ? kGpt2Pattern : kLlama3Pattern;
}

PreTokenizerPattern parse_pattern(std::string_view name) {
  if (name == "gpt2") return PreTokenizerPattern::gpt2;
  if (name == "llama3") return PreTokenizerPattern::llama3;
  throw Error(str("unknown pre-tokenizer pattern '", name, "'; valid patterns are gpt2, llama3"));
}

size_t valid_utf8_prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int length;
    unsigned char low = 0x80, high = 0xBF;  // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // overlong
      if (c == 0xED) high = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;   // overlong
      if (c == 0xF4) high = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + length > n || s[i + 1] < low || s[i + 1] > high) return i;
    for (int k = 2; k < length; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += length;
  }
  return n;
}

bool is_safe_cut(std::string_view text, size_t at) {
  const auto graphic = [&](size_t i) { return i < text.size() && text[i] > ' ' && text[i] < 0x7F; };
  const auto letter = [&](size_t i) {
    return i < text.size() && ((text[i] >= 'a' && text[i] <= 'z') || (text[i] >= 'A' && text[i] <= 'Z'));
  };
  if (at < 2 || at + 1 >= text.size()) return false;
  if (graphic(at - 1) && text[at] == ' ' && letter(at + 1)) return true;
  return graphic(at - 2) && text[at - 1] == '\n' && graphic(at);
}

PreTokenizer::PreTokenizer(std::string regex) : regex_(std::move(regex)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex_.data()), regex_.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(str("pre-tokenizer pattern does not compile at offset ", offset, ": ",
                    reinterpret_cast<const char*>(message), "; pattern: ", regex_));
  }
  // JIT makes matching several times faster; where this build of PCRE2 or this CPU has no JIT,
  // pcre2_match interprets the same pattern with the same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  DT_CHECK(match_data != nullptr, "out of memory for PCRE2 match data");
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) split_valid(code, match_data.get(), regex_, text.substr(0, valid), pieces);
    if (valid < text.size()) pieces.push_back(text.substr(valid, 1));  // a byte that starts no character
    text.remove_prefix(std::min(text.size(), valid + 1));
  }
}

}  // namespace dt
