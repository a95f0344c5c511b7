// Fuzz target: a Parquet file's bytes through the reader (footer, schema, column chunks, pages,
// levels, dictionary and delta encodings, the four codecs), reading column "text" of every row
// group. The limits are lowered so that inputs stay fast; every byte of every document returned is
// read (ASan checks that the views point into live buffers).
#include "data/parquet.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  ParquetLimits limits;
  limits.max_page_bytes = size_t(64) << 20;
  limits.max_row_group_bytes = size_t(64) << 20;
  fuzz::errors_only([&] {
    auto f = ParquetFile::from_memory(fuzz::text_of(data, size), "fuzz.parquet", "text", limits);
    for (size_t g = 0; g < f->row_groups(); ++g) {
      TextBatch b = f->read_row_group(g);
      uint64_t sum = 0, bytes = 0;
      for (std::string_view d : b.docs) {
        for (char c : d) sum += uint8_t(c);
        bytes += d.size();
      }
      fuzz::require(sum <= bytes * 255, "document bytes are readable");
    }
  });
  return 0;
}
