// Parquet level and integer decoders (see parquet_decode.h), following the format's Encodings.md.
#include "data/parquet_decode.h"

#include <algorithm>

#include "core/common.h"

namespace clm::parquet {

uint64_t read_uleb(const uint8_t*& p, const uint8_t* end, const std::string& what) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (p >= end) fail("{} (varint runs past the data)", what);
    uint8_t b = *p++;
    if (shift == 63 && b > 1) break;
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("{} (varint too long)", what);
}

uint64_t unpack_bits(const uint8_t* data, size_t size, uint64_t index, int bw, const std::string& what) {
  if (bw == 0) return 0;
  uint64_t bit = index * uint64_t(bw);
  uint64_t first = bit >> 3, last = (bit + uint64_t(bw) - 1) >> 3;
  if (last >= size) fail("{} (bit-packed values run past the data)", what);
  unsigned __int128 acc = 0;
  for (uint64_t i = last + 1; i-- > first;) acc = (acc << 8) | data[i];
  acc >>= (bit & 7);
  return bw == 64 ? uint64_t(acc) : uint64_t(acc) & ((uint64_t(1) << bw) - 1);
}

RleHybrid::RleHybrid(const uint8_t* data, size_t size, int bit_width, const std::string* what)
    : p_(data), end_(data + size), bw_(bit_width), what_(what) {
  if (bw_ < 0 || bw_ > 32) fail("{} (bit width {} is over 32)", *what_, bw_);
}

void RleHybrid::start_run() {
  while (left_ == 0) {
    if (p_ >= end_) fail("{} (levels or indices end before the page's values do)", *what_);
    uint64_t h = read_uleb(p_, end_, *what_);
    if (h & 1) {
      uint64_t groups = h >> 1;
      if (groups > (uint64_t(1) << 28)) fail("{} (bit-packed run too long)", *what_);
      rle_ = false;
      left_ = uint32_t(groups * 8);
      packed_ = p_;
      // The last run may be cut short by the writer; values past the data are an error when read.
      size_t bytes = size_t(groups * uint64_t(bw_));
      packed_bytes_ = std::min(bytes, size_t(end_ - p_));
      packed_index_ = 0;
      p_ += packed_bytes_;
    } else {
      uint64_t count = h >> 1;
      if (count > 0xFFFFFFFFu) fail("{} (run too long)", *what_);
      int nbytes = (bw_ + 7) / 8;
      if (end_ - p_ < nbytes) fail("{} (run value past the data)", *what_);
      uint32_t v = 0;
      for (int i = 0; i < nbytes; ++i) v |= uint32_t(p_[i]) << (8 * i);
      p_ += nbytes;
      if (bw_ < 32 && (v >> bw_) != 0) fail("{} (run value {} wider than {} bits)", *what_, v, bw_);
      rle_ = true;
      left_ = uint32_t(count);
      rle_value_ = v;
    }
  }
}

uint32_t RleHybrid::next(uint32_t max, uint32_t& value) {
  start_run();
  if (rle_) {
    uint32_t n = std::min(max, left_);
    value = rle_value_;
    left_ -= n;
    return n;
  }
  value = uint32_t(unpack_bits(packed_, packed_bytes_, packed_index_++, bw_, *what_));
  --left_;
  return 1;
}

const uint8_t* decode_delta_binary_packed(const uint8_t* p, const uint8_t* end, size_t count,
                                          std::vector<int64_t>& out, const std::string& what) {
  uint64_t block_size = read_uleb(p, end, what);
  uint64_t miniblocks = read_uleb(p, end, what);
  uint64_t total = read_uleb(p, end, what);
  uint64_t zz = read_uleb(p, end, what);
  if (block_size == 0 || block_size % 128 != 0 || block_size > (1u << 20) || miniblocks == 0 ||
      block_size % miniblocks != 0 || (block_size / miniblocks) % 32 != 0)
    fail("{} (bad DELTA_BINARY_PACKED block of {} values in {} miniblocks)", what, block_size, miniblocks);
  if (total != count) fail("{} (DELTA_BINARY_PACKED holds {} values where {} are expected)", what, total, count);
  out.clear();
  if (count == 0) return p;
  out.reserve(count);
  uint64_t value = (zz >> 1) ^ -(zz & 1);
  out.push_back(int64_t(value));
  const uint64_t per_mini = block_size / miniblocks;
  while (out.size() < count) {
    uint64_t mzz = read_uleb(p, end, what);
    uint64_t min_delta = (mzz >> 1) ^ -(mzz & 1);
    if (uint64_t(end - p) < miniblocks) fail("{} (DELTA_BINARY_PACKED bit widths past the data)", what);
    const uint8_t* widths = p;
    p += miniblocks;
    for (uint64_t m = 0; m < miniblocks && out.size() < count; ++m) {
      int bw = widths[m];
      if (bw > 64) fail("{} (DELTA_BINARY_PACKED bit width {})", what, bw);
      size_t bytes = size_t(per_mini * uint64_t(bw) / 8);
      size_t have = std::min(bytes, size_t(end - p));
      size_t n = std::min<size_t>(per_mini, count - out.size());
      for (size_t i = 0; i < n; ++i) {
        value += min_delta + unpack_bits(p, have, i, bw, what);
        out.push_back(int64_t(value));
      }
      p += have;
    }
  }
  return p;
}

}  // namespace clm::parquet
