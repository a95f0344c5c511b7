// Implementations of the shared utilities declared in common.h.
#include "core/common.h"

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/fault.h"

namespace clm {

namespace fs = std::filesystem;

void atomic_write(const std::string& path, std::string_view data) {
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::string tmp = (dir / ("." + p.filename().string() + ".tmp." + std::to_string(getpid()))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write {}: {}", tmp, std::strerror(errno));
  const char* ptr = data.data();
  size_t left = data.size();
  bool half_passed = false;
  while (left > 0) {
    if (!half_passed && left <= data.size() / 2) {
      half_passed = true;
      fault_point_write(path);
    }
    // Halves first, so that the fault point above is reached with a torn temp file on disk.
    size_t chunk = left > data.size() / 2 && data.size() > 1 ? left - data.size() / 2 : left;
    ssize_t w = ::write(fd, ptr, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write {}: {}", path, std::strerror(e));
    }
    ptr += w;
    left -= size_t(w);
  }
  int err = 0;
  if (::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail("cannot write {}: {}", path, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(e));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}: {}", path, std::strerror(errno));
  // One read into a string of the file's size: a stream copy would touch every byte twice, which
  // shows on checkpoints of hundreds of megabytes.
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (!ec) {
    std::string out(size, '\0');
    f.read(out.data(), (std::streamsize)size);
    if ((size_t)f.gcount() == size) {
      if (f.peek() == std::char_traits<char>::eof()) return out;  // did not grow meanwhile
    } else if (f.bad()) {
      fail("error reading {}", path);
    }
    f.clear();
    f.seekg(0);
  }
  std::ostringstream ss;  // not a regular file (a pipe, /proc), or it changed while being read
  ss << f.rdbuf();
  if (f.bad()) fail("error reading {}", path);
  return ss.str();
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) fail("cannot create directory {}: {}", path, ec.message());
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

double parse_duration(std::string_view s) {
  std::string str(s);
  if (str.empty()) fail("empty duration");
  double mult = 1.0;
  char last = str.back();
  if (last == 's') { mult = 1.0; str.pop_back(); }
  else if (last == 'm') { mult = 60.0; str.pop_back(); }
  else if (last == 'h') { mult = 3600.0; str.pop_back(); }
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size() || !std::isfinite(v))
    fail("malformed duration '{}' (expected e.g. 90s, 30m, 1.5h)", s);
  if (v < 0) fail("negative duration '{}'", s);
  if (!std::isfinite(v * mult)) fail("duration '{}' is too long", s);
  return v * mult;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double best_rate(const std::function<void()>& body, double work, double min_seconds) {
  body();
  double best = 0;
  const double t_start = now_seconds();
  for (int reps = 0; reps < 3 || now_seconds() - t_start < min_seconds;) {
    const double t0 = now_seconds();
    body();
    best = std::max(best, work / (now_seconds() - t0));
    if (++reps > 10000) break;
  }
  return best;
}

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

int default_threads() {
  for (const char* var : {"CLOCKLM_THREADS", "OMP_NUM_THREADS"}) {
    if (const char* e = std::getenv(var)) {
      int n = std::atoi(e);
      if (n > 0) return n;
    }
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& v : s) v = splitmix64(x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::next() {
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

float Rng::normal() {
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace clm
