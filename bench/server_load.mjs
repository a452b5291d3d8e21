// server_load.mjs - a load client for OpenAI-compatible servers (xllm serve,
// llama-server): C concurrent clients, each sending K streamed
// /v1/completions requests one after another (a P-token prompt of fixed
// pseudo-random ids, N generated tokens with ignore_eos, greedy). Prints one
// JSON line: aggregate generated tokens/s over the wall time of the whole
// run, TTFT p50/p99 (request sent -> first streamed token), the token
// count source, and the requests that failed (an HTTP status other than 200 or
// a broken stream: counted, the run goes on) or came back short of N tokens.
// Node's built-in fetch only.
//
//   node bench/server_load.mjs --url http://127.0.0.1:8080 --model NAME -c 16 -k 2 -p 128 -n 128 [--seed 1]
//        [--texts FILE]   write every request's generated text, by prompt index (JSON)
//        [--pick 0,5,9]   send only these prompts (of the C*K the seed makes, or of
//                         --of M), C at a time: -c 1 gives the solo runs to compare with
//        [--no-cache-prompt]  send "cache_prompt": false (llama-server: no reuse of a
//                         slot's earlier prompt, so a solo run computes its prompt again)
const args = Object.fromEntries(process.argv.slice(2).reduce((a, x, i, all) => (x.startsWith('-') ? [...a, [x.replace(/^-+/, ''), all[i + 1]]] : a), []));
const url = args.url, model = args.model || 'default';
const C = +(args.c || 1), K = +(args.k || 1), P = +(args.p || 128), N = +(args.n || 128), VOCAB = +(args.vocab || 32000);
let seed = +(args.seed || 1);
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; };

function prompt(i) { // distinct prompts: no prefix sharing between clients
  const ids = [1];
  for (let j = 1; j < P; j++) ids.push(3 + ((rnd() + i * 7919) % (VOCAB - 3)));
  return ids;
}

// A request whose kept-alive connection the server closed before any
// response ("other side closed": seen against llama-server, whose HTTP
// library closes kept-alive connections on its own terms) is sent again,
// once, on a new connection, as the official clients do; the retries are
// counted in the output. TTFT still counts from the first attempt.
let retries = 0;
async function post(body) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    } catch (e) {
      if (attempt >= 1 || !e.cause || e.cause.code !== 'UND_ERR_SOCKET') throw e;
      retries++;
    }
  }
}

async function one(ids) {
  const t0 = performance.now();
  const r = await post(JSON.stringify({ model, prompt: ids, max_tokens: N, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    ...('no-cache-prompt' in args ? { cache_prompt: false } : {}) }));
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  let ttft = null, tokens = null, chunks = 0, buf = '', text = '';
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage && j.usage.completion_tokens != null) tokens = j.usage.completion_tokens;
      if (j.error) throw new Error(`error in the stream: ${JSON.stringify(j.error)}`);
      if (j.choices && j.choices.length && typeof j.choices[0].text === 'string') text += j.choices[0].text;
      if (j.choices && j.choices.length && !j.choices[0].finish_reason) { chunks++; if (ttft === null) ttft = performance.now() - t0; }
    }
  }
  return { ttft, tokens: tokens ?? chunks, fromUsage: tokens !== null, end: performance.now(), text };
}

const pct = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };
const pick = args.pick ? args.pick.split(',').map(Number) : null;
const total = pick ? Math.max(+(args.of || 0), ...pick.map((i) => i + 1)) : C * K;
const prompts = Array.from({ length: total }, (_, i) => prompt(i));
const jobs = pick || prompts.map((_, i) => i); // prompt indices, taken in order by C clients
let next = 0, failures = 0;
const failed = [];
const t0 = performance.now();
const results = (await Promise.all(Array.from({ length: C }, async () => {
  const out = [];
  while (next < jobs.length) {
    const i = jobs[next++];
    try {
      out.push({ i, ...(await one(prompts[i])) });
    } catch (e) {
      failures++;
      if (failed.length < 5) failed.push(String(e.message || e).slice(0, 200));
    }
  }
  return out;
}))).flat();
const wall = (Math.max(t0, ...results.map((r) => r.end)) - t0) / 1000;
const tokens = results.reduce((a, r) => a + r.tokens, 0);
const ttfts = results.map((r) => r.ttft).filter((x) => x !== null);
if (args.texts) {
  const texts = {};
  for (const r of results) texts[r.i] = r.text;
  (await import('node:fs')).writeFileSync(args.texts, JSON.stringify(texts));
}
console.log(JSON.stringify({ clients: C, requests: results.length + failures, tokens, wall_s: +wall.toFixed(3), tok_s: +(tokens / wall).toFixed(2),
  ttft_p50_ms: ttfts.length ? +pct(ttfts, 0.5).toFixed(1) : null, ttft_p99_ms: ttfts.length ? +pct(ttfts, 0.99).toFixed(1) : null,
  tokens_from_usage: results.every((r) => r.fromUsage), retries, failures, short: results.filter((r) => r.tokens !== N).length,
  ...(failed.length ? { failed } : {}) }));
