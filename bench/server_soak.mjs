// server_soak.mjs - a soak of `xllm serve`: C clients for D seconds, each
// looping over random requests (completions or chat, streamed or not, 1-200
// tokens, n 1-3, sometimes seeded sampling) and aborting ~30% of them at a
// random moment or, streamed, after a random number of streamed events. Every 10 s it samples the server's resident memory
// (/proc/PID/status), KV pool and memory gauges (/metrics: the library's
// mem_malloc bytes, the C heap in use and kept free by the allocator). At the end it waits for the
// engine to go idle and prints one JSON line: requests, statuses, 5xx count,
// aborts, RSS samples, KV blocks used at the end, preemptions.
//
//   node bench/server_soak.mjs --url URL --pid PID --model NAME [-c 32] [-d 600] [--max-tokens 200]
const args = Object.fromEntries(process.argv.slice(2).reduce((a, x, i, all) => (x.startsWith('-') ? [...a, [x.replace(/^-+/, ''), all[i + 1]]] : a), []));
import fs from 'node:fs';
const url = args.url, pid = args.pid, model = args.model, C = +(args.c || 32), D = +(args.d || 600),
  MAXTOK = +(args['max-tokens'] || 200);
const statuses = {}; let requests = 0, aborted = 0, abortedMid = 0, errors = 0;
const errorsSeen = [];
const rssKiB = () => +(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
const metric = async (name) => {
  const t = await (await fetch(`${url}/metrics`)).text();
  const m = t.match(new RegExp(`^${name}\\{model="${model}"\\} (\\S+)$`, 'm'));
  return m ? +m[1] : NaN;
};
// process-wide gauges (no model label): the library's mem_malloc bytes, the C heap in use / kept free
const gauge = async (name) => {
  const t = await (await fetch(`${url}/metrics`)).text();
  const m = t.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? +m[1] : NaN;
};
const mib = (x) => +(x / 1048576).toFixed(2);
const words = 'the a cat dog sun ran big little happy tree ball girl boy went saw'.split(' ');
const pick = (xs) => xs[Math.floor(Math.random() * xs.length)];
const deadline = Date.now() + D * 1000;

async function worker() {
  while (Date.now() < deadline) {
    const chat = Math.random() < 0.5, stream = Math.random() < 0.6;
    const text = Array.from({ length: 3 + Math.floor(Math.random() * 40) }, () => pick(words)).join(' ');
    const body = { model, max_tokens: 1 + Math.floor(Math.random() * MAXTOK), n: 1 + Math.floor(Math.random() * 3), stream,
      temperature: Math.random() < 0.5 ? 0 : 0.9, ...(Math.random() < 0.5 ? { seed: Math.floor(Math.random() * 1000) } : {}),
      ...(chat ? { messages: [{ role: 'user', content: text }] } : { prompt: text }) };
    const ac = new AbortController();
    const abortIt = Math.random() < 0.3;
    // half the aborts at a random moment within 300 ms (often while queued), the other
    // half of a streamed request after its k-th streamed event (k 1-20): mid-stream
    const midAfter = abortIt && stream && Math.random() < 0.5 ? 1 + Math.floor(Math.random() * 20) : 0;
    if (abortIt && !midAfter) setTimeout(() => ac.abort(), Math.random() * 300);
    requests++;
    try {
      const r = await fetch(`${url}/v1/${chat ? 'chat/completions' : 'completions'}`, { method: 'POST', body: JSON.stringify(body), signal: ac.signal });
      statuses[r.status] = (statuses[r.status] || 0) + 1;
      if (midAfter && r.status === 200) {
        let events = 0;
        const dec = new TextDecoder();
        for await (const part of r.body) {
          events += (dec.decode(part, { stream: true }).match(/^data: /gm) || []).length;
          if (events >= midAfter) { abortedMid++; ac.abort(); break; }
        }
      } else await r.text();
    } catch (e) {
      if (e.name === 'AbortError') aborted++;
      else {
        errors++;
        if (errorsSeen.length < 10) errorsSeen.push({ t: Math.round((Date.now() - (deadline - D * 1000)) / 1000), name: e.name, message: String(e.message).slice(0, 200),
          cause: e.cause ? String(e.cause.code || e.cause.message || e.cause).slice(0, 200) : null, stream, chat, abortIt, midAfter });
      }
    }
  }
}

const rss = [];
const sampler = setInterval(async () => {
  try {
    rss.push({ t: Math.round((D * 1000 - (deadline - Date.now())) / 1000), rss_mib: +(rssKiB() / 1024).toFixed(1),
      kv_used: await metric('xllm_kv_blocks_used'), lib_mib: mib(await gauge('xllm_library_allocated_bytes')),
      heap_in_use_mib: mib(await gauge('xllm_heap_in_use_bytes')), heap_free_mib: mib(await gauge('xllm_heap_free_bytes')) });
  } catch { /* */ }
}, 10000);
await Promise.all(Array.from({ length: C }, worker));
clearInterval(sampler);
let kvUsed = NaN, running = NaN;
for (let i = 0; i < 100; i++) {
  kvUsed = await metric('xllm_kv_blocks_used'); running = await metric('xllm_running_requests');
  if (kvUsed === 0 && running === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
const preemptions = (await metric('xllm_preemptions_recompute_total')) + (await metric('xllm_preemptions_swap_total'));
const kvTotal = await metric('xllm_kv_blocks_total');
// the server's own count of its answers by status (every endpoint)
const serverStatuses = {};
for (const m of (await (await fetch(`${url}/metrics`)).text()).matchAll(/^xllm_http_requests_total\{endpoint="[^"]*",status="([^"]*)"\} (\d+)$/gm))
  if (+m[2]) serverStatuses[m[1]] = (serverStatuses[m[1]] || 0) + +m[2];
const fivexx = Object.entries(statuses).filter(([s]) => +s >= 500).reduce((a, [, n]) => a + n, 0);
console.log(JSON.stringify({ clients: C, seconds: D, requests, statuses, aborted_by_client: aborted, aborted_mid_stream: abortedMid, client_errors: errors, ...(errorsSeen.length ? { errors_seen: errorsSeen } : {}), server_statuses: serverStatuses, fivexx,
  kv_blocks_used_end: kvUsed, kv_blocks_total: kvTotal, running_end: running, preemptions, rss_end_mib: +(rssKiB() / 1024).toFixed(1), rss }));
