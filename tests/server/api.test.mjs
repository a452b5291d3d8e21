// api.test.mjs - `xllm serve` through the official OpenAI client: completions
// and chat, streamed and not, n, logprobs, stop strings, seeds, every error
// status, the API key, several models, tokenize/detokenize, metrics.
// The reference for greedy text is PyTorch's (models/stories260k/expected.json).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, SRC, HERE, metrics } from './lib.mjs';

const KEY = 'test-key-123';
const expected = JSON.parse(fs.readFileSync(path.join(SRC, 'models/stories260k/expected.json'), 'utf8'));
let srv, client;

before(async () => {
  srv = await startServer(['--config', path.join(HERE, 'server.yaml'), '--api-key', KEY, '-t', '1']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, srv.stderr()); });

const post = (p, body, key = KEY) => fetch(`${srv.url}${p}`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});

async function collect(stream) {
  const texts = {}; let finish = {}; let usage = null; const chunks = [];
  for await (const c of stream) {
    chunks.push(c);
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      const piece = ch.delta ? (ch.delta.content ?? '') : ch.text;
      texts[ch.index] = (texts[ch.index] ?? '') + piece;
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  return { texts, finish, usage, chunks };
}

test('models lists every model and cascade', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id).sort();
  assert.deepEqual(ids, ['cascade', 'cascade-early', 'stories', 'stories-b', 'stories-pii']);
  const one = await client.models.retrieve('stories');
  assert.equal(one.id, 'stories');
});

test('greedy completion equals PyTorch', async () => {
  const r = await client.completions.create({ model: 'stories', prompt: expected.prompt, max_tokens: 200, temperature: 0 });
  assert.equal(expected.prompt + r.choices[0].text, expected.prompt_greedy_200_text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: expected.prompt_ids.length, completion_tokens: 200, total_tokens: 200 + expected.prompt_ids.length });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, 'stories');
});

test('prompt as token ids and as a list of strings', async () => {
  const ids = await client.completions.create({ model: 'stories', prompt: expected.prompt_ids, max_tokens: 50, temperature: 0 });
  assert.equal(expected.prompt + ids.choices[0].text, expected.prompt_greedy_200_text.slice(0, expected.prompt.length + ids.choices[0].text.length));
  const many = await client.completions.create({ model: 'stories', prompt: [expected.prompt, 'The dog'], max_tokens: 20, temperature: 0 });
  assert.equal(many.choices.length, 2);
  const solo = await client.completions.create({ model: 'stories', prompt: 'The dog', max_tokens: 20, temperature: 0 });
  assert.equal(many.choices[1].text, solo.choices[0].text);
  assert.equal(many.choices[0].text, ids.choices[0].text.slice(0, many.choices[0].text.length));
});

test('streamed completion equals the non-streamed one, usage in the last chunk', async () => {
  const whole = await client.completions.create({ model: 'stories', prompt: 'Lily', max_tokens: 60, temperature: 0 });
  const s = await client.completions.create({ model: 'stories', prompt: 'Lily', max_tokens: 60, temperature: 0, stream: true, stream_options: { include_usage: true } });
  const got = await collect(s);
  assert.equal(got.texts[0], whole.choices[0].text);
  assert.equal(got.finish[0], whole.choices[0].finish_reason);
  assert.deepEqual(got.usage, whole.usage);
  assert.deepEqual(got.chunks.at(-1).choices, []);
});

test('chat: message, stream, usage, finish reasons', async () => {
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
  const r = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 40, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.completion_tokens <= 40, true);
  const s = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 40, temperature: 0, stream: true });
  const got = await collect(s);
  assert.equal(got.texts[0], r.choices[0].message.content);
  assert.equal(got.finish[0], r.choices[0].finish_reason);
  assert.equal(got.chunks[0].choices[0].delta.role, 'assistant');
  const mct = await client.chat.completions.create({ model: 'stories', messages, max_completion_tokens: 3, temperature: 0 });
  assert.equal(mct.usage.completion_tokens, 3);
  assert.equal(mct.choices[0].finish_reason, 'length');
  // the template gets tools (our template ignores them; the request is accepted)
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
  const t = await client.chat.completions.create({ model: 'stories', messages, tools, max_tokens: 3, temperature: 0 });
  assert.equal(t.choices[0].message.content, mct.choices[0].message.content);
});

test('n = 2 samples with a seed are reproducible; seeds change samples', async () => {
  const req = { model: 'stories', prompt: 'Once upon a time', max_tokens: 30, temperature: 1, n: 2, seed: 7 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.notEqual(a.choices[0].text, a.choices[1].text);
  const c = await client.completions.create({ ...req, seed: 8 });
  assert.notDeepEqual(c.choices.map((x) => x.text), a.choices.map((x) => x.text));
  const s = await client.completions.create({ ...req, stream: true });
  const got = await collect(s);
  assert.deepEqual([got.texts[0], got.texts[1]], a.choices.map((x) => x.text));
  const chat = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }], n: 2, seed: 3, temperature: 1, max_tokens: 10 });
  assert.equal(chat.choices.length, 2);
});

test('logprobs: completions and chat, streamed and not, consistent with greedy choice', async () => {
  const r = await client.completions.create({ model: 'stories', prompt: expected.prompt, max_tokens: 8, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 8; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const tops = Object.values(lp.top_logprobs[i]);
    assert.ok(tops.length >= 1 && tops.length <= 3);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(Math.max(...tops) - lp.token_logprobs[i]) < 1e-5);
  }
  const c = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  assert.equal(content.map((x) => x.token).join(''), c.choices[0].message.content);
  for (const x of content) {
    assert.equal(x.top_logprobs.length, 2);
    assert.ok(x.top_logprobs[0].logprob >= x.top_logprobs[1].logprob);
    assert.ok(Math.abs(x.top_logprobs[0].logprob - x.logprob) < 1e-5);
    assert.deepEqual(x.bytes, [...Buffer.from(x.token, 'utf8')]);
  }
  const s = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
  const streamed = [];
  for await (const ch of s) for (const x of ch.choices) if (x.logprobs) streamed.push(...x.logprobs.content);
  assert.deepEqual(streamed.map((x) => [x.token, x.logprob]), content.map((x) => [x.token, x.logprob]));
});

test('stop strings, also across token boundaries, never leak into the stream', async () => {
  const full = expected.prompt_greedy_200_text.slice(expected.prompt.length);
  // ", there was a little girl named Lily." -- "was a lit" spans several tokens
  for (const stop of ['was a lit', 'Lily.', 'ed Li']) {
    const cut = full.slice(0, full.indexOf(stop));
    const r = await client.completions.create({ model: 'stories', prompt: expected.prompt, max_tokens: 100, temperature: 0, stop });
    assert.equal(r.choices[0].text, cut);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await client.completions.create({ model: 'stories', prompt: expected.prompt, max_tokens: 100, temperature: 0, stop: [stop, 'zzzz'], stream: true });
    const got = await collect(s);
    assert.equal(got.texts[0], cut);
    assert.equal(got.finish[0], 'stop');
  }
});

test('echo returns the prompt before the completion', async () => {
  const r = await client.completions.create({ model: 'stories', prompt: 'The cat', max_tokens: 5, temperature: 0, echo: true });
  const plain = await client.completions.create({ model: 'stories', prompt: 'The cat', max_tokens: 5, temperature: 0 });
  assert.equal(r.choices[0].text, 'The cat' + plain.choices[0].text);
});

test('errors: OpenAI error objects with the right statuses', async () => {
  const bad = async (body, status, param, p = '/v1/completions') => {
    const r = await post(p, body);
    assert.equal(r.status, status, JSON.stringify(body));
    const j = await r.json();
    assert.equal(typeof j.error.message, 'string');
    assert.ok('type' in j.error && 'param' in j.error && 'code' in j.error);
    if (param !== undefined) assert.equal(j.error.param, param);
    return j.error;
  };
  await bad('{"model": "stories", "prompt": ', 400, null);
  await bad({ model: 'stories', prompt: 'x', temperature: 'hot' }, 400, 'temperature');
  await bad({ model: 'stories', prompt: 'x', temperature: 7 }, 400, 'temperature');
  await bad({ model: 'stories', prompt: 'x', max_tokens: 1e300 }, 400, 'max_tokens');
  await bad({ model: 'stories', prompt: 'x', max_tokens: 2.5 }, 400, 'max_tokens');
  await bad({ model: 'stories', prompt: 'x', n: 0 }, 400, 'n');
  await bad({ model: 'stories', prompt: 'x', top_p: -1 }, 400, 'top_p');
  await bad({ model: 'stories', prompt: 'x', stop: [1, 2] }, 400, 'stop');
  await bad({ model: 'stories', prompt: 'x', priority: 'urgent' }, 400, 'priority');
  await bad({ model: 'stories', prompt: [[99999]] }, 400, 'prompt');
  await bad({ model: 'stories', prompt: 'x', logprobs: 50 }, 400, 'logprobs');
  await bad({ model: 'stories', messages: 'hi' }, 400, 'messages', '/v1/chat/completions');
  await bad({ model: 'stories', messages: [{ role: 'robot', content: 'x' }] }, 400, 'messages', '/v1/chat/completions');
  const ctx = await bad({ model: 'stories', prompt: Array(600).fill(300) }, 400);
  assert.equal(ctx.code, 'context_length_exceeded');
  const ctx2 = await bad({ model: 'stories', prompt: 'Once', max_tokens: 600 }, 400, 'max_tokens');
  assert.equal(ctx2.code, 'context_length_exceeded');
  const nf = await bad({ model: 'nope', prompt: 'x' }, 404, 'model');
  assert.equal(nf.code, 'model_not_found');
  assert.equal((await post('/v1/nothing', {})).status, 404);
  assert.equal((await fetch(`${srv.url}/v1/completions`, { headers: { Authorization: `Bearer ${KEY}` } })).status, 405);
  const big = await post('/v1/completions', JSON.stringify({ model: 'stories', prompt: 'x'.repeat(9 << 20) }));
  assert.equal(big.status, 413);
  // the client raises typed errors for these
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), OpenAI.NotFoundError);
  await assert.rejects(client.completions.create({ model: 'stories', prompt: 'x', temperature: -1 }), OpenAI.BadRequestError);
});

test('API key: missing or wrong is 401; /health needs none', async () => {
  for (const key of [null, 'wrong', KEY + 'x', KEY.slice(0, -1)]) {
    const r = await post('/v1/completions', { model: 'stories', prompt: 'x' }, key);
    assert.equal(r.status, 401);
    assert.equal((await r.json()).error.code, 'invalid_api_key');
  }
  const other = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(other.models.list(), OpenAI.AuthenticationError);
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  assert.equal((await fetch(`${srv.url}/metrics`)).status, 401);
});

test('several models: each request runs on the model it names', async () => {
  const a = await client.completions.create({ model: 'stories', prompt: 'Tim', max_tokens: 20, temperature: 0 });
  const b = await client.completions.create({ model: 'stories-b', prompt: 'Tim', max_tokens: 20, temperature: 0 });
  assert.equal(a.model, 'stories');
  assert.equal(b.model, 'stories-b');
  assert.equal(a.choices[0].text, b.choices[0].text); // the same weights
  const m = await metrics(srv.url, KEY);
  assert.ok(m.get('xllm_generation_tokens_total', '{model="stories-b"}') >= 20);
});

test('tokenize and detokenize', async () => {
  const t = await (await post('/tokenize', { model: 'stories', prompt: expected.prompt })).json();
  assert.deepEqual(t.tokens, expected.prompt_ids);
  assert.equal(t.count, expected.prompt_ids.length);
  const d = await (await post('/detokenize', { model: 'stories', tokens: expected.prompt_greedy_200_ids })).json();
  assert.equal(expected.prompt + d.prompt, expected.prompt_greedy_200_text);
  assert.equal((await post('/detokenize', { model: 'stories', tokens: [1e9] })).status, 400);
  const c = await (await post('/tokenize', { model: 'stories', messages: [{ role: 'user', content: 'Hi' }] })).json();
  assert.ok(c.count > 2);
});

test('metrics: Prometheus text with the counters', async () => {
  const m = await metrics(srv.url, KEY);
  for (const name of ['xllm_http_requests_total', 'xllm_time_to_first_token_seconds_bucket', 'xllm_time_per_output_token_seconds_count',
    'xllm_prompt_tokens_total', 'xllm_generation_tokens_total', 'xllm_queue_depth', 'xllm_running_requests', 'xllm_kv_blocks_used',
    'xllm_kv_blocks_cached', 'xllm_kv_blocks_free', 'xllm_prefix_cache_hit_tokens_total', 'xllm_response_cache_hits_total',
    'xllm_preemptions_recompute_total', 'xllm_cascade_stage_runs_total']) assert.ok(m.text.includes(name), name);
  assert.ok(m.get('xllm_http_requests_total', '{endpoint="completions",status="200"}') > 5);
  assert.ok(m.get('xllm_http_requests_total', '{endpoint="completions",status="400"}') > 5);
  assert.ok(m.get('xllm_time_to_first_token_seconds_count') > 5);
  assert.ok(m.get('xllm_kv_blocks_total', '{model="stories"}') > 0);
});
