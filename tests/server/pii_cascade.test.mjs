// pii_cascade.test.mjs - PII masking and cascades on a live server
// (server.yaml). The model sees placeholders, never the values (shown by
// echo and by the prompt token counts); the values never reach the log.
// A cascade's answer equals the stage requests made by hand.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, HERE, metrics } from './lib.mjs';

let srv, client;
before(async () => {
  srv = await startServer(['--config', path.join(HERE, 'server.yaml'), '-t', '1']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, srv.stderr()); });

const SECRET = 'Patient bob.jones@example.com, phone +44 20 7946 0958, card 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, id 11010519491231002X, MRN-123456.';
const MASKED = 'Patient [EMAIL_1], phone [PHONE_1], card [CARD_1], IBAN [IBAN_1], id [CN_ID_1], [MRN_1].';

test('the prompt is masked before tokenization', async () => {
  const r = await client.completions.create({ model: 'stories-pii', prompt: SECRET, max_tokens: 10, temperature: 0, echo: true });
  assert.ok(r.choices[0].text.startsWith(MASKED), r.choices[0].text);
  const plain = await client.completions.create({ model: 'stories', prompt: MASKED, max_tokens: 10, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.equal(r.choices[0].text, MASKED + plain.choices[0].text);
  // chat: the same for message contents
  const c = await client.chat.completions.create({ model: 'stories-pii', messages: [{ role: 'user', content: SECRET }], max_tokens: 10, temperature: 0 });
  const cp = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: MASKED }], max_tokens: 10, temperature: 0 });
  assert.equal(c.usage.prompt_tokens, cp.usage.prompt_tokens);
  assert.equal(c.choices[0].message.content, cp.choices[0].message.content);
  const s = await client.chat.completions.create({ model: 'stories-pii', messages: [{ role: 'user', content: SECRET }], max_tokens: 10, temperature: 0, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
  assert.equal(text, c.choices[0].message.content);
  const m = await metrics(srv.url);
  assert.ok(m.get('xllm_pii_masked_total', '{model="stories-pii"}') >= 12);
  for (const v of ['bob.jones', '7946', '4111', 'WEST', '11010519491231002X', 'MRN-123456']) assert.ok(!srv.stderr().includes(v), v);
  // logprobs would show raw tokens of filtered output: refused
  assert.equal((await fetch(`${srv.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories-pii', prompt: 'x', logprobs: 1 }) })).status, 400);
});

test('a cascade runs its stages in order, the next seeing the previous answer', async () => {
  const r = await client.completions.create({ model: 'cascade', prompt: 'Once upon', temperature: 0 });
  assert.equal(r.model, 'cascade');
  const st = r.x_cascade.stages;
  assert.deepEqual(st.map((s) => s.model), ['stories', 'stories-b']);
  assert.equal(st[0].ended_cascade, false);
  assert.equal(st[1].ended_cascade, true);
  assert.ok(st[0].mean_logprob < 0);
  const s0 = await client.completions.create({ model: 'stories', prompt: 'Once upon', max_tokens: 8, temperature: 0, logprobs: 0 });
  const mean = s0.choices[0].logprobs.token_logprobs.reduce((a, b) => a + b, 0) / 8;
  assert.ok(Math.abs(mean - st[0].mean_logprob) < 1e-6);
  const s1 = await client.completions.create({ model: 'stories-b', prompt: 'Once upon ' + s0.choices[0].text, max_tokens: 8, temperature: 0 });
  assert.equal(r.choices[0].text, s1.choices[0].text);
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(r.choices[0].logprobs, null);
  const s = await client.completions.create({ model: 'cascade', prompt: 'Once upon', temperature: 0, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

test('a confident stage ends the cascade early', async () => {
  const r = await client.completions.create({ model: 'cascade-early', prompt: 'Once upon', temperature: 0 });
  assert.equal(r.x_cascade.stages.length, 1);
  assert.equal(r.x_cascade.stages[0].ended_cascade, true);
  const s0 = await client.completions.create({ model: 'stories', prompt: 'Once upon', max_tokens: 8, temperature: 0 });
  assert.equal(r.choices[0].text, s0.choices[0].text);
  const c = await client.chat.completions.create({ model: 'cascade-early', messages: [{ role: 'user', content: 'Hi' }], temperature: 0 });
  const cs = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0 });
  assert.equal(c.choices[0].message.content, cs.choices[0].message.content);
  const m = await metrics(srv.url);
  assert.equal(m.get('xllm_cascade_stage_accepted_total', '{cascade="cascade-early",stage="0",model="stories"}'), 2);
  assert.ok(m.get('xllm_cascade_stage_runs_total', '{cascade="cascade",stage="1",model="stories-b"}') >= 2);
});
