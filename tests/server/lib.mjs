// lib.mjs - start `xllm serve` for a test on 127.0.0.1 (port 0: the kernel
// picks a free one; the ready line says which), and small HTTP helpers.
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SRC = path.resolve(HERE, '../..');
export const XLLM = process.env.XLLM_BIN || path.join(SRC, 'build/xllm');
export const SANITIZED = !!process.env.XLLM_SANITIZED;

export async function startServer(args, { timeoutMs = 60000 } = {}) {
  const child = spawn(XLLM, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  child.stderr.on('data', (d) => { err += d; });
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${err}`)), timeoutMs);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/xllm serve: listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(t); reject(new Error(`server exited ${code}: ${err}`)); });
  });
  return {
    url, child,
    stderr: () => err,
    // SIGTERM, then the exit status (0 = clean shutdown; ASan reports leaks as non-zero)
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve(child.exitCode);
      child.removeAllListeners('exit');
      child.on('exit', (code, sig) => resolve(code === null ? sig : code));
      child.kill('SIGTERM');
    }),
  };
}

// One raw HTTP exchange on a fresh socket: write `data` (string or Buffer
// pieces), read until the server closes or `ms` pass; returns the status (or 0).
export function rawRequest(url, pieces, { ms = 10000, gapMs = 0 } = {}) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    let buf = '';
    const done = () => { s.destroy(); const m = buf.match(/^HTTP\/1\.[01] (\d{3})/); resolve({ status: m ? Number(m[1]) : 0, text: buf }); };
    const t = setTimeout(done, ms);
    s.on('data', (d) => { buf += d.toString('latin1'); });
    s.on('close', () => { clearTimeout(t); done(); });
    s.on('error', () => {});
    s.on('connect', async () => {
      for (const p of pieces) {
        if (s.destroyed) break;
        s.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
  });
}

export async function metrics(url, key) {
  const r = await fetch(`${url}/metrics`, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  const text = await r.text();
  const get = (name, labels = '') => {
    const re = new RegExp(`^${name}${labels.replace(/[{}"]/g, (c) => '\\' + c)}\\s+(\\S+)$`, 'm');
    const m = text.match(re);
    return m ? Number(m[1]) : NaN;
  };
  return { text, get };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
