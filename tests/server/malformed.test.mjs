// malformed.test.mjs - a corpus of bad requests sent on raw sockets: each is
// answered with a 4xx (or, for a client that stops mid-headers, the
// connection is answered 408 and closed at the head deadline), and the server stays healthy
// and keeps answering correctly between them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import net from 'node:net';
import { startServer, HERE, rawRequest, sleep } from './lib.mjs';

let srv;
before(async () => { srv = await startServer(['--config', path.join(HERE, 'server.yaml'), '--idle-timeout', '2', '--header-timeout', '2', '-t', '1']); });
after(async () => { assert.equal(await srv.stop(), 0, srv.stderr()); });

const req = (body, { method = 'POST', p = '/v1/completions', headers = '' } = {}) => {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return [Buffer.from(`${method} ${p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n${headers}Connection: close\r\n\r\n`), b];
};

async function healthy() {
  const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'stories', prompt: 'Once upon a time', max_tokens: 5, temperature: 0 }) });
  assert.equal(r.status, 200);
  assert.equal((await r.json()).choices[0].text, ', there was a little');
}

const corpus = [
  ['truncated JSON', '{"model": "stories", "prompt": "Once'],
  ['empty body', ''],
  ['not an object', '[1, 2, 3]'],
  ['a bare string', '"hello"'],
  ['wrong type: prompt', '{"model": "stories", "prompt": 12}'],
  ['wrong type: model', '{"model": 5, "prompt": "x"}'],
  ['wrong type: stream', '{"model": "stories", "prompt": "x", "stream": "yes"}'],
  ['wrong type: n', '{"model": "stories", "prompt": "x", "n": "2"}'],
  ['wrong type: messages', '{"model": "stories", "messages": {"role": "user"}}'],
  ['message without content', '{"model": "stories", "messages": [{"role": "user"}]}'],
  ['content part of an unknown type', '{"model": "stories", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'],
  ['huge number', '{"model": "stories", "prompt": "x", "max_tokens": 1e400}'],
  ['huge integer', '{"model": "stories", "prompt": "x", "max_tokens": 99999999999999999999999}'],
  ['negative max_tokens', '{"model": "stories", "prompt": "x", "max_tokens": -1}'],
  ['huge seed', '{"model": "stories", "prompt": "x", "seed": 1e30}'],
  ['NaN-like', '{"model": "stories", "prompt": "x", "temperature": NaN}'],
  ['huge token id', '{"model": "stories", "prompt": [1, 2, 4294967297]}'],
  ['negative token id', '{"model": "stories", "prompt": [-1]}'],
  ['fractional token id', '{"model": "stories", "prompt": [1.5]}'],
  ['empty prompt list', '{"model": "stories", "prompt": []}'],
  ['too many prompts', JSON.stringify({ model: 'stories', prompt: Array(65).fill('x') })],
  ['too many stop strings', JSON.stringify({ model: 'stories', prompt: 'x', stop: Array(17).fill('a') })],
  ['a long stop string', JSON.stringify({ model: 'stories', prompt: 'x', stop: 'a'.repeat(300) })],
  ['deep nesting', '{"model": "stories", "prompt": ' + '['.repeat(5000) + ']'.repeat(5000) + '}'],
  ['unknown model', '{"model": "gpt-4", "prompt": "x"}'],
  ['n too large', '{"model": "stories", "prompt": "x", "n": 100000}'],
  ['top_logprobs without logprobs', '{"model": "stories", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}'],
];

test('malformed bodies are 4xx and the server stays healthy', async () => {
  for (const [name, body] of corpus) {
    const p = name.includes('messages') || name.includes('message') || name.includes('content') || name.includes('top_logprobs') ? '/v1/chat/completions' : '/v1/completions';
    const r = await rawRequest(srv.url, req(body, { p }));
    assert.ok(r.status >= 400 && r.status < 500, `${name}: status ${r.status}`);
    assert.match(r.text, /"error":\{"message":/, name);
  }
  await healthy();
});

test('invalid UTF-8 in strings is 400', async () => {
  for (const bytes of [[0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xe2, 0x82]]) {
    const body = Buffer.concat([Buffer.from('{"model": "stories", "prompt": "a'), Buffer.from(bytes), Buffer.from('b"}')]);
    const r = await rawRequest(srv.url, req(body));
    assert.equal(r.status, 400, `bytes ${bytes}`);
    const m = Buffer.concat([Buffer.from('{"model": "stories", "messages": [{"role": "user", "content": "'), Buffer.from(bytes), Buffer.from('"}]}')]);
    assert.equal((await rawRequest(srv.url, req(m, { p: '/v1/chat/completions' }))).status, 400);
  }
  await healthy();
});

test('a 10 MB body is 413; a chunked one over the limit too', async () => {
  const big = Buffer.alloc(10 << 20, 0x61);
  assert.equal((await rawRequest(srv.url, req(big))).status, 413);
  const head = Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n');
  const piece = Buffer.alloc(1 << 20, 0x61);
  const chunks = [head];
  for (let i = 0; i < 10; i++) chunks.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
  chunks.push(Buffer.from('0\r\n\r\n'));
  assert.equal((await rawRequest(srv.url, chunks)).status, 413);
  await healthy();
});

test('bad HTTP: unknown path, wrong method, oversized headers, garbage', async () => {
  assert.equal((await rawRequest(srv.url, req('{}', { p: '/v2/whatever' }))).status, 404);
  assert.equal((await rawRequest(srv.url, req('', { method: 'DELETE' }))).status, 405);
  assert.equal((await rawRequest(srv.url, req('{}', { headers: `X-Big: ${'a'.repeat(100000)}\r\n` }))).status, 431);
  const g = await rawRequest(srv.url, [Buffer.from('\x00\x01\x02 garbage \r\n\r\n')], { ms: 3000 });
  assert.ok(g.status === 0 || (g.status >= 400 && g.status < 500), `garbage: ${g.status}`);
  await healthy();
});

test('slow-loris headers do not block other clients; a stalled client is closed at the head deadline', async () => {
  const slow = Array.from({ length: 20 }, () => {
    const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(20);
    return rawRequest(srv.url, [...head].map((c) => Buffer.from(c)), { ms: 8000, gapMs: 50 });
  });
  await sleep(300);
  for (let i = 0; i < 3; i++) await healthy();
  const t0 = Date.now();
  const stalled = await rawRequest(srv.url, [Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\n')], { ms: 8000 });
  const waited = Date.now() - t0;
  assert.ok(stalled.status === 0 || stalled.status === 408, `stalled: ${stalled.status}`);
  assert.ok(waited >= 1500 && waited < 7000, `closed after ${waited} ms`);
  await Promise.all(slow);
  await healthy();
});

test('keep-alive: the hint is below the idle deadline, and the connection lives past the hint', async () => {
  // --idle-timeout 2: the server says timeout=1, so a client drops the connection a second
  // before the server would (a server close races the client's next request on it)
  const body = JSON.stringify({ model: 'stories', prompt: 'Once upon a time', max_tokens: 2, temperature: 0 });
  const one = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  const u = new URL(srv.url);
  const sock = net.connect(Number(u.port), u.hostname);
  let buf = '';
  let closedAt = 0;
  sock.on('data', (d) => { buf += d.toString('latin1'); });
  sock.on('close', () => { closedAt = Date.now(); });
  sock.on('error', () => {});
  await new Promise((r) => sock.on('connect', r));
  sock.write(one);
  const t0 = Date.now();
  while (!/"choices"/.test(buf) && Date.now() - t0 < 8000) await sleep(20);
  const m = buf.match(/\r\nKeep-Alive: timeout=(\d+)\r\n/i);
  assert.ok(m, `no Keep-Alive header in ${JSON.stringify(buf.slice(0, 300))}`);
  assert.equal(Number(m[1]), 1);
  const answered = Date.now();
  await sleep(1300); // past the hint, before the deadline: the connection still serves
  assert.equal(closedAt, 0, 'the server closed the connection before its idle deadline');
  buf = '';
  sock.write(one);
  const t1 = Date.now();
  while (!/"choices"/.test(buf) && Date.now() - t1 < 8000) await sleep(20);
  assert.match(buf, /^HTTP\/1\.1 200/);
  while (!closedAt && Date.now() - answered < 8000) await sleep(50);
  assert.ok(closedAt > 0, 'the idle connection was never closed');
  sock.destroy();
});
