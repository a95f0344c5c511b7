// Fuzz target: a prepared dataset's manifest.json through parse_dataset_manifest. A manifest that
// passes names shards inside the dataset folder and a BOS id inside the vocabulary.
#include "data/dataset.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  fuzz::errors_only([&] {
    DatasetInfo info = parse_dataset_manifest(fuzz::text_of(data, size), "/data/set");
    fuzz::require(info.bos_id < info.vocab_size, "bos below vocab_size");
    for (const auto* list : {&info.train_shards, &info.val_shards})
      for (const std::string& p : *list)
        fuzz::require(p.rfind("/data/set/", 0) == 0 && p.find('/', 10) == std::string::npos,
                      "shards lie inside the folder");
  });
  return 0;
}
