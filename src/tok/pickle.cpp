// A restricted reader for a pickled tiktoken.core.Encoding (nanochat's tokenizer.pkl). Python
// pickles such an object (protocol 3 to 5) as: the class (GLOBAL or STACK_GLOBAL), an empty
// argument tuple and NEWOBJ, then the __getstate__ dictionary {name, pat_str, mergeable_ranks
// (bytes -> int), special_tokens (str -> int)} and BUILD. This reader runs only the opcodes
// those need (framing, memo, ints, str, bytes, dicts, marks), accepts only that one class and
// never imports or calls anything; any other opcode or class is refused in one line.
#include <memory>
#include <unordered_map>

#include "core/common.h"
#include "tok/bpe.h"
#include "tok/tiktoken.h"

namespace clm {

namespace {

// Objects live in the unpickler's arena and refer to each other by plain pointers, so a pickle
// whose memo makes a dict hold itself cannot leak.
struct Obj;
using Ref = Obj*;
struct Obj {
  enum Kind { kNone, kBool, kInt, kStr, kBytes, kDict, kTuple, kClass, kEncoding } kind = kNone;
  int64_t i = 0;
  std::string s;                            // str, bytes
  std::vector<std::pair<Ref, Ref>> items;   // dict
  Ref state;                                // Encoding: its BUILD argument
};

const char* kind_name(Obj::Kind k) {
  static const char* names[] = {"None", "bool", "int", "str", "bytes", "dict", "tuple", "class", "Encoding"};
  return names[k];
}

class Unpickler {
 public:
  Unpickler(std::string_view b, const std::string& w) : in(b), what(w) {}

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
        case 'N': push(make(Obj::kNone)); break;
        case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
          Ref o = make(Obj::kBool);
          o->i = op == 0x88;
          push(o);
          break;
        }
        case 0x8c: push_text(Obj::kStr, le(1), at); break;   // SHORT_BINUNICODE
        case 'X': push_text(Obj::kStr, le(4), at); break;    // BINUNICODE
        case 0x8d: push_text(Obj::kStr, le(8), at); break;   // BINUNICODE8
        case 'C': push_text(Obj::kBytes, le(1), at); break;  // SHORT_BINBYTES
        case 'B': push_text(Obj::kBytes, le(4), at); break;  // BINBYTES
        case 0x8e: push_text(Obj::kBytes, le(8), at); break; // BINBYTES8
        case '}': push(make(Obj::kDict)); break;             // EMPTY_DICT
        case ')': push(make(Obj::kTuple)); break;            // EMPTY_TUPLE
        case '(': marks.push_back(stack.size()); break;      // MARK
        case 's': {                                          // SETITEM
          Ref v = pop(at), k = pop(at);
          dict_at(stack.size(), at)->items.emplace_back(k, v);
          break;
        }
        case 'u': {  // SETITEMS: the pairs above the last mark go into the dict below it
          if (marks.empty()) fail("{}: SETITEMS at offset {} without a mark", what, at);
          size_t m = marks.back();
          marks.pop_back();
          if ((stack.size() - m) % 2) fail("{}: SETITEMS at offset {} with an odd number of items", what, at);
          Obj* d = dict_at(m, at);
          for (size_t k = m; k < stack.size(); k += 2) d->items.emplace_back(stack[k], stack[k + 1]);
          stack.resize(m);
          break;
        }
        case 0x94: memo[uint32_t(memo.size())] = top(at); break;  // MEMOIZE
        case 'q': memo[uint32_t(le(1))] = top(at); break;         // BINPUT
        case 'r': memo[uint32_t(le(4))] = top(at); break;         // LONG_BINPUT
        case 'h': push(get(uint32_t(le(1)), at)); break;          // BINGET
        case 'j': push(get(uint32_t(le(4)), at)); break;          // LONG_BINGET
        case 0x93: {                                              // STACK_GLOBAL
          Ref name = pop(at), module = pop(at);
          if (module->kind != Obj::kStr || name->kind != Obj::kStr)
            fail("{}: STACK_GLOBAL at offset {} needs two strings", what, at);
          push(global(module->s, name->s, at));
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line(at), name = line(at);
          push(global(module, name, at));
          break;
        }
        case 0x81: {  // NEWOBJ
          Ref args = pop(at), cls = pop(at);
          if (cls->kind != Obj::kClass || args->kind != Obj::kTuple || !args->items.empty())
            fail("{}: NEWOBJ at offset {} must make tiktoken.core.Encoding with no arguments", what, at);
          push(make(Obj::kEncoding));
          break;
        }
        case 'b': {  // BUILD
          Ref st = pop(at);
          Ref obj = top(at);
          if (obj->kind != Obj::kEncoding || obj->state)
            fail("{}: BUILD at offset {} applies to something other than a new Encoding", what, at);
          obj->state = st;
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
  std::unordered_map<uint32_t, Ref> memo;

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
  std::vector<std::unique_ptr<Obj>> arena;
  Ref make(Obj::Kind k) {
    arena.push_back(std::make_unique<Obj>());
    arena.back()->kind = k;
    return arena.back().get();
  }
  void push(Ref r) { stack.push_back(r); }
  void push_int(int64_t v) {
    Ref o = make(Obj::kInt);
    o->i = v;
    push(o);
  }
  void push_text(Obj::Kind k, uint64_t n, size_t at) {
    if (n > in.size() - pos) fail("{}: {} of {} bytes at offset {} runs past the end", what, kind_name(k), n, at);
    Ref o = make(k);
    o->s.assign(in.data() + pos, size_t(n));
    pos += size_t(n);
    if (k == Obj::kStr && !valid_utf8(o->s)) fail("{}: str at offset {} is not UTF-8", what, at);
    push(o);
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
  Obj* dict_at(size_t n, size_t at) {
    if (n == 0 || stack[n - 1]->kind != Obj::kDict) fail("{}: items at offset {} are not set on a dict", what, at);
    return stack[n - 1];
  }
  Ref get(uint32_t k, size_t at) {
    auto it = memo.find(k);
    if (it == memo.end()) fail("{}: pickle memo {} at offset {} is not set", what, k, at);
    return it->second;
  }
  std::string line(size_t at) {
    size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos || nl - pos > 256) fail("{}: GLOBAL at offset {} is malformed", what, at);
    std::string s(in.substr(pos, nl - pos));
    pos = nl + 1;
    return s;
  }
  Ref global(const std::string& module, const std::string& name, size_t at) {
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
  Unpickler up(bytes, what);
  Ref r = up.run();
  if (r->kind != Obj::kEncoding || !r->state) fail("{}: the pickle does not hold a tiktoken Encoding", what);
  const Obj& st = *r->state;
  if (st.kind == Obj::kStr)
    fail("{}: pickles tiktoken's registered encoding {} by name; give its .tiktoken rank file instead", what,
         st.s.substr(0, 80));
  if (st.kind != Obj::kDict) fail("{}: the Encoding's state is a {}, not a dict", what, kind_name(st.kind));
  PickledEncoding e;
  bool have_pat = false, have_ranks = false;
  for (auto& [k, v] : st.items) {
    if (k->kind != Obj::kStr) fail("{}: the Encoding's state has a key that is not a str", what);
    const std::string& key = k->s;
    if (key == "name" || key == "pat_str") {
      if (v->kind != Obj::kStr) fail("{}: {} is not a str", what, key);
      (key == "name" ? e.name : e.pat_str) = v->s;
      have_pat |= key == "pat_str";
    } else if (key == "mergeable_ranks" || key == "special_tokens") {
      const bool ranks = key == "mergeable_ranks";
      if (v->kind != Obj::kDict) fail("{}: {} is not a dict", what, key);
      for (auto& [tk, tv] : v->items) {
        if (tk->kind != (ranks ? Obj::kBytes : Obj::kStr))
          fail("{}: {} has a key that is not {}", what, key, ranks ? "bytes" : "a str");
        (ranks ? e.mergeable_ranks : e.special_tokens).emplace_back(tk->s, id_of(*tv, what, key.c_str()));
      }
      have_ranks |= ranks;
    } else if (key == "explicit_n_vocab") {
      if (v->kind != Obj::kNone && v->kind != Obj::kInt) fail("{}: explicit_n_vocab is not an int", what);
    } else {
      fail("{}: the Encoding's state has an unexpected field {}", what, key.substr(0, 80));
    }
  }
  if (!have_pat || !have_ranks) fail("{}: the Encoding's state lacks pat_str or mergeable_ranks", what);
  return e;
}

}  // namespace clm
