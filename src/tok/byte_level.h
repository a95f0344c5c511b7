// GPT-2's byte-level alphabet, shared by the readers and writers of formats that spell tokens in it
// (GPT-2's encoder.json, Hugging Face's tokenizer.json): every byte is shown as a printable code
// point. Bytes printable in Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the other
// 68 map to U+0100.. in byte order.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace clm {

inline void byte_level_codepoints(uint32_t cp[256]) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
  }
}

// UTF-8 of a code point below U+10000.
inline std::string utf8_of(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xE0 | (c >> 12));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

// Bytes <-> their byte-level spelling.
struct ByteLevel {
  std::string spell[256];  // UTF-8 of each byte's code point
  int16_t byte_of[324];    // code point -> byte, -1 where none (the alphabet ends at U+0143)
  ByteLevel() {
    uint32_t cp[256];
    byte_level_codepoints(cp);
    for (auto& b : byte_of) b = -1;
    for (int b = 0; b < 256; ++b) {
      spell[b] = utf8_of(cp[b]);
      byte_of[cp[b]] = int16_t(b);
    }
  }
  std::string encode(std::string_view bytes) const {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) out += spell[c];
    return out;
  }
  // The bytes a byte-level string spells; false if it holds another character.
  bool decode(std::string_view s, std::string& out) const {
    out.clear();
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      uint32_t cp;
      if (c < 0x80) {
        cp = c;
        i += 1;
      } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
        cp = (uint32_t(c & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
        i += 2;
      } else {
        return false;  // three-byte and longer characters are above U+0143
      }
      if (cp >= 324 || byte_of[cp] < 0) return false;
      out += char(byte_of[cp]);
    }
    return true;
  }
};

inline const ByteLevel& byte_level() {
  static const ByteLevel bl;
  return bl;
}

}  // namespace clm
