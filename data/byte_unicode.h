// GPT-2's byte-to-unicode mapping: how byte-level BPE writes bytes as text in tokenizer.json.
//
// Every byte maps to one printable code point: the 188 printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') to themselves, the other 68 (controls, space, 0x7F-0xA0, 0xAD) to
// U+0100 + n in byte order, so space is 'Ġ' (U+0120) and newline 'Ċ' (U+010A). A token's
// vocabulary key in tokenizer.json is its bytes written this way, and its merges are pairs of
// such keys separated by a space (which never occurs inside a key).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dt {

// The code point byte b is written as.
char32_t byte_to_unicode(uint8_t byte);

// The bytes a vocabulary key stands for, or nullopt when a character of it is not one of the
// 256 code points above (or the key is not valid UTF-8).
std::optional<std::string> unicode_to_bytes(std::string_view key);

// The vocabulary key of a token's bytes: each byte's code point, UTF-8 encoded.
std::string bytes_to_unicode(std::string_view bytes);

}  // namespace dt
