// structured.e2e.mjs - structured output through `xllm serve` with the official
// OpenAI client: every schema of the corpus (tests/data/schemas) as
// response_format json_schema, greedy and sampled, on chat and completions;
// each output must parse and validate under ajv (an independent validator,
// with ajv-formats). Also json_object, n > 1, streaming, the grammar / regex /
// json_schema extensions, chat.completions.parse with a zod schema, and the
// 400s: unsupported schema keywords and unknown response_format types.
// Run by tests/e2e/structured_output.sh (its own ctest entry).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startServer, SRC, SANITIZED } from './lib.mjs';

const MODEL = 'stories260k';
let srv, client;

before(async () => {
  srv = await startServer(['-m', path.join(SRC, 'models/stories260k'), '-t', '1']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, srv.stderr()); });

const ajv2020 = addFormats(new Ajv2020({ strict: false, allErrors: true }));
const ajv07 = addFormats(new Ajv({ strict: false, allErrors: true }));
// draft-07 tuples (items: [...]) are not 2020-12; everything else is read as 2020-12
const hasItemsArray = (s) => JSON.stringify(s).match(/"items":\[/) !== null;
const validator = (s) => (hasItemsArray(s) ? ajv07 : ajv2020).compile(s);

const dir = path.join(SRC, 'tests/data/schemas');
const corpus = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
  .map((f) => ({ name: f.slice(0, -5), schema: JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) }));

function check(name, text, validate, how) {
  let v;
  try { v = JSON.parse(text); } catch (e) { assert.fail(`${name} (${how}): not JSON: ${JSON.stringify(text.slice(0, 300))}`); }
  assert.ok(validate(v), `${name} (${how}): ${ajv2020.errorsText(validate.errors)}: ${text.slice(0, 300)}`);
}

// a few requests at a time: the engine batches them
async function pool(items, n, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: n }, async () => { while (next < items.length) await fn(items[next++]); }));
}

test('corpus: every schema, greedy and sampled, chat and completions, validates under ajv', async () => {
  assert.ok(corpus.length >= 100, `${corpus.length} schemas`);
  const cases = [];
  corpus.forEach((c, i) => {
    if (SANITIZED && i % 4) return; // under ASan a quarter of the corpus
    cases.push({ ...c, how: 'greedy', chat: i % 2 === 0, temperature: 0 });
    cases.push({ ...c, how: 'sampled', chat: i % 2 === 1, temperature: 1, seed: 1000 + i });
  });
  let done = 0;
  await pool(cases, 8, async (c) => {
    const validate = validator(c.schema);
    const rf = { type: 'json_schema', json_schema: { name: c.name, schema: c.schema, strict: true } };
    const common = { model: MODEL, max_tokens: 480, temperature: c.temperature, seed: c.seed, response_format: rf };
    let text, finish;
    if (c.chat) {
      const r = await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: `Give me ${c.name}` }] });
      text = r.choices[0].message.content; finish = r.choices[0].finish_reason;
    } else {
      const r = await client.completions.create({ ...common, prompt: 'Once upon a time' });
      text = r.choices[0].text; finish = r.choices[0].finish_reason;
    }
    assert.equal(finish, 'stop', `${c.name} (${c.how}): finish ${finish}: ${text.slice(0, 200)}`);
    check(c.name, text, validate, `${c.how}, ${c.chat ? 'chat' : 'completions'}`);
    done++;
  });
  assert.equal(done, cases.length);
});

test('json_object, n > 1 and streaming', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 400, temperature: 0.8, seed: 5, n: 3, response_format: { type: 'json_object' } });
  assert.equal(r.choices.length, 3);
  for (const ch of r.choices) {
    assert.ok(ch.message.content.startsWith('{'), ch.message.content);
    if (ch.finish_reason === 'stop') assert.equal(typeof JSON.parse(ch.message.content), 'object');
  }
  const schema = corpus.find((c) => c.name === 'order').schema;
  const validate = validator(schema);
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'order' }],
    max_tokens: 480, temperature: 1, seed: 9, n: 2, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'order', schema } } });
  const texts = ['', ''];
  for await (const c of stream) for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? '';
  texts.forEach((t, i) => check('order', t, validate, `streamed sample ${i}`));
});

test('extensions: grammar, regex, json_schema', async () => {
  const post = async (body) => (await fetch(`${srv.url}/v1/completions`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'The', max_tokens: 60, ...body }) })).json();
  let r = await post({ grammar: 'root ::= ("yes" | "no") ", " [a-z]{2,6} "."', seed: 3 });
  assert.match(r.choices[0].text, /^(yes|no), [a-z]{2,6}\.$/);
  r = await post({ regex: '[A-Z][a-z]{1,10} (is|was) [0-9]{1,3}', seed: 4 });
  assert.match(r.choices[0].text, /^[A-Z][a-z]{1,10} (is|was) [0-9]{1,3}$/);
  r = await post({ json_schema: { type: 'array', items: { type: 'integer', minimum: 1, maximum: 9 }, minItems: 2, maxItems: 4 }, temperature: 0 });
  const v = JSON.parse(r.choices[0].text);
  assert.ok(Array.isArray(v) && v.length >= 2 && v.length <= 4 && v.every((x) => Number.isInteger(x) && x >= 1 && x <= 9), r.choices[0].text);
});

test('chat.completions.parse with a zod schema', async () => {
  const Event = z.object({
    name: z.string().max(20),
    day: z.enum(['monday', 'tuesday', 'friday']),
    guests: z.array(z.string().max(10)).max(3),
    confirmed: z.boolean(),
  });
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.parse({ model: MODEL, max_tokens: 300, temperature, seed: 21,
      messages: [{ role: 'user', content: 'Plan an event' }], response_format: zodResponseFormat(Event, 'event') });
    const parsed = r.choices[0].message.parsed;
    assert.ok(parsed && Event.safeParse(parsed).success, JSON.stringify(r.choices[0].message));
  }
});

test('refusals: 400 naming what is not supported', async () => {
  const bad = async (body, needle) => {
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 5, ...body }) });
    const j = await res.json();
    assert.equal(res.status, 400, JSON.stringify(j));
    assert.ok(j.error.message.includes(needle), `${j.error.message} lacks ${needle}`);
  };
  const js = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
  await bad(js({ not: { type: 'string' } }), '"not"');
  await bad(js({ type: 'object', patternProperties: { '^a': {} } }), 'patternProperties');
  await bad(js({ if: {}, then: {} }), '"if"');
  await bad(js({ type: 'array', uniqueItems: true }), 'uniqueItems');
  await bad(js({ type: 'string', format: 'ipv6' }), 'ipv6');
  await bad(js({ type: 'number', multipleOf: 0.3 }), 'multipleOf');
  await bad(js({ type: 'object', properties: { id: { oneOf: [{ type: 'string' }, { type: 'string', maxLength: 3 }] } } }),
    'oneOf at /properties/id: branches 0 and 1');
  await bad(js({ type: 'integer', minimum: 3.2, maximum: 3.8 }), 'no integer');
  await bad(js({ type: 'string', pattern: '(?<=a)b' }), 'lookaround');
  await bad(js({ $ref: 'https://example.com/x.json' }), '$ref');
  await bad({ response_format: { type: 'bogus' } }, 'bogus');
  await bad({ response_format: { type: 'json_schema' } }, 'json_schema');
  await bad({ grammar: 'root ::= missing' }, 'missing');
  await bad({ regex: 'a\\bb' }, 'word boundaries');
  await bad({ regex: 'a', grammar: 'root ::= "a"' }, 'one constraint');
  // and the client surfaces it as a 400
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { not: {} } } } }), (e) => e.status === 400);
});
