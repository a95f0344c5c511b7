// Fuzz target: a clocklm tokenizer file (tokenizer.json) through Tokenizer::from_json; a tokenizer
// that loads must encode and decode a sample exactly (decode(encode(s)) == s).
#include "fuzz/fuzz_util.h"
#include "tok/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string_view text = fuzz::text_of(data, size);
  fuzz::errors_only([&] {
    Tokenizer t = Tokenizer::from_json(text, "tokenizer.json");
    // A short sample: the input's first bytes (any bytes, also invalid UTF-8) and plain text.
    for (std::string_view s :
         {text.substr(0, 48), std::string_view("Hello, world!  It's 2024.\n")}) {
      std::vector<uint32_t> ids = t.encode(s);
      for (uint32_t id : ids) fuzz::require(id < t.vocab_size(), "encoded id below vocab_size");
      fuzz::require(t.decode(ids) == s, "decode(encode(s)) == s");
    }
    fuzz::require(t.bos_id() < t.vocab_size(), "bos below vocab_size");
    fuzz::require(t.token_bytes().size() == t.vocab_size(), "token_bytes covers the vocabulary");
  });
  return 0;
}
