// concurrency.test.mjs - many clients at once: 64 simultaneous streams each
// equal to its solo run at temperature 0 (XLLM_TEST_STREAMS: fewer, for a
// slow backend: tests/e2e/vulkan_server.sh); a client that disconnects mid-stream
// has its request aborted and its KV freed (read from /metrics); a full queue
// is 429. The server has 8 batch slots and a small KV pool (load.yaml), so
// the streams queue and preempt one another. A second server whose KV pool holds
// one full context (preempt-engine.yaml) shows preemption counted in /metrics,
// with the preempted streams still equal to their solo runs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, HERE, metrics, sleep } from './lib.mjs';

let srv, client;
before(async () => {
  srv = await startServer(['--config', path.join(HERE, 'load.yaml'), '--max-queue', '100']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, srv.stderr()); });

const words = ['cat', 'dog', 'sun', 'tree', 'ball', 'girl', 'boy', 'bird'];
const N = Math.max(8, Math.min(64, Number(process.env.XLLM_TEST_STREAMS) || 64));
const prompts = Array.from({ length: N }, (_, i) => `Once upon a time, a ${words[i % 8]} and a ${words[(i * 3 + 1) % 8]} went to the ${words[(i * 5 + 2) % 8]}`);

async function waitIdle(url) {
  for (let i = 0; i < 200; i++) {
    const m = await metrics(url);
    if (m.get('xllm_running_requests', '{model="stories"}') === 0 && m.get('xllm_queue_depth', '{model="stories"}') === 0 &&
        m.get('xllm_kv_blocks_used', '{model="stories"}') === 0) return m;
    await sleep(50);
  }
  assert.fail('the engine did not go idle');
}

test(`${N} simultaneous streams each equal their solo run`, async () => {
  const solo = [];
  for (const p of prompts) {
    const r = await client.completions.create({ model: 'stories', prompt: p, max_tokens: 48, temperature: 0 });
    solo.push(r.choices[0].text);
  }
  const streams = await Promise.all(prompts.map(async (p, i) => {
    const s = await client.completions.create({ model: 'stories', prompt: p, max_tokens: 48, temperature: 0, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.text ?? '';
    return text;
  }));
  for (let i = 0; i < N; i++) assert.equal(streams[i], solo[i], `stream ${i}`);
  await waitIdle(srv.url);
  let done = 0;
  for (let i = 0; i < 100 && done < 2 * N; i++, await sleep(50))
    done = (await metrics(srv.url)).get('xllm_http_requests_total', '{endpoint="completions",status="200"}');
  assert.ok(done >= 2 * N, `${done} completions counted as 200, expected ${2 * N}`);
});

test('a client that disconnects mid-stream has its request aborted and KV freed', async () => {
  const before = (await metrics(srv.url)).get('xllm_engine_requests_aborted_total', '{model="stories"}');
  const ac = new AbortController();
  const s = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 480, n: 8, ignore_eos: true, temperature: 0, stream: true }, { signal: ac.signal });
  let chunks = 0;
  try {
    for await (const c of s) { if (c.choices.length && ++chunks === 2) { ac.abort(); break; } }
  } catch (e) { /* an abort may surface as an error */ }
  assert.equal(chunks, 2);
  const m = await waitIdle(srv.url);
  assert.equal(m.get('xllm_engine_requests_aborted_total', '{model="stories"}'), before + 1);
  assert.equal(m.get('xllm_kv_blocks_used', '{model="stories"}'), 0);
  // still serving
  const r = await client.completions.create({ model: 'stories', prompt: 'Tim', max_tokens: 5 });
  assert.equal(r.choices.length, 1);
});

test('a full queue answers 429 and holds nothing', async () => {
  // 8 batch slots + --max-queue 100 = 108 requests in flight at most: 109 prompts in one request
  const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories', prompt: Array(64).fill('a'), max_tokens: 2 }) });
  assert.equal(r.status, 200);
  const many = Array.from({ length: 3 }, () => fetch(`${srv.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories', prompt: Array(64).fill('a b c'), max_tokens: 400, ignore_eos: true }) }));
  const answers = await Promise.all(many);
  const statuses = answers.map((x) => x.status).sort();
  assert.ok(statuses.includes(429), `statuses ${statuses}`);
  for (const a of answers) if (a.status === 429) assert.equal(a.headers.get('retry-after'), '1');
  const j = await (await fetch(`${srv.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories', prompt: 'x', max_tokens: 1 }) })).json();
  assert.equal(j.choices.length, 1);
  await waitIdle(srv.url);
});

test('streams that outgrow the KV pool are preempted, counted in /metrics, and still equal their solo runs', async () => {
  // a pool of one full context (preempt-engine.yaml: memory.kv_tokens 256) for 8 streams
  // of ~110 tokens: they cannot all hold their KV at once, so the engine preempts
  const p = await startServer(['--config', path.join(HERE, 'preempt-engine.yaml')]);
  try {
    const c = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const ps = prompts.slice(0, 8);
    const solo = [];
    for (const q of ps) solo.push((await c.completions.create({ model: 'stories260k', prompt: q, max_tokens: 100, temperature: 0, ignore_eos: true })).choices[0].text);
    const m0 = await metrics(p.url);
    assert.equal(m0.get('xllm_preemptions_recompute_total', '{model="stories260k"}'), 0);
    const texts = await Promise.all(ps.map(async (q) => {
      const s = await c.completions.create({ model: 'stories260k', prompt: q, max_tokens: 100, temperature: 0, ignore_eos: true, stream: true });
      let text = '';
      for await (const x of s) text += x.choices[0]?.text ?? '';
      return text;
    }));
    for (let i = 0; i < ps.length; i++) assert.equal(texts[i], solo[i], `stream ${i}`);
    const m = await metrics(p.url);
    // the counter once read a key the stats JSON does not have and stayed 0
    assert.ok(m.get('xllm_preemptions_recompute_total', '{model="stories260k"}') > 0, 'no preemption counted');
    assert.equal(m.get('xllm_preemptions_swap_total', '{model="stories260k"}'), 0);
    assert.equal(m.get('xllm_kv_blocks_total', '{model="stories260k"}'), 16);
  } finally {
    assert.equal(await p.stop(), 0, p.stderr());
  }
});

test('a stream that waits for a batch slot gets keep-alive comments; its text is unchanged', async () => {
  // issue 28's 256-client run: streams queued or preempted for over 300 s were ended by
  // Node's fetch (its body timeout) while the server had nothing to send. The server now
  // writes an SSE comment after --sse-keepalive ms of silence (20 here; default 15 s).
  // One batch slot (queue-engine.yaml): a long request holds it while the streams wait.
  const p = await startServer(['--config', path.join(HERE, 'queue-engine.yaml'), '--sse-keepalive', '20']);
  try {
    const c = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const q = prompts[3];
    const solo = (await c.completions.create({ model: 'stories260k', prompt: q, max_tokens: 16, temperature: 0 })).choices[0].text;
    const busy = c.completions.create({ model: 'stories260k', prompt: prompts[0], max_tokens: 480, temperature: 0, ignore_eos: true });
    for (let i = 0; i < 1000; i++, await sleep(5)) // until it holds the slot (then ~480 steps remain)
      if ((await metrics(p.url)).get('xllm_running_requests', '{model="stories260k"}') === 1) break;
    const raw = fetch(`${p.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories260k', prompt: q, max_tokens: 16, temperature: 0, stream: true }) })
      .then((r) => r.text());
    const sdk = (async () => {
      const s = await c.completions.create({ model: 'stories260k', prompt: q, max_tokens: 16, temperature: 0, stream: true });
      let text = '';
      for await (const x of s) text += x.choices[0]?.text ?? '';
      return text;
    })();
    const [body, sdkText] = await Promise.all([raw, sdk]);
    await busy;
    assert.ok(body.includes(': keep-alive\n\n'), `no keep-alive comment in ${JSON.stringify(body.slice(0, 300))}`);
    const events = body.split('\n\n').filter((e) => e.startsWith('data: '));
    assert.equal(events[events.length - 1], 'data: [DONE]');
    const text = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0]?.text ?? '').join('');
    assert.equal(text, solo);
    assert.equal(sdkText, solo); // the official client skips the comments
  } finally {
    assert.equal(await p.stop(), 0, p.stderr());
  }
});
