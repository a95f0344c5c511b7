// Fuzz target: a .tiktoken rank file (with clocklm's split pattern and an added <|bos|>) through
// parse_tiktoken_ranks; a tokenizer that loads must encode and decode a sample exactly.
#include "fuzz/fuzz_util.h"
#include "tok/tiktoken.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string_view text = fuzz::text_of(data, size);
  fuzz::errors_only([&] {
    TokenizerOptions o;
    o.pattern = "clocklm";
    o.add_bos = "<|bos|>";
    Tokenizer t = parse_tiktoken_ranks(text, "t.tiktoken", o);
    for (std::string_view s : {text.substr(0, 48), std::string_view("Hello, world!  It's 2024.\n")}) {
      std::vector<uint32_t> ids = t.encode(s);
      for (uint32_t id : ids) fuzz::require(id < t.vocab_size(), "encoded id below vocab_size");
      fuzz::require(t.decode(ids) == s, "decode(encode(s)) == s");
    }
  });
  return 0;
}
