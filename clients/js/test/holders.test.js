// Who holds a lock, a minimum hold and the operator's force-release
// (docs/http.md: owner, data, minHoldMs; owners in state and list;
// force-release), against a real `dlock serve` (see server.js).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, Client, ForbiddenError, LeaseLostError, LockedError } from '../index.js';
import { dlockBin, startServer } from './server.js';

const DEADLINE_MS = 30_000; // any awaited event gets this long on a loaded machine
const unique = (t) => `js/${t}/${randomUUID().slice(0, 8)}`;

describe('holders', () => {
  let server, c;
  before(async () => {
    server = await startServer();
    c = new Client({ url: server.url });
  });
  after(async () => {
    await server?.stop();
  });

  test('owner and data in state, owners and list', async () => {
    const name = unique('owner');
    const lease = await c.acquire(name, { ttlMs: 30_000, mode: 'mutex', owner: 'web-1/4242', data: 'build 7' });
    const st = await c.state(name);
    assert.equal(st.mode, 'mutex');
    assert.equal(st.owners.length, 1, JSON.stringify(st));
    const [h] = await c.owners(name);
    assert.deepEqual([h.owner, h.data, h.fence], ['web-1/4242', 'build 7', lease.fence]);
    assert.ok(Math.abs(h.since - Date.now()) < 60_000, `since ${h.since}`);
    assert.ok(h.ageMs >= 0 && h.ageMs < 60_000, `ageMs ${h.ageMs}`);
    const listed = (await c.locks()).find((s) => s.name === name);
    assert.deepEqual(listed.owners.map((o) => o.owner), ['web-1/4242']);
    assert.ok(!JSON.stringify([st, listed]).includes(lease.token), 'a token in state or list');
    await lease.release();
    assert.deepEqual(await c.owners(name), []);
    assert.deepEqual((await c.state(name)).owners, []);
  });

  test('each shared hold has its owner', async () => {
    const name = unique('shared');
    const r1 = await c.acquire(name, { ttlMs: 30_000, mode: 'read', owner: 'reader-a', data: 'a' });
    const r2 = await c.acquire(name, { ttlMs: 30_000, mode: 'read', owner: 'reader-b' });
    const got = (await c.owners(name)).map((h) => `${h.owner}:${h.data ?? ''}`).sort();
    assert.deepEqual(got, ['reader-a:a', 'reader-b:']);
    await r1.release();
    assert.deepEqual((await c.owners(name)).map((h) => h.owner), ['reader-b']);
    await r2.release();
  });

  test('a bad owner, data or minHoldMs is a BadRequestError naming it', async () => {
    const name = unique('bad');
    for (const [opts, field] of [
      [{ data: 'x'.repeat(1025) }, 'data'],
      [{ mode: 'read', minHoldMs: 1000 }, 'minHoldMs'],
      [{ minHoldMs: -1 }, 'minHoldMs'],
    ]) {
      const e = await c.acquire(name, { ttlMs: 10_000, ...opts }).then(() => assert.fail(`acquired with ${JSON.stringify(opts)}`), (e) => e);
      assert.ok(e instanceof BadRequestError, String(e));
      assert.deepEqual([e.status, e.field], [400, field], String(e));
    }
    assert.equal((await c.state(name)).held, false); // nothing left behind
    const lease = await c.acquire(name, { ttlMs: 10_000, data: 'x'.repeat(1024) });
    assert.equal((await c.owners(name))[0].data, 'x'.repeat(1024));
    await lease.release();
  });

  test('minHoldMs keeps the name after an early release', async () => {
    const name = unique('minhold');
    const start = performance.now();
    const lease = await c.acquire(name, { ttlMs: 30_000, mode: 'mutex', owner: 'job', minHoldMs: 5000 });
    await lease.release(); // resolves, but the name stays held until grant + 5 s
    const st = await c.state(name);
    assert.ok(st.held && st.ttlMs > 0 && st.ttlMs <= 5000, JSON.stringify(st));
    assert.deepEqual(st.owners.map((h) => h.owner), ['job']);
    const e = await c.acquire(name).then(() => assert.fail('acquired within the min hold'), (e) => e);
    assert.ok(e instanceof LockedError && e.retryAfterMs > 0 && e.retryAfterMs <= 5000, String(e));
    // Those checks must have run within the min hold to mean anything.
    assert.ok(performance.now() - start < 5000, 'the checks ran after the min hold had passed');
    // The store's own expiry frees it: a waiting acquire gets it, with a higher fence.
    const next = await c.acquire(name, { ttlMs: 10_000, waitMs: DEADLINE_MS });
    assert.ok(next.fence > lease.fence);
    await next.release();
  });

  test('using passes owner, data and minHoldMs', async () => {
    const name = unique('using');
    await c.using(name, { ttlMs: 10_000, mode: 'mutex', owner: 'cron/nightly', data: 'run 12', minHoldMs: 30_000 }, async (signal, lease) => {
      const [h] = await c.owners(name);
      assert.deepEqual([h.owner, h.data, h.fence], ['cron/nightly', 'run 12', lease.fence]);
    });
    assert.equal((await c.state(name)).held, true); // released, but kept by its min hold
    await c.forceRelease(name);
  });

  test('forceRelease ends every hold, a min hold too, and keeps the fence counter', async () => {
    const name = unique('force');
    const lease = await c.acquire(name, { ttlMs: 60_000, mode: 'mutex', owner: 'stuck/1', minHoldMs: 60_000 });
    const got = await c.forceRelease(name);
    assert.equal(got.name, name);
    assert.deepEqual(got.ended.map((h) => [h.owner, h.fence]), [['stuck/1', lease.fence]]);
    assert.match(got.by, /^127\.0\.0\.1:\d+$/); // no auth file: the client's address
    assert.equal((await c.state(name)).held, false);
    const next = await c.acquire(name, { ttlMs: 10_000 });
    assert.ok(next.fence > lease.fence, `${next.fence} after ${lease.fence}`);
    await assert.rejects(lease.extend(), LeaseLostError); // the forced holder finds out at its next extend
    await next.release();
    assert.deepEqual((await c.forceRelease(name)).ended, []);
  });
});

// An auth file (docs/operations.md): team-a read-write under js-a/, a
// read-only reader, and ops/alice with admin access under js-a/.
describe('force-release with an auth file', () => {
  const teamA = 'js-team-a-' + randomUUID();
  const reader = 'js-reader-' + randomUUID();
  const admin = 'js-admin-' + randomUUID();
  let server, dir;
  before(async () => {
    const sha = (token) => execFileSync(dlockBin(), ['auth', 'hash'], { input: token }).toString().trim();
    const tokens = [
      { tenant: 'team-a', sha256: sha(teamA), prefixes: ['js-a/'], access: 'read-write' },
      { tenant: 'ops', sha256: sha(reader), prefixes: [''], access: 'read-only' },
      { tenant: 'ops', name: 'alice', sha256: sha(admin), prefixes: ['js-a/'], access: 'admin' },
    ];
    dir = mkdtempSync(join(tmpdir(), 'dlock-js-auth-'));
    const file = join(dir, 'auth.json');
    writeFileSync(file, JSON.stringify({ tokens }));
    server = await startServer({ DLOCK_AUTH_FILE: file });
  });
  after(async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('the owner defaults to the credential', async () => {
    const a = new Client({ url: server.url, authToken: teamA });
    const lease = await a.acquire('js-a/default-owner', { ttlMs: 30_000 });
    const [h] = await a.owners('js-a/default-owner');
    assert.match(h.owner, /^team-a\/127\.0\.0\.1:\d+$/); // <tenant>/<client address>: the entry has no name
    await lease.release();
  });

  test('only an admin may force-release, within its prefixes', async () => {
    const a = new Client({ url: server.url, authToken: teamA });
    const lease = await a.acquire('js-a/stuck', { ttlMs: 60_000, mode: 'read', owner: 'reader-1' });
    let e = await a.forceRelease('js-a/stuck').then(() => assert.fail('forced'), (e) => e);
    assert.ok(e instanceof ForbiddenError, String(e));
    assert.deepEqual([e.status, e.error], [403, 'not admin']);
    e = await new Client({ url: server.url, authToken: reader }).forceRelease('js-a/stuck').then(() => assert.fail('forced'), (e) => e);
    assert.ok(e instanceof ForbiddenError && e.status === 403, String(e)); // "read only": that check comes first
    assert.equal((await a.state('js-a/stuck')).held, true);
    const ops = new Client({ url: server.url, authToken: admin });
    await assert.rejects(ops.forceRelease('js-b/x'), (e) => e instanceof ForbiddenError && e.error === 'out of scope');
    const got = await ops.forceRelease('js-a/stuck');
    assert.deepEqual([got.by, got.ended.map((h) => h.owner)], ['ops/alice', ['reader-1']]);
    assert.equal((await a.state('js-a/stuck')).held, false);
    await assert.rejects(lease.release(), LeaseLostError);
  });
});
