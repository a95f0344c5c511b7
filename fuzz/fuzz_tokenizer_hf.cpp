// Fuzz target: a Hugging Face tokenizer.json through parse_hf_tokenizer_text; a tokenizer that
// loads must encode and decode a sample exactly, with token byte lengths that sum to its size.
#include "fuzz/fuzz_util.h"
#include "tok/hf_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string_view text = fuzz::text_of(data, size);
  fuzz::errors_only([&] {
    Tokenizer t = parse_hf_tokenizer_text(text, "tokenizer.json");
    for (std::string_view s : {text.substr(0, 48), std::string_view("Hello, world!  It's 2024.\n")}) {
      std::vector<uint32_t> ids = t.encode(s);
      uint64_t bytes = 0;
      for (uint32_t id : ids) {
        fuzz::require(id < t.vocab_size(), "encoded id below vocab_size");
        bytes += t.token_bytes()[id];
      }
      fuzz::require(bytes == s.size(), "token bytes sum to the text's size");
      fuzz::require(t.decode(ids) == s, "decode(encode(s)) == s");
    }
    fuzz::require(t.bos_id() < t.vocab_size(), "bos below vocab_size");
  });
  return 0;
}
