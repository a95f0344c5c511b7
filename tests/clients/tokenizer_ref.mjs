// Reference encodings and independently written tokenizer files for tests/test_tok_formats.cpp,
// made with the reference libraries: @huggingface/tokenizers (tokenizer.json) and the tiktoken npm
// package (tiktoken's own Rust core, compiled to WebAssembly).
//
//   node tokenizer_ref.mjs hf TOKENIZER_JSON TEXTS_JSON OUT_JSON
//       encode each text of TEXTS_JSON (a JSON list of strings) with tokenizer.json; OUT_JSON gets
//       the list of id lists (no special tokens added)
//   node tokenizer_ref.mjs tiktoken RANK_FILE PATTERN SPECIALS_JSON TEXTS_JSON OUT_JSON
//       the same with a tiktoken Encoding built from a .tiktoken rank file, a split pattern and
//       special tokens ({"NAME": id}); encode_ordinary, as clocklm never makes special tokens
//   node tokenizer_ref.mjs tiktoken-named NAME TEXTS_JSON OUT_JSON
//       the same with the package's bundled encoding NAME (gpt2, cl100k_base, o200k_base, ...)
//   node tokenizer_ref.mjs write-ranks NAME OUT_FILE
//       write the bundled encoding NAME as a .tiktoken rank file (base64 token, space, rank)
//   node tokenizer_ref.mjs gpt2-json ENCODER_JSON VOCAB_BPE OUT_JSON [llama3]
//       write GPT-2's tokenizer as a Hugging Face tokenizer.json following the library's schema
//       (model BPE, ByteLevel pre-tokenizer); with "llama3", pre-split instead by Llama 3's
//       published regex (Split, then ByteLevel without its regex) with ignore_merges, as Llama 3's
//       tokenizer.json does
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const [cmd, ...args] = process.argv.slice(2);

const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function readTexts(path) {
  const texts = JSON.parse(readFileSync(path, "utf8"));
  if (!Array.isArray(texts)) throw new Error(`${path}: expected a JSON list of strings`);
  return texts;
}

// The bundled ranks are "! OFFSET tok tok ...": base64 tokens with consecutive ranks from OFFSET.
function bundledRanks(name) {
  const enc = require(`tiktoken/encoders/${name}.json`);
  const lines = [];
  for (const line of enc.bpe_ranks.split("\n")) {
    if (!line) continue;
    const f = line.split(" ");
    const offset = Number(f[1]);
    for (let i = 2; i < f.length; i++) lines.push(`${f[i]} ${offset + i - 2}`);
  }
  return { text: lines.join("\n") + "\n", enc };
}

async function main() {
  if (cmd === "hf") {
    const { Tokenizer } = await import("@huggingface/tokenizers");
    const [tokPath, textsPath, outPath] = args;
    const tok = new Tokenizer(JSON.parse(readFileSync(tokPath, "utf8")), {});
    const ids = readTexts(textsPath).map((t) => Array.from(tok.encode(t, { add_special_tokens: false }).ids));
    writeFileSync(outPath, JSON.stringify(ids));
  } else if (cmd === "tiktoken" || cmd === "tiktoken-named") {
    const tiktoken = await import("tiktoken");
    let enc, textsPath, outPath;
    if (cmd === "tiktoken") {
      const [rankPath, pattern, specialsJson] = args;
      [textsPath, outPath] = args.slice(3);
      enc = new tiktoken.Tiktoken(readFileSync(rankPath, "utf8"), JSON.parse(specialsJson), pattern);
    } else {
      [textsPath, outPath] = args.slice(1);
      enc = tiktoken.get_encoding(args[0]);
    }
    const ids = readTexts(textsPath).map((t) => Array.from(enc.encode_ordinary(t)));
    enc.free();
    writeFileSync(outPath, JSON.stringify(ids));
  } else if (cmd === "write-ranks") {
    writeFileSync(args[1], bundledRanks(args[0]).text);
  } else if (cmd === "gpt2-json") {
    const [encoderPath, bpePath, outPath, variant] = args;
    const vocab = JSON.parse(readFileSync(encoderPath, "utf8"));
    const merges = readFileSync(bpePath, "utf8")
      .split("\n")
      .filter((l, i) => l && !(i === 0 && l.startsWith("#version")));
    const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
    const llama3 = variant === "llama3";
    const tok = {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: [
        { id: vocab["<|endoftext|>"], content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
          normalized: false, special: true },
      ],
      normalizer: null,
      pre_tokenizer: llama3
        ? { type: "Sequence", pretokenizers: [
            { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
            { ...byteLevel, use_regex: false }] }
        : byteLevel,
      post_processor: { ...byteLevel, trim_offsets: false },
      decoder: byteLevel,
      model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
               fuse_unk: false, byte_fallback: false, ignore_merges: llama3, vocab,
               merges: llama3 ? merges.map((m) => m.split(" ")) : merges },
    };
    writeFileSync(outPath, JSON.stringify(tok));
  } else {
    throw new Error(`unknown command ${cmd}`);
  }
}

main().catch((e) => {
  console.error(`tokenizer_ref.mjs: ${e.message}`);
  process.exit(1);
});
