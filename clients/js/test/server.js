// A real `dlock serve` (embedded memory store) on a free loopback port for
// the tests. The binary is DLOCK_BIN when set, else built once from the
// checkout. Servers are stopped by PID.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

let built;
export function dlockBin() {
  if (process.env.DLOCK_BIN) return process.env.DLOCK_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), 'dlock-js-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    built = join(dir, 'dlock');
    execFileSync('go', ['build', '-o', built, '.'], {
      cwd: join(repo, 'cmd', 'dlock'),
      env: { ...process.env, GOWORK: 'off' },
      stdio: 'inherit',
    });
  }
  return built;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// GET /health answers {"status":"ok"}; over https with the tls options.
async function healthy(url, tls) {
  if (!tls) {
    const r = await fetch(url + '/health', { signal: AbortSignal.timeout(2000) });
    return r.ok && (await r.json()).status === 'ok';
  }
  const { request } = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = request(url + '/health', { ...tls, timeout: 2000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve(res.statusCode === 200 && JSON.parse(body).status === 'ok'));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

async function startOnce(env, { args = [], tls } = {}) {
  const port = await freePort();
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  const childEnv = { ...process.env, ...env };
  if (!env.DLOCK_AUTH_TOKEN) delete childEnv.DLOCK_AUTH_TOKEN;
  const proc = spawn(dlockBin(), ['serve', '--addr', `127.0.0.1:${port}`, ...args], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  let exited = null;
  const exit = new Promise((r) => proc.once('exit', (code, sig) => r((exited = { code, sig }))));
  const stop = async () => {
    if (exited) return;
    process.kill(proc.pid, 'SIGTERM');
    const t = setTimeout(() => !exited && process.kill(proc.pid, 'SIGKILL'), 30_000);
    await exit;
    clearTimeout(t);
  };
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (exited) throw new Error(`dlock serve exited (${JSON.stringify(exited)}): ${out.slice(-2000)}`);
    try {
      if (await healthy(url, tls)) return { url, stop, pid: proc.pid, output: () => out };
    } catch {
      // not listening yet
    }
    await sleep(50); // poll interval of a deadline-bounded wait
  }
  await stop();
  throw new Error(`dlock serve not healthy within 60s: ${out.slice(-2000)}`);
}

/** Starts a server; the port may be taken between probe and bind, so up to 3 tries. */
export async function startServer(env = {}, opts = {}) {
  for (let i = 0; ; i++) {
    try {
      return await startOnce(env, opts);
    } catch (e) {
      if (i === 2) throw e;
    }
  }
}

let mkcerts;
/**
 * Writes a private CA and certificates into a new directory (Go's
 * crypto/x509, by cmd/dlock/internal/tlstest/mkcerts, whose doc lists the
 * files) and returns its path. The tool is DLOCK_MKCERTS when set, else
 * built once.
 */
export function makeCerts() {
  if (!mkcerts) {
    mkcerts = process.env.DLOCK_MKCERTS;
    if (!mkcerts) {
      const dir = mkdtempSync(join(tmpdir(), 'dlock-js-mkcerts-'));
      process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
      mkcerts = join(dir, 'mkcerts');
      execFileSync('go', ['build', '-o', mkcerts, './internal/tlstest/mkcerts'], {
        cwd: join(repo, 'cmd', 'dlock'),
        env: { ...process.env, GOWORK: 'off' },
        stdio: 'inherit',
      });
    }
  }
  const out = mkdtempSync(join(tmpdir(), 'dlock-js-certs-'));
  process.on('exit', () => rmSync(out, { recursive: true, force: true }));
  execFileSync(mkcerts, [out], { stdio: 'inherit' });
  return out;
}
