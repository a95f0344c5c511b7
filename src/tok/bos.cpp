// The document separator of a loaded vocabulary: chosen among its special tokens in a fixed order
// (or by --bos), or added with --add-bos; and the special tokens that fill ids a vocabulary leaves
// unused. The order is documented in docs/TOKENIZER.md.
#include <algorithm>

#include "core/common.h"
#include "tok/bpe.h"

namespace clm {

// Names tried in order when none is given: beginning-of-text tokens first (clocklm's and
// nanochat's, Llama 3's, others'), then end-of-text ones (GPT-2's and tiktoken's, Qwen's, ...).
static const char* const kBosOrder[] = {"<|bos|>",       "<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>",
                                        "<|endoftext|>", "<|end_of_text|>",   "</s>",            "<eos>"};

static std::string special_list(const TokenizerParts& p) {
  std::string s;
  size_t shown = 0;
  for (auto& [name, id] : p.specials) {
    if (name.rfind("<|unused_", 0) == 0) continue;
    if (shown == 12) {
      s += ", ...";
      break;
    }
    s += fmt::format("{}{} ({})", shown++ ? ", " : "", name, id);
  }
  return s.empty() ? std::string("none") : s;
}

static const uint32_t* find_special(const TokenizerParts& p, const std::string& name) {
  for (auto& [n, id] : p.specials)
    if (n == name) return &id;
  return nullptr;
}

// --bos / --add-bos; returns false when neither is given.
static bool apply_named(TokenizerParts& p, const TokenizerOptions& opt, const std::string& what) {
  if (!opt.bos.empty() && !opt.add_bos.empty()) fail("{}: give --bos or --add-bos, not both", what);
  if (!opt.add_bos.empty()) {
    if (const uint32_t* id = find_special(p, opt.add_bos))
      fail("{}: it already has the special token {} (id {}); choose it with --bos instead of --add-bos", what,
           opt.add_bos, *id);
    if (p.vocab_size >= kMaxVocab) fail("{}: no room for another token (vocab size {})", what, p.vocab_size);
    p.specials.emplace_back(opt.add_bos, p.vocab_size);
    p.bos = p.vocab_size++;
    return true;
  }
  if (!opt.bos.empty()) {
    const uint32_t* id = find_special(p, opt.bos);
    if (!id) fail("{}: no special token named {} (its special tokens: {})", what, opt.bos, special_list(p));
    p.bos = *id;
    return true;
  }
  return false;
}

void choose_bos(TokenizerParts& p, const TokenizerOptions& opt, const std::string& preferred,
                const std::string& what) {
  if (apply_named(p, opt, what)) return;
  if (!preferred.empty()) {
    if (const uint32_t* id = find_special(p, preferred)) {
      p.bos = *id;
      return;
    }
  }
  for (const char* name : kBosOrder) {
    if (const uint32_t* id = find_special(p, name)) {
      p.bos = *id;
      return;
    }
  }
  fail("{}: no beginning- or end-of-text special token to separate documents (its special tokens: {}); name one "
       "with --bos NAME or add one with --add-bos NAME", what, special_list(p));
}

Tokenizer apply_bos_options(Tokenizer t, const TokenizerOptions& opt, const std::string& what) {
  if (opt.bos.empty() && opt.add_bos.empty()) return t;
  TokenizerParts p = t.impl->parts();
  apply_named(p, opt, what);
  if (p.bos == t.impl->bos && p.vocab_size == t.impl->vocab.size()) return t;
  return build_tokenizer(std::move(p), what);
}

void fill_unused_ids(TokenizerParts& p, const std::vector<uint8_t>& defined, const std::string& what) {
  uint32_t unused = 0;
  for (uint32_t id = 0; id < p.vocab_size; ++id) unused += !defined[id];
  if (unused > kMaxUnusedIds)
    fail("{}: its ids leave {} of {} unused (at most {} may be)", what, unused, p.vocab_size, kMaxUnusedIds);
  for (uint32_t id = 0; id < p.vocab_size; ++id)
    if (!defined[id]) p.specials.emplace_back(fmt::format("<|unused_{}|>", id), id);
}

}  // namespace clm
