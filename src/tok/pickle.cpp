// A restricted reader for a pickled tiktoken.core.Encoding (nanochat's tokenizer.pkl). Python
// pickles such an object (protocol 3 to 5) as: the class (GLOBAL or STACK_GLOBAL), an empty
// argument tuple and NEWOBJ, then the __getstate__ dictionary {name, pat_str, mergeable_ranks
// (bytes -> int), special_tokens (str -> int)} and BUILD. This reader runs only the opcodes
// those need (framing, memo, ints, str, bytes, dicts, marks), accepts only that one class and
// never imports or calls anything; any other opcode or class is refused in one line.
#include <vector>

#include "core/common.h"
#include "tok/bpe.h"
#include "tok/file_limits.h"
#include "tok/tiktoken.h"

namespace clm {

namespace {

// Objects are 16-byte records in one vector, referred to by index; str and bytes are views into the
// pickle (which outlives the reader), dicts keep their items in a side table, and None, True and
// False are shared records, so memory stays a small multiple of the file's size. Every value pushed,
// mark and memo entry counts against kMaxPickleObjects.
using Ref = uint32_t;
struct Obj {
  enum Kind : uint8_t { kNone, kBool, kInt, kStr, kBytes, kDict, kTuple, kClass, kEncoding } kind = kNone;
  uint32_t len = 0;  // str, bytes: length
  int64_t i = 0;     // int, bool: value; str, bytes: offset in the pickle; dict: its item table;
                     // Encoding: its BUILD argument + 1 (0: none yet)
};
constexpr Ref kNoneRef = 0, kTrueRef = 1, kFalseRef = 2, kNoRef = ~0u;

const char* kind_name(Obj::Kind k) {
  static const char* names[] = {"None", "bool", "int", "str", "bytes", "dict", "tuple", "class", "Encoding"};
  return names[k];
}

class Unpickler {
 public:
  Unpickler(std::string_view b, const std::string& w) : in(b), what(w) {
    objs.push_back({Obj::kNone, 0, 0});
    objs.push_back({Obj::kBool, 0, 1});
    objs.push_back({Obj::kBool, 0, 0});
  }

  // The object behind a reference and the text of a str or bytes.
  const Obj& at(Ref r) const { return objs[r]; }
  std::string_view text(Ref r) const { return in.substr(size_t(objs[r].i), objs[r].len); }
  const std::vector<std::pair<Ref, Ref>>& items(Ref r) const { return dicts[size_t(objs[r].i)]; }

  Ref run() {
    while (pos < in.size()) {
      const size_t at = pos;
      const uint8_t op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          uint8_t v = u8();
          if (v < 2 || v > 5) fail("{}: pickle protocol {} is not supported (2 to 5)", what, v);
          break;
        }
        case 0x95: {  // FRAME: its length only groups the opcodes that follow
          uint64_t n = le(8);
          if (n > in.size() - pos) fail("{}: pickle frame at offset {} runs past the end", what, at);
          break;
        }
        case 'K': push_int(int64_t(le(1))); break;          // BININT1
        case 'M': push_int(int64_t(le(2))); break;          // BININT2
        case 'J': push_int(int64_t(int32_t(le(4)))); break; // BININT
        case 0x8a: {                                        // LONG1
          uint8_t n = u8();
          if (n > 8) fail("{}: integer of {} bytes at offset {} is too large", what, n, at);
          uint64_t v = n ? le(n) : 0;
          if (n && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
          push_int(int64_t(v));
          break;
        }
        case 'N': push(kNoneRef); break;
        case 0x88: push(kTrueRef); break;   // NEWTRUE
        case 0x89: push(kFalseRef); break;  // NEWFALSE
        case 0x8c: push_text(Obj::kStr, le(1), at); break;   // SHORT_BINUNICODE
        case 'X': push_text(Obj::kStr, le(4), at); break;    // BINUNICODE
        case 0x8d: push_text(Obj::kStr, le(8), at); break;   // BINUNICODE8
        case 'C': push_text(Obj::kBytes, le(1), at); break;  // SHORT_BINBYTES
        case 'B': push_text(Obj::kBytes, le(4), at); break;  // BINBYTES
        case 0x8e: push_text(Obj::kBytes, le(8), at); break; // BINBYTES8
        case '}': push(make_dict()); break;                  // EMPTY_DICT
        case ')': push(make(Obj::kTuple)); break;            // EMPTY_TUPLE
        case '(':                                            // MARK
          spend(at);
          marks.push_back(stack.size());
          break;
        case 's': {                                          // SETITEM
          Ref v = pop(at), k = pop(at);
          dict_at(stack.size(), at).emplace_back(k, v);
          break;
        }
        case 'u': {  // SETITEMS: the pairs above the last mark go into the dict below it
          if (marks.empty()) fail("{}: SETITEMS at offset {} without a mark", what, at);
          size_t m = marks.back();
          marks.pop_back();
          if ((stack.size() - m) % 2) fail("{}: SETITEMS at offset {} with an odd number of items", what, at);
          auto& d = dict_at(m, at);
          for (size_t k = m; k < stack.size(); k += 2) d.emplace_back(stack[k], stack[k + 1]);
          stack.resize(m);
          break;
        }
        case 0x94: put(memo.size(), at); break;  // MEMOIZE
        case 'q': put(le(1), at); break;         // BINPUT
        case 'r': put(le(4), at); break;         // LONG_BINPUT
        case 'h': push(get(uint32_t(le(1)), at)); break;          // BINGET
        case 'j': push(get(uint32_t(le(4)), at)); break;          // LONG_BINGET
        case 0x93: {                                              // STACK_GLOBAL
          Ref name = pop(at), module = pop(at);
          if (objs[module].kind != Obj::kStr || objs[name].kind != Obj::kStr)
            fail("{}: STACK_GLOBAL at offset {} needs two strings", what, at);
          push(global(text(module), text(name), at));
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line(at), name = line(at);
          push(global(module, name, at));
          break;
        }
        case 0x81: {  // NEWOBJ
          Ref args = pop(at), cls = pop(at);
          if (objs[cls].kind != Obj::kClass || objs[args].kind != Obj::kTuple)
            fail("{}: NEWOBJ at offset {} must make tiktoken.core.Encoding with no arguments", what, at);
          push(make(Obj::kEncoding));
          break;
        }
        case 'b': {  // BUILD
          Ref st = pop(at);
          Ref obj = top(at);
          if (objs[obj].kind != Obj::kEncoding || objs[obj].i)
            fail("{}: BUILD at offset {} applies to something other than a new Encoding", what, at);
          objs[obj].i = int64_t(st) + 1;
          break;
        }
        case '.':  // STOP
          if (stack.size() != 1 || !marks.empty()) fail("{}: pickle stops at offset {} with a broken stack", what, at);
          return stack[0];
        default:
          fail("{}: pickle opcode 0x{:02x} at offset {} is not allowed (a tiktoken Encoding does not use it)", what,
               op, at);
      }
    }
    fail("{}: pickle ends without STOP", what);
  }

 private:
  std::string_view in;
  const std::string& what;
  size_t pos = 0;
  std::vector<Ref> stack;
  std::vector<size_t> marks;
  std::vector<Ref> memo;  // by memo key; kNoRef: not set
  std::vector<Obj> objs;
  std::vector<std::vector<std::pair<Ref, Ref>>> dicts;
  size_t budget = kMaxPickleObjects;  // values, marks and memo entries still allowed

  void spend(size_t at) {
    if (budget == 0)
      fail("{}: pickle holds more than {} objects and memo entries at offset {} (a tokenizer needs far fewer)",
           what, kMaxPickleObjects, at);
    --budget;
  }

  uint8_t u8() {
    if (pos >= in.size()) fail("{}: pickle is truncated at offset {}", what, pos);
    return static_cast<uint8_t>(in[pos++]);
  }
  uint64_t le(int n) {
    if (in.size() - pos < size_t(n)) fail("{}: pickle is truncated at offset {}", what, pos);
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= uint64_t(static_cast<uint8_t>(in[pos + size_t(k)])) << (8 * k);
    pos += size_t(n);
    return v;
  }
  Ref make(Obj::Kind k, int64_t i = 0, uint32_t len = 0) {
    objs.push_back({k, len, i});
    return Ref(objs.size() - 1);
  }
  Ref make_dict() {
    dicts.emplace_back();
    return make(Obj::kDict, int64_t(dicts.size() - 1));
  }
  void push(Ref r) {
    spend(pos);
    stack.push_back(r);
  }
  void push_int(int64_t v) { push(make(Obj::kInt, v)); }
  void push_text(Obj::Kind k, uint64_t n, size_t at) {
    if (n > in.size() - pos) fail("{}: {} of {} bytes at offset {} runs past the end", what, kind_name(k), n, at);
    if (n > kMaxTokenBytes && k == Obj::kBytes)
      fail("{}: bytes of {} bytes at offset {} are longer than a token may be ({} bytes)", what, n, at, kMaxTokenBytes);
    std::string_view s = in.substr(pos, size_t(n));
    if (k == Obj::kStr && !valid_utf8(s)) fail("{}: str at offset {} is not UTF-8", what, at);
    push(make(k, int64_t(pos), uint32_t(n)));
    pos += size_t(n);
  }
  // Memo key k -> the top of the stack. Python numbers memo entries from 0 as it goes, so a key
  // at or beyond the object limit is not from a real pickle.
  void put(uint64_t k, size_t at) {
    if (k >= kMaxPickleObjects) fail("{}: pickle memo key {} at offset {} is too large", what, k, at);
    spend(at);
    if (k >= memo.size()) memo.resize(size_t(k) + 1, kNoRef);
    memo[size_t(k)] = top(at);
  }
  Ref pop(size_t at) {
    if (stack.empty() || (!marks.empty() && stack.size() <= marks.back()))
      fail("{}: pickle stack underflow at offset {}", what, at);
    Ref r = stack.back();
    stack.pop_back();
    return r;
  }
  Ref top(size_t at) {
    if (stack.empty()) fail("{}: pickle stack underflow at offset {}", what, at);
    return stack.back();
  }
  std::vector<std::pair<Ref, Ref>>& dict_at(size_t n, size_t at) {
    if (n == 0 || objs[stack[n - 1]].kind != Obj::kDict) fail("{}: items at offset {} are not set on a dict", what, at);
    return dicts[size_t(objs[stack[n - 1]].i)];
  }
  Ref get(uint32_t k, size_t at) {
    if (k >= memo.size() || memo[k] == kNoRef) fail("{}: pickle memo {} at offset {} is not set", what, k, at);
    return memo[k];
  }
  std::string line(size_t at) {
    size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos || nl - pos > 256) fail("{}: GLOBAL at offset {} is malformed", what, at);
    std::string s(in.substr(pos, nl - pos));
    pos = nl + 1;
    return s;
  }
  Ref global(std::string_view module, std::string_view name, size_t at) {
    if (module != "tiktoken.core" || name != "Encoding")
      fail("{}: pickle refers to {}.{} at offset {}; only tiktoken.core.Encoding is accepted", what,
           module.substr(0, 80), name.substr(0, 80), at);
    return make(Obj::kClass);
  }
};

uint32_t id_of(const Obj& v, const std::string& what, const char* field) {
  if (v.kind != Obj::kInt || v.i < 0 || v.i >= int64_t(kMaxVocab))
    fail("{}: {} holds a value that is not an id below {}", what, field, kMaxVocab);
  return uint32_t(v.i);
}

}  // namespace

PickledEncoding read_tiktoken_pickle(std::string_view bytes, const std::string& what) {
  check_tokenizer_size(bytes.size(), what);
  Unpickler up(bytes, what);
  const Obj& r = up.at(up.run());
  if (r.kind != Obj::kEncoding || !r.i) fail("{}: the pickle does not hold a tiktoken Encoding", what);
  const Ref st = Ref(r.i - 1);
  if (up.at(st).kind == Obj::kStr)
    fail("{}: pickles tiktoken's registered encoding {} by name; give its .tiktoken rank file instead", what,
         up.text(st).substr(0, 80));
  if (up.at(st).kind != Obj::kDict) fail("{}: the Encoding's state is a {}, not a dict", what, kind_name(up.at(st).kind));
  PickledEncoding e;
  bool have_pat = false, have_ranks = false;
  for (auto& [k, v] : up.items(st)) {
    if (up.at(k).kind != Obj::kStr) fail("{}: the Encoding's state has a key that is not a str", what);
    const std::string_view key = up.text(k);
    const Obj::Kind vk = up.at(v).kind;
    if (key == "name" || key == "pat_str") {
      if (vk != Obj::kStr) fail("{}: {} is not a str", what, key);
      (key == "name" ? e.name : e.pat_str) = up.text(v);
      have_pat |= key == "pat_str";
    } else if (key == "mergeable_ranks" || key == "special_tokens") {
      const bool ranks = key == "mergeable_ranks";
      if (vk != Obj::kDict) fail("{}: {} is not a dict", what, key);
      auto& out = ranks ? e.mergeable_ranks : e.special_tokens;
      out.reserve(up.items(v).size());
      for (auto& [tk, tv] : up.items(v)) {
        if (up.at(tk).kind != (ranks ? Obj::kBytes : Obj::kStr))
          fail("{}: {} has a key that is not {}", what, key, ranks ? "bytes" : "a str");
        out.emplace_back(up.text(tk), id_of(up.at(tv), what, ranks ? "mergeable_ranks" : "special_tokens"));
      }
      have_ranks |= ranks;
    } else if (key == "explicit_n_vocab") {
      if (vk != Obj::kNone && vk != Obj::kInt) fail("{}: explicit_n_vocab is not an int", what);
    } else {
      fail("{}: the Encoding's state has an unexpected field {}", what, key.substr(0, 80));
    }
  }
  if (!have_pat || !have_ranks) fail("{}: the Encoding's state lacks pat_str or mergeable_ranks", what);
  return e;
}

}  // namespace clm
