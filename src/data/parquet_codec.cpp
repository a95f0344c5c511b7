// Page decompression (see parquet_codec.h).
#include "data/parquet_codec.h"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <climits>
#include <cstring>
#include <memory>

#include "core/common.h"
#include "data/parquet_meta.h"

namespace clm::parquet {

bool codec_supported(int codec) {
  return codec == kUncompressed || codec == kSnappy || codec == kGzip || codec == kZstd;
}

namespace {

void inflate_gzip(const uint8_t* src, size_t n, uint8_t* out, size_t size, const std::string& what) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) fail("{} (cannot start zlib)", what);  // gzip or zlib header
  z.next_in = const_cast<Bytef*>(src);
  z.avail_in = uInt(n);
  z.next_out = out;
  z.avail_out = uInt(size);
  int rc = inflate(&z, Z_FINISH);
  size_t produced = size - z.avail_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != size)
    fail("{} (corrupt GZIP data: {} bytes where the page header says {})", what,
         rc == Z_STREAM_END || rc == Z_BUF_ERROR || rc == Z_OK ? std::to_string(produced) : "undecodable", size);
}

}  // namespace

void check_decompressed_size(int codec, const uint8_t* src, size_t n, size_t size, const std::string& what) {
  switch (codec) {
    case kUncompressed:
      if (n != size) fail("{} (uncompressed page of {} bytes says it holds {})", what, n, size);
      break;
    case kSnappy: {
      size_t len = 0;
      if (snappy_uncompressed_length(reinterpret_cast<const char*>(src), n, &len) != SNAPPY_OK || len != size)
        fail("{} (corrupt SNAPPY data or wrong page size)", what);
      break;
    }
    case kGzip:
      // Deflate expands at most about 1032:1; uInt bounds zlib's counters.
      if (n > UINT_MAX || size > UINT_MAX || size > n * 1032 + 1024)
        fail("{} (GZIP page of {} bytes cannot hold the {} it says)", what, n, size);
      break;
    case kZstd: {
      // The first frame's size (a page is normally one frame; more are checked when decoded).
      unsigned long long content = ZSTD_getFrameContentSize(src, n);
      if (content == ZSTD_CONTENTSIZE_ERROR) fail("{} (corrupt ZSTD data)", what);
      if (content != ZSTD_CONTENTSIZE_UNKNOWN && content > size)
        fail("{} (ZSTD data holds {} bytes where the page header says {})", what, content, size);
      break;
    }
    default: fail("{} (compression {} is not supported)", what, codec_name(codec));
  }
}

void decompress_into(int codec, const uint8_t* src, size_t n, uint8_t* out, size_t size, const std::string& what) {
  switch (codec) {
    case kUncompressed: if (size) std::memcpy(out, src, size); break;
    case kSnappy: {
      size_t len = size;
      if (snappy_uncompress(reinterpret_cast<const char*>(src), n, reinterpret_cast<char*>(out), &len) !=
              SNAPPY_OK || len != size)
        fail("{} (corrupt SNAPPY data)", what);
      break;
    }
    case kGzip: inflate_gzip(src, n, out, size, what); break;
    case kZstd: {
      // One context per thread, reused: creating one per page costs more than small pages take.
      thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
      size_t r = ZSTD_decompressDCtx(ctx.get(), out, size, src, n);
      if (ZSTD_isError(r)) fail("{} (corrupt ZSTD data: {})", what, ZSTD_getErrorName(r));
      if (r != size) fail("{} (ZSTD data holds {} bytes where the page header says {})", what, r, size);
      break;
    }
    default: fail("{} (compression {} is not supported)", what, codec_name(codec));
  }
}

}  // namespace clm::parquet
