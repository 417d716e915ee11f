// The client over HTTPS and mutual TLS with a private CA (see server.js).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:https';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client, ForbiddenError, TransportError, UnauthorizedError } from '../index.js';
import { makeCerts, startServer } from './server.js';

const DEADLINE_MS = 30_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('TLS', () => {
  let dir, pem, srv, msrv, authPath;
  before(async () => {
    dir = makeCerts();
    pem = (f) => readFileSync(join(dir, f));
    const serverArgs = ['--tls-cert', join(dir, 'server.pem'), '--tls-key', join(dir, 'server-key.pem')];
    srv = await startServer({}, { args: serverArgs, tls: { ca: pem('ca.pem') } });
    authPath = join(dir, 'auth.json');
    writeFileSync(
      authPath,
      JSON.stringify({
        tokens: [
          { tenant: 'team-a', identity: 'uri:spiffe://dlock.test/team-a', prefixes: ['js-a/'], access: 'read-write' },
          { tenant: 'ops', identity: 'uri:spiffe://dlock.test/reader', prefixes: [''], access: 'read-only' },
        ],
      }),
    );
    msrv = await startServer(
      {},
      {
        args: [...serverArgs, '--client-ca', join(dir, 'ca.pem'), '--auth-file', authPath],
        tls: { ca: pem('ca.pem'), cert: pem('reader.pem'), key: pem('reader-key.pem') },
      },
    );
  });
  after(async () => {
    await srv?.stop();
    await msrv?.stop();
  });

  test('acquire, extend and release over HTTPS with a private CA', async () => {
    const c = new Client({ url: srv.url, tls: { ca: pem('ca.pem') }, retries: 0 });
    const lease = await c.acquire('js-tls/x', { ttlMs: 30_000 });
    assert.ok(lease.fence > 0);
    assert.ok((await lease.extend({ ttlMs: 60_000 })) >= 59_000);
    await lease.release();
    assert.equal((await c.state('js-tls/x')).held, false);
  });

  test('an https.Agent of your own, and DLOCK_CA_FILE', async () => {
    const agent = new Agent({ ca: pem('ca.pem'), keepAlive: true });
    const c = new Client({ url: srv.url, agent, retries: 0 });
    await (await c.acquire('js-tls/agent')).release();
    agent.destroy();
    process.env.DLOCK_CA_FILE = join(dir, 'ca.pem');
    try {
      const e = new Client({ url: srv.url, retries: 0 });
      await (await e.acquire('js-tls/env')).release();
    } finally {
      delete process.env.DLOCK_CA_FILE;
    }
  });

  test('a wrong CA fails naming the certificate problem', async () => {
    const c = new Client({ url: srv.url, tls: { ca: pem('other-ca.pem') }, retries: 0 });
    await assert.rejects(c.acquire('js-tls/wrong'), (e) => {
      assert.ok(e instanceof TransportError, String(e));
      assert.match(e.message, /unable to verify the first certificate \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)/);
      return true;
    });
    // The global fetch without the CA: the same problem, named.
    const f = new Client({ url: srv.url, retries: 0 });
    await assert.rejects(f.health(), /unable to verify the first certificate \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)/);
  });

  test('fetch users: NODE_EXTRA_CA_CERTS makes the global fetch trust the CA', async () => {
    // A fresh process: Node reads NODE_EXTRA_CA_CERTS at start.
    const script = `import { Client } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const c = new Client({ url: ${JSON.stringify(srv.url)}, retries: 0 });
await (await c.acquire('js-tls/extra-ca')).release();
console.log('ok');`;
    const out = await new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
        env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') },
      });
      let text = '';
      child.stdout.on('data', (d) => (text += d));
      child.stderr.on('data', (d) => (text += d));
      child.on('error', reject);
      child.on('exit', (code) => resolve({ code, text }));
    });
    assert.deepEqual(out, { code: 0, text: 'ok\n' });
  });

  test('tls options need an https url', () => {
    assert.throws(() => new Client({ url: 'http://127.0.0.1:3009', tls: { ca: 'x' } }), /https/);
  });

  test('mutual TLS: identities get their scope and access; no or foreign certificate fails', async () => {
    const as = (who) =>
      new Client({ url: msrv.url, tls: { ca: pem('ca.pem'), cert: pem(`${who}.pem`), key: pem(`${who}-key.pem`) }, retries: 0 });
    const teamA = as('team-a');
    const lease = await teamA.acquire('js-a/x', { ttlMs: 30_000 });
    await lease.extend();
    await assert.rejects(teamA.acquire('js-b/x'), (e) => e instanceof ForbiddenError && e.error === 'out of scope');
    await assert.rejects(as('reader').acquire('js-a/y'), (e) => e instanceof ForbiddenError && e.error === 'read only');
    assert.equal((await as('reader').state('js-a/x')).held, true);
    await lease.release();

    const none = new Client({ url: msrv.url, tls: { ca: pem('ca.pem') }, retries: 0 });
    // The server's alert names the missing certificate, unless (TLS 1.3 ends
    // the client's handshake before the server checks; on a busy machine the
    // request may go out after the server closed) the connection is reset first.
    await assert.rejects(none.locks(), (e) => e instanceof TransportError && /certificate required|ECONNRESET|EPIPE|socket hang up/i.test(e.message));
    await assert.rejects(as('stranger').locks(), (e) => e instanceof TransportError);
  });

  test('a revoked identity is refused after SIGHUP', async () => {
    const teamA = new Client({
      url: msrv.url,
      tls: { ca: pem('ca.pem'), cert: pem('team-a.pem'), key: pem('team-a-key.pem') },
      retries: 0,
    });
    await (await teamA.acquire('js-a/revoked')).release();
    writeFileSync(authPath, JSON.stringify({ tokens: [] }));
    process.kill(msrv.pid, 'SIGHUP');
    const deadline = Date.now() + DEADLINE_MS;
    while (!msrv.output().includes('auth file reloaded')) {
      assert.ok(Date.now() < deadline, msrv.output());
      await sleep(20); // poll interval of a deadline-bounded wait
    }
    await assert.rejects(teamA.acquire('js-a/revoked'), (e) => e instanceof UnauthorizedError && /not in the auth file/.test(e.message));
  });
});
