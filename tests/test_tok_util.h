// Shared helpers for the tokenizer tests: deterministic varied text (many scripts, emoji, numbers,
// long runs that exercise the long-chunk merge path), random bytes, and paths to shared data.
#pragma once
#include <cstdint>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/common.h"

namespace tok_test {

// A per-process scratch folder (tests of several checkouts may run at once on one machine).
inline std::filesystem::path temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}
inline std::string shared(const std::string& rel) { return std::string(CLOCKLM_SHARED_DATA) + "/" + rel; }
inline bool have_gpt2() {
  return std::filesystem::exists(shared("tokenizers/gpt2/encoder.json")) &&
         std::filesystem::exists(shared("tokenizers/gpt2/vocab.bpe"));
}
inline std::string gpt2_dir() { return shared("tokenizers/gpt2"); }
inline std::string shakespeare() {
  auto p = shared("tiny/tinyshakespeare.txt");
  return std::filesystem::exists(p) ? clm::read_file(p) : std::string();
}

// Valid UTF-8 text of about `bytes` bytes mixing scripts, emoji, digits, punctuation, contractions,
// whitespace oddities and long runs (> 64 bytes) of letters, digits, spaces and punctuation.
inline std::string varied_text(size_t bytes, uint64_t seed) {
  static const char* words[] = {
      "the", "The", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
      "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "hello",
      "world", "tokenizer", "Tokenization", "HTTP", "JSON", "don't", "I'm", "WE'LL", "they've", "she'd",
      "it'S", "You'RE", "naïve", "café", "Größe", "straße", "Ελληνικά", "λόγος", "русский", "язык",
      "Привет", "мир", "日本語", "東京", "中文", "汉字", "한국어", "서울", "العربية", "مرحبا", "עברית",
      "हिन्दी", "नमस्ते", "ไทย", "ქართული", "Ṁ̇", "e\u0301", "🙂", "🚀", "👩‍💻", "🇫🇷", "❤️", "∑∫√",
      "x²", "½", "Ⅻ", "٣٤٥", "१२३", "3.14159", "2024", "1,000,000", "0x1F", "$19.99", "100%", "e-mail",
      "C++", "a_b", "snake_case", "(parens)", "[brackets]", "{braces}", "<tag>", "--", "...", "!?",
      "“quoted”", "‘single’", "—", "…", "«»", "¿Qué?", "¡Sí!", "ſ", "K", "ǅ", "ﬁ", "\u00a0", "\u2009",
      "\u3000", "\u200b", "\u2028", "\u0085", "\u180e", "\x1c", "\x7f", "\t"};
  static const char* seps[] = {" ", " ", " ", " ", " ", "  ", "\n", "\n\n", ", ", ". ", "\t", "\r\n",
                               " \n", "   \n", "\n  ", " \u00a0", "\n\n\n", "    ", "; ", ": "};
  clm::Rng rng(seed);
  std::string s;
  s.reserve(bytes + 256);
  auto pick = [&](size_t n) { return size_t(rng.next() % n); };
  while (s.size() < bytes) {
    uint64_t r = rng.next() % 1000;
    if (r < 6) {  // long runs for the long-chunk path
      size_t n = 65 + pick(300);
      const char* kinds[] = {"a", "ab", "x", " ", "9", "!", "=", "é", "字", "\n"};
      std::string unit = kinds[pick(10)];
      for (size_t k = 0; k * unit.size() < n; ++k) s += unit;
    } else if (r < 12) {  // a long random word of letters
      size_t n = 65 + pick(200);
      for (size_t k = 0; k < n; ++k) s += char('a' + pick(26));
    } else if (r < 40) {
      s += std::to_string(rng.next() % 100000000);
    } else {
      s += words[pick(sizeof(words) / sizeof(words[0]))];
    }
    s += seps[pick(sizeof(seps) / sizeof(seps[0]))];
  }
  return s;
}

inline std::string random_bytes(size_t n, uint64_t seed) {
  clm::Rng rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng.next() & 0xFF);
  return s;
}

// Bytes that are not valid UTF-8, alone and next to valid text.
inline std::vector<std::string> invalid_utf8_cases() {
  return {"\x80", "\xbf\xbf", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
          "\xf5\x80\x80\x80", "\xff", "\xfe\xff", "a\xc3", "\xc3 b", "ab\xe2\x82", "\xe2\x82 x", "\xf0\x9f\x98",
          "hello \x80world", "don\x92t", "caf\xe9 au lait", "\xe9t\xe9", "  \xa0\xa0  x", "\n\x80\n",
          std::string("nul\0byte", 8), "\xc3\xa9\xc3", "123\xff" "456"};
}

}  // namespace tok_test
