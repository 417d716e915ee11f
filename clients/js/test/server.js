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

async function startOnce(env) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const childEnv = { ...process.env, ...env };
  if (!env.DLOCK_AUTH_TOKEN) delete childEnv.DLOCK_AUTH_TOKEN;
  const proc = spawn(dlockBin(), ['serve', '--addr', `127.0.0.1:${port}`], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
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
      const r = await fetch(url + '/health', { signal: AbortSignal.timeout(2000) });
      if (r.ok && (await r.json()).status === 'ok') return { url, stop, pid: proc.pid };
    } catch {
      // not listening yet
    }
    await sleep(50); // poll interval of a deadline-bounded wait
  }
  await stop();
  throw new Error(`dlock serve not healthy within 60s: ${out.slice(-2000)}`);
}

/** Starts a server; the port may be taken between probe and bind, so up to 3 tries. */
export async function startServer(env = {}) {
  for (let i = 0; ; i++) {
    try {
      return await startOnce(env);
    } catch (e) {
      if (i === 2) throw e;
    }
  }
}
