// Fuzz target: GPT-2's tokenizer files, encoder.json and vocab.bpe (two parts of one input,
// separated by a NUL byte), through parse_gpt2; a tokenizer that loads must round-trip a sample.
#include "fuzz/fuzz_util.h"
#include "tok/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  auto files = fuzz::split_files(fuzz::text_of(data, size), 2);
  fuzz::errors_only([&] {
    Tokenizer t = parse_gpt2(files[0], files[1], "gpt2");
    for (std::string_view s :
         {files[1].substr(0, 48), std::string_view("Hello, world!  It's 2024.\n")}) {
      std::vector<uint32_t> ids = t.encode(s);
      fuzz::require(t.decode(ids) == s, "decode(encode(s)) == s");
    }
  });
  return 0;
}
