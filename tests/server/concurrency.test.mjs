// concurrency.test.mjs - many clients at once: 64 simultaneous streams each
// equal to its solo run at temperature 0 (XLLM_TEST_STREAMS: fewer, for a
// slow backend: tests/e2e/vulkan_server.sh); a client that disconnects mid-stream
// has its request aborted and its KV freed (read from /metrics); a full queue
// is 429. The server has 8 batch slots and a small KV pool (load.yaml), so
// the streams queue and preempt one another.
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
