#include "data/byte_unicode.h"

#include <array>

namespace dt {

namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// code point of each byte, and the byte of each code point below U+0144 (-1: none).
struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, 0x144> to_byte{};
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) { return tables().to_unicode[byte]; }

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const char32_t u = byte_to_unicode(static_cast<uint8_t>(c));
    if (u < 0x80) {
      out += static_cast<char>(u);
    } else {  // every mapped code point is below U+0800: two UTF-8 bytes
      out += static_cast<char>(0xC0 | (u >> 6));
      out += static_cast<char>(0x80 | (u & 0x3F));
    }
  }
  return out;
}

std::optional<std::string> unicode_to_bytes(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (size_t i = 0; i < key.size();) {
    const auto c0 = static_cast<uint8_t>(key[i]);
    char32_t u;
    if (c0 < 0x80) {
      u = c0, i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < key.size() && (static_cast<uint8_t>(key[i + 1]) & 0xC0) == 0x80) {
      u = (char32_t{c0} & 0x1F) << 6 | (static_cast<uint8_t>(key[i + 1]) & 0x3F), i += 2;
    } else {
      return std::nullopt;
    }
    if (u >= tables().to_byte.size() || tables().to_byte[u] < 0) return std::nullopt;
    out += static_cast<char>(tables().to_byte[u]);
  }
  return out;
}

}  // namespace dt
