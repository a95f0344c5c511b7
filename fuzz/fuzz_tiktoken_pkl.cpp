// Fuzz target: a pickled tiktoken Encoding (nanochat's tokenizer.pkl) through the restricted
// pickle reader and parse_tiktoken_pickle; a tokenizer that loads must encode and decode a sample
// exactly. Never runs anything the pickle names: any other opcode or class is an Error.
#include "fuzz/fuzz_util.h"
#include "tok/tiktoken.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string_view bytes = fuzz::text_of(data, size);
  fuzz::errors_only([&] {
    Tokenizer t = parse_tiktoken_pickle(bytes, "tokenizer.pkl");
    for (std::string_view s : {bytes.substr(0, 48), std::string_view("Hello, world!  It's 2024.\n")}) {
      std::vector<uint32_t> ids = t.encode(s);
      for (uint32_t id : ids) fuzz::require(id < t.vocab_size(), "encoded id below vocab_size");
      fuzz::require(t.decode(ids) == s, "decode(encode(s)) == s");
    }
  });
  return 0;
}
