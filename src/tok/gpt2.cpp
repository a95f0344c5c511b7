// GPT-2 compatibility: reads GPT-2's encoder.json (token string -> id) and vocab.bpe (merges in
// rank order), undoing GPT-2's byte-to-unicode mapping so the tokenizer works on raw bytes and
// produces exactly GPT-2's ids. BOS is <|endoftext|>.
#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "core/json_parse.h"
#include "tok/bpe.h"
#include "tok/byte_level.h"
#include "tok/file_limits.h"

namespace clm {

Tokenizer parse_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, const std::string& dir) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  const std::string enc_path = (fs::path(dir) / "encoder.json").string();
  const std::string bpe_path = (fs::path(dir) / "vocab.bpe").string();
  check_tokenizer_size(encoder_json.size(), enc_path);
  check_tokenizer_size(vocab_bpe.size(), bpe_path);
  json enc;
  if (std::string why; !try_parse_json(encoder_json, enc, &why)) fail("malformed {}: {}", enc_path, why);
  if (!enc.is_object() || enc.empty()) fail("malformed {}: expected an object of token -> id", enc_path);
  std::unordered_map<std::string, uint32_t> ids;
  // Ids are 0..n-1 for n entries (build_tokenizer checks each is defined once); one outside that
  // range is refused here, before it sizes the table below.
  const size_t n_ids = enc.size();
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= n_ids)
      fail("malformed {}: id of {} is not a number below {}", enc_path, it.key(), n_ids);
    // GPT-2's alphabet spells each byte as one character: the characters count the token's bytes.
    const std::string& k = it.key();
    check_token_size(size_t(std::count_if(k.begin(), k.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; })),
                     enc_path, fmt::format("id {}", it.value().get<uint64_t>()));
    ids[it.key()] = uint32_t(it.value().get<uint64_t>());
  }
  auto id_of = [&](const std::string& tok, size_t line) {
    auto it = ids.find(tok);
    if (it == ids.end()) fail("{} line {}: token '{}' is not in encoder.json", bpe_path, line, tok);
    return it->second;
  };

  uint32_t cp[256];
  byte_level_codepoints(cp);
  TokenizerParts p;
  uint32_t* byte_id = p.byte_id;
  std::vector<uint8_t> used(n_ids, 0);
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(utf8_of(cp[b]));
    if (it == ids.end()) fail("malformed {}: no token for byte {}", enc_path, b);
    byte_id[b] = it->second;
    used[it->second] = 1;
  }

  std::string_view text = vocab_bpe;
  std::vector<std::array<uint32_t, 3>> merges;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string line(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() || line.find(' ', sp + 1) != std::string::npos)
      fail("malformed {} line {}: expected two tokens separated by one space", bpe_path, line_no);
    std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    uint32_t c = id_of(a + b, line_no);
    merges.push_back({id_of(a, line_no), id_of(b, line_no), c});
    used[c] = 1;
  }
  // Whatever encoder.json holds beyond the bytes and merges is a special token (<|endoftext|>).
  std::vector<std::pair<std::string, uint32_t>> specials;
  for (auto& [tok, id] : ids)
    if (!used[id]) specials.emplace_back(tok, id);
  std::sort(specials.begin(), specials.end(), [](auto& x, auto& y) { return x.second < y.second; });
  auto eot = ids.find("<|endoftext|>");
  if (eot == ids.end()) fail("malformed {}: no <|endoftext|> token", enc_path);
  p.pattern = kGpt2Pattern;
  p.merges = std::move(merges);
  p.specials = std::move(specials);
  p.bos = eot->second;
  p.vocab_size = uint32_t(ids.size());
  p.kind = "gpt2";
  return build_tokenizer(std::move(p), dir);
}

Tokenizer load_gpt2(const std::string& dir) {
  namespace fs = std::filesystem;
  return parse_gpt2(read_tokenizer_file((fs::path(dir) / "encoder.json").string()),
                    read_tokenizer_file((fs::path(dir) / "vocab.bpe").string()), dir);
}

}  // namespace clm
