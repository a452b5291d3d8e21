// bench_tokenizer.js - the HuggingFace `tokenizers` side of bench_tokenizer.sh:
// the same load / encode measurement as bench_tokenizer.c, through the npm
// package @anush008/tokenizers (the Rust crate's Node binding).
// usage: node bench_tokenizer.js MODULE_DIR TOKENIZER_JSON TEXT_FILE [loads] [passes] [chunk]
const fs = require('fs');
const path = require('path');
const [modDir, tokPath, textPath] = process.argv.slice(2, 5);
const loads = +(process.argv[5] || 5), passes = +(process.argv[6] || 3), chunk = +(process.argv[7] || 16384);
const { Tokenizer } = require(path.join(modDir, '@anush008/tokenizers'));

(async () => {
  let bestLoad = Infinity, tok = null;
  for (let i = 0; i < loads; i++) {
    const t0 = process.hrtime.bigint();
    tok = Tokenizer.fromFile(tokPath);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (dt < bestLoad) bestLoad = dt;
  }
  const buf = fs.readFileSync(textPath);
  // the same chunks as bench_tokenizer.c: byte offsets, cut after a '\n'
  const chunks = [];
  for (let at = 0; at < buf.length;) {
    let end = Math.min(at + chunk, buf.length);
    while (end < buf.length && buf[end - 1] !== 10) end++;
    chunks.push(buf.subarray(at, end).toString('utf8'));
    at = end;
  }
  let best = Infinity, tokens = 0;
  for (let pass = 0; pass <= passes; pass++) {
    const t0 = process.hrtime.bigint();
    let count = 0;
    for (const c of chunks) count += (await tok.encode(c, null, { addSpecialTokens: false })).getIds().length;
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (pass > 0 && dt < best) best = dt;
    tokens = count;
  }
  console.log(JSON.stringify({ impl: 'hf', load_s: +bestLoad.toFixed(4), bytes: buf.length, chunks: chunks.length,
    tokens, encode_s: +best.toFixed(4), mb_per_s: +(buf.length / 1e6 / best).toFixed(2) }));
})();
