// Decompression of Parquet pages: UNCOMPRESSED, SNAPPY (libsnappy), GZIP (zlib) and ZSTD
// (libzstd). The declared size is checked against what the compressed data can hold before any
// buffer is allocated; data that does not decompress to exactly that size is an error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace clm::parquet {

bool codec_supported(int codec);

// Checks that n bytes at src can hold `size` bytes once decompressed (before a buffer is sized by
// it). `what` starts errors.
void check_decompressed_size(int codec, const uint8_t* src, size_t n, size_t size, const std::string& what);
// Decompresses them into exactly `size` bytes at out (after check_decompressed_size).
void decompress_into(int codec, const uint8_t* src, size_t n, uint8_t* out, size_t size, const std::string& what);

}  // namespace clm::parquet
