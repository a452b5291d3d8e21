// hf_expect.js - expectations from HuggingFace `tokenizers` (the Rust crate,
// through the npm package @anush008/tokenizers) for the conformance test.
// usage: node hf_expect.js NODE_MODULES_DIR TOKENIZER_JSON STRINGS.jsonl OUT.jsonl
// Writes, per input line: ids (with special tokens), ids_no_special, decode
// (of ids) and decode_skip_special, the fields `xllm tokenize` prints.
const fs = require('fs');
const path = require('path');
const [mods, tokPath, inPath, outPath] = process.argv.slice(2);
const { Tokenizer } = require(path.join(mods, '@anush008/tokenizers'));

(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const lines = fs.readFileSync(inPath, 'utf8').split('\n').filter((l) => l.length);
  const out = [];
  for (const l of lines) {
    const text = JSON.parse(l).text;
    const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    const idsNs = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const decode = await tok.decode(ids, false);
    const decodeSkip = await tok.decode(ids, true);
    out.push(JSON.stringify({ ids, ids_no_special: idsNs, decode, decode_skip_special: decodeSkip }));
  }
  fs.writeFileSync(outPath, out.join('\n') + '\n');
})().catch((e) => { console.error(String(e)); process.exit(1); });
