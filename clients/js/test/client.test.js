// The client against a real `dlock serve` (see server.js).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  BadRequestError,
  Client,
  DlockError,
  ForbiddenError,
  LeaseLostError,
  LockedError,
  RateLimitedError,
  TransportError,
  UnauthorizedError,
  UnavailableError,
  newToken,
} from '../index.js';
import { dlockBin, freePort, startServer } from './server.js';

const DEADLINE_MS = 30_000; // any awaited event gets this long on a loaded machine
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unique = (t) => `js/${t}/${randomUUID().slice(0, 8)}`;

async function waitFor(cond, what) {
  const deadline = Date.now() + DEADLINE_MS;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${DEADLINE_MS} ms waiting for ${what}`);
    await sleep(20); // poll interval
  }
}

// POST behind the client's back; resolves to the status.
async function rawPost(url, path, body) {
  const r = await fetch(url + path, { method: 'POST', body: JSON.stringify(body) });
  await r.text();
  return r.status;
}

// A loopback HTTP hop in front of the server that forwards each request,
// then, for the first `faults` ones, loses the reply ('drop': destroys the
// connection) or replaces it with a 503 ('503'), as a balancer that lost
// its backend would; or ('nowait') forwards them with waitMs 0, as a server
// that cut the wait short. Real requests reach the real server.
async function faultProxy(upstream, faults, kind) {
  const p = { forwarded: [], replies: [], times: [], faults };
  const srv = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    p.times.push(performance.now());
    let body = Buffer.concat(chunks).toString();
    if (req.method === 'POST') p.forwarded.push(JSON.parse(body));
    if (kind === 'nowait' && p.faults > 0) {
      p.faults--;
      body = JSON.stringify({ ...JSON.parse(body), waitMs: 0 });
    }
    const r = await fetch(upstream + req.url, { method: req.method, body: req.method === 'POST' ? body : undefined });
    let data = await r.text();
    let status = r.status;
    p.replies.push(JSON.parse(data));
    if (p.faults > 0 && kind !== 'nowait') {
      p.faults--;
      if (kind === 'drop') return req.socket.destroy();
      status = 503;
      data = '{"error":"store unavailable","message":"injected by the test proxy"}';
    }
    res.writeHead(status, { 'content-type': 'application/json' }).end(data);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  p.url = `http://127.0.0.1:${srv.address().port}`;
  p.close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return p;
}

describe('dlock client', () => {
  let server, auth, c;
  before(async () => {
    [server, auth] = await Promise.all([startServer(), startServer({ DLOCK_AUTH_TOKEN: 's3cret-token' })]);
    c = new Client({ url: server.url });
  });
  after(async () => {
    await Promise.all([server?.stop(), auth?.stop()]);
  });

  test('acquire and release', async () => {
    const name = unique('acquire');
    const lease = await c.acquire(name, { ttlMs: 10_000 });
    assert.equal(lease.name, name);
    assert.equal(lease.mode, 'mutex');
    assert.ok(lease.fence > 0);
    assert.match(lease.token, /^[0-9a-f]{32}$/);
    assert.ok(!JSON.stringify(lease).includes(lease.token), 'token out of JSON');
    const st = await c.state(name);
    assert.deepEqual([st.held, st.fence, 'token' in st], [true, lease.fence, false]);
    assert.ok((await c.locks()).some((s) => s.name === name));
    await lease.release();
    assert.equal((await c.state(name)).held, false);
  });

  test('fences increase', async () => {
    const name = unique('fence');
    const fences = [];
    for (let i = 0; i < 3; i++) {
      const l = await c.acquire(name, { ttlMs: 5000 });
      fences.push(l.fence);
      await l.release();
    }
    assert.ok(fences[0] < fences[1] && fences[1] < fences[2], String(fences));
  });

  test('409 carries retryAfter and the held mode', async () => {
    const name = unique('locked');
    const lease = await c.acquire(name, { ttlMs: 20_000 });
    const e = await c.acquire(name).then(() => assert.fail('acquired a held lock'), (e) => e);
    assert.ok(e instanceof LockedError, String(e));
    assert.deepEqual([e.status, e.error, e.heldMode], [409, 'locked', 'mutex']);
    assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 20_000, String(e.retryAfterMs));
    assert.equal(e.retryAfter, e.retryAfterMs / 1000);
    await assert.rejects(c.acquire(name, { mode: 'shared' }), (e) => e instanceof LockedError && e.heldMode === 'mutex');
    await lease.release();
  });

  test('a waiting acquire runs out with 409', async () => {
    const name = unique('waitout');
    const lease = await c.acquire(name, { ttlMs: 20_000 });
    const start = performance.now();
    await assert.rejects(c.acquire(name, { waitMs: 300 }), LockedError);
    assert.ok(performance.now() - start >= 300, 'it did wait');
    await lease.release();
  });

  test('a waiting acquire gets the released lock', async () => {
    const name = unique('waiter');
    const first = await c.acquire(name, { ttlMs: 20_000 });
    const waiting = c.acquire(name, { waitMs: DEADLINE_MS, ttlMs: 5000 });
    await first.release(); // before or after the waiter asked: either way it gets the lock
    const got = await waiting;
    assert.ok(got.fence > first.fence);
    await got.release();
  });

  test('an aborted waiting acquire rejects with the reason', async () => {
    const name = unique('abort');
    const lease = await c.acquire(name, { ttlMs: 20_000 });
    const ctl = new AbortController();
    const waiting = c.acquire(name, { waitMs: DEADLINE_MS, signal: ctl.signal });
    ctl.abort(new Error('gave up'));
    await assert.rejects(waiting, /gave up/);
    await lease.release();
  });

  test('the same token is idempotent', async () => {
    const name = unique('token');
    const token = newToken();
    const a = await c.acquire(name, { ttlMs: 10_000, token });
    const b = await c.acquire(name, { ttlMs: 10_000, token });
    assert.deepEqual([b.token, b.fence], [token, a.fence]);
    assert.equal((await c.state(name)).holders, 1);
    await assert.rejects(c.acquire(name, { token: newToken() }), LockedError);
    await b.release();
    await assert.rejects(a.release(), LeaseLostError);
  });

  test('extend', async () => {
    const name = unique('extend');
    const lease = await c.acquire(name, { ttlMs: 1000 });
    const got = await lease.extend({ ttlMs: 20_000 });
    assert.ok(got > 1000 && got <= 20_000, String(got));
    assert.ok((await c.state(name)).ttlMs > 1000);
    assert.deepEqual([lease.ttlMs, lease.renewals], [20_000, 1]);
    await lease.release();
  });

  test('maxHoldMs caps every extend, then 410', async () => {
    const name = unique('maxhold');
    const lease = await c.acquire(name, { ttlMs: 60_000, maxHoldMs: 1500 });
    const granted = performance.now(); // the server counts the max hold from before this
    assert.equal(lease.ttlMs, 1500, 'the grant asks for no more than the max hold');
    assert.ok(lease.maxHoldUntil <= granted + 1500);
    let extends_ = 0;
    for (;;) {
      const sent = performance.now();
      let got;
      try {
        got = await lease.extend({ ttlMs: 60_000 });
      } catch (e) {
        assert.ok(e instanceof LeaseLostError && e.status === 410 && e.detail.includes('maxHoldMs'), String(e));
        break;
      }
      extends_++;
      // Capped: the server's count ends by the grant plus the max hold.
      assert.ok(sent + got - 1 <= granted + 1500, `extend ${extends_} got ${got}`);
      assert.ok(performance.now() < granted + DEADLINE_MS, 'still extendable long after the max hold');
      await sleep(20); // pacing
    }
    assert.ok(extends_ > 0);
    const deadline = Date.now() + DEADLINE_MS;
    while ((await c.state(name)).held) {
      assert.ok(Date.now() < deadline, 'the name still held long after the max hold');
      await sleep(20); // poll interval
    }
  });

  test('using stops renewing at maxHoldMs and aborts', async () => {
    const name = unique('maxhold-using');
    const seen = [];
    let aborted;
    const e = await c
      .using(name, { ttlMs: 600, maxHoldMs: 1500, onLost: (err) => seen.push(err) }, async (signal) => {
        // A routine that hangs: the renewal stops at the max hold.
        aborted = await new Promise((resolve) => {
          const t = setTimeout(() => resolve(false), DEADLINE_MS);
          signal.addEventListener('abort', () => { clearTimeout(t); resolve(true); }, { once: true });
        });
      })
      .then(() => assert.fail('using resolved past its max hold'), (e) => e);
    assert.equal(aborted, true, 'max hold not signalled');
    assert.ok(e instanceof LeaseLostError && /max ?hold/i.test(e.message), String(e));
    assert.deepEqual(seen, [e]);
  });

  test('410 after release', async () => {
    const lease = await c.acquire(unique('gone'), { ttlMs: 10_000 });
    await lease.release();
    for (const op of [() => lease.extend(), () => lease.release()]) {
      await assert.rejects(op(), (e) => e instanceof LeaseLostError && e.status === 410 && e.error === 'lease lost');
    }
  });

  test('bad input is a BadRequestError naming the field', async () => {
    const name = unique('bad');
    const cases = [
      [{ ttlMs: 10 }, 'ttlMs'],
      [{ ttlMs: 100_000_000 }, 'ttlMs'],
      [{ ttlMs: 'soon' }, 'ttlMs'],
      [{ waitMs: -1 }, 'waitMs'],
      [{ mode: 'bogus' }, 'mode'],
      [{ token: 'not-hex' }, 'token'],
      [{ limit: 3 }, 'limit'],
      [{ mode: 'shared', limit: 0 }, 'limit'],
      [{ fair: true, owner: 'o'.repeat(257) }, 'owner'],
      [{ maxHoldMs: 50 }, 'maxHoldMs'],
    ];
    for (const [opts, field] of cases) {
      const e = await c.acquire(name, opts).then(() => assert.fail(JSON.stringify(opts)), (e) => e);
      assert.ok(e instanceof BadRequestError, `${JSON.stringify(opts)}: ${e}`);
      assert.deepEqual([e.status, e.field], [400, field], JSON.stringify(opts));
      assert.ok(e.error.startsWith('invalid ') && e.detail);
    }
    for (const bad of ['', 'a\u0000b', 'x'.repeat(257), '.', '..']) {
      await assert.rejects(c.acquire(bad), (e) => e instanceof BadRequestError && e.field === 'name');
    }
    assert.equal((await c.state(name)).held, false, 'nothing left behind');
  });

  test('names are escaped', async () => {
    for (const n of [unique('esc') + "/a b?c#d%e.!'()*~", unique('esc') + '/é', '...', '.a', '%2E']) {
      const lease = await c.acquire(n, { ttlMs: 5000 });
      assert.equal(lease.name, n);
      assert.equal((await c.state(n)).held, true);
      await lease.release();
    }
  });

  test('shared modes', async () => {
    const name = unique('shared');
    const r1 = await c.acquire(name, { mode: 'shared', ttlMs: 10_000 });
    const r2 = await c.acquire(name, { mode: 'shared', ttlMs: 10_000 });
    assert.deepEqual([r1.mode, r2.mode], ['read', 'read']);
    await assert.rejects(c.acquire(name), (e) => e instanceof LockedError && e.heldMode === 'read');
    assert.ok((await r2.extend()) > 0);
    await r1.release();
    await r2.release();
    const sem = name + '/sem';
    const permits = [await c.acquire(sem, { mode: 'shared', limit: 2 }), await c.acquire(sem, { mode: 'shared', limit: 2 })];
    await assert.rejects(c.acquire(sem, { mode: 'shared', limit: 2 }), (e) => e instanceof LockedError && e.heldMode === 'semaphore');
    for (const p of permits) await p.release();
  });

  test('bearer auth', async () => {
    const name = unique('auth');
    for (const authToken of ['', 'wrong']) {
      await assert.rejects(
        new Client({ url: auth.url, authToken }).acquire(name),
        (e) => e instanceof UnauthorizedError && e.status === 401 && e.error === 'unauthorized',
      );
    }
    assert.equal((await new Client({ url: auth.url, authToken: '' }).health()).status, 'ok');
    const lease = await new Client({ url: auth.url, authToken: 's3cret-token' }).acquire(name, { ttlMs: 5000 });
    await lease.extend();
    await lease.release();
  });

  test('an unreachable server is a TransportError carrying the token', async () => {
    const dead = new Client({ url: `http://127.0.0.1:${await freePort()}`, retries: 1 });
    const e = await dead.acquire('x').then(() => assert.fail('acquired'), (e) => e);
    assert.ok(e instanceof TransportError && e.status === 0 && /^[0-9a-f]{32}$/.test(e.token), String(e));
  });

  for (const kind of ['drop', '503']) {
    test(`a retry after a lost reply (${kind}) keeps one lease`, async () => {
      const name = unique('retry');
      const proxy = await faultProxy(server.url, 2, kind);
      try {
        const lease = await new Client({ url: proxy.url, retries: 3 }).acquire(name, { ttlMs: 10_000 });
        assert.equal(proxy.forwarded.length, 3);
        assert.deepEqual(new Set(proxy.forwarded.map((b) => b.token)), new Set([lease.token]));
        const st = await c.state(name);
        assert.deepEqual([st.holders, st.fence], [1, lease.fence]);
        await c.release(lease);
      } finally {
        await proxy.close();
      }
    });
  }

  test('a waiting acquire honours Retry-After of an early 409', async () => {
    const name = unique('honour');
    const holder = await c.acquire(name, { ttlMs: 1000 }); // never released: it expires
    const proxy = await faultProxy(server.url, 1, 'nowait');
    try {
      const lease = await new Client({ url: proxy.url }).acquire(name, { waitMs: DEADLINE_MS, ttlMs: 5000 });
      assert.ok(lease.fence > holder.fence);
      assert.equal(proxy.forwarded.length, 2, JSON.stringify(proxy.replies));
      const first = proxy.replies[0];
      assert.ok(first.error === 'locked' && first.retryAfterMs > 0, JSON.stringify(first));
      // The 409 came before the asked wait: the next try waited Retry-After
      // (less 2 ms: Node timers may fire up to a millisecond early).
      assert.ok(proxy.times[1] - proxy.times[0] >= first.retryAfterMs - 2, `${proxy.times[1] - proxy.times[0]} < ${first.retryAfterMs}`);
      await lease.release();
    } finally {
      await proxy.close();
    }
  });

  test('retries spent: the TransportError names the granted token', async () => {
    const name = unique('spent');
    const proxy = await faultProxy(server.url, 1, 'drop');
    try {
      const e = await new Client({ url: proxy.url, retries: 0 }).acquire(name, { ttlMs: 10_000 }).then(() => assert.fail('no fault'), (e) => e);
      assert.ok(e instanceof TransportError && e.token, String(e));
      const lease = await c.acquire(name, { ttlMs: 10_000, token: e.token });
      assert.equal((await c.state(name)).holders, 1);
      await lease.release();
    } finally {
      await proxy.close();
    }
  });

  test('503 after retries is an UnavailableError', async () => {
    const name = unique('unavail');
    const proxy = await faultProxy(server.url, 10, '503');
    try {
      await assert.rejects(
        new Client({ url: proxy.url, retries: 1 }).acquire(name, { ttlMs: 10_000 }),
        (e) => e instanceof UnavailableError && e.status === 503 && e.error === 'store unavailable',
      );
      await (await c.acquire(name, { token: proxy.forwarded[0].token })).release();
    } finally {
      await proxy.close();
    }
  });

  test('a release retried after a lost reply resolves', async () => {
    const name = unique('relretry');
    const lease = await c.acquire(name, { ttlMs: 10_000 });
    const proxy = await faultProxy(server.url, 1, 'drop');
    try {
      await new Client({ url: proxy.url, retries: 2 }).release(lease);
      assert.equal(proxy.forwarded.length, 2);
    } finally {
      await proxy.close();
    }
    assert.equal((await c.state(name)).held, false);
  });

  // --- using ------------------------------------------------------------------

  test('using renews past the TTL', async () => {
    const name = unique('using');
    const ttlMs = 3000; // renewals every 1 s: a loaded machine has slack
    const result = await c.using(name, { ttlMs }, async (signal, lease) => {
      const start = performance.now();
      await waitFor(() => lease.renewals >= 4 || signal.aborted, '4 renewals');
      assert.equal(signal.aborted, false, String(signal.reason));
      assert.ok(performance.now() - start > ttlMs, '4 renewals at ttl/3 outlast the TTL');
      const st = await c.state(name);
      assert.deepEqual([st.held, st.fence], [true, lease.fence]);
      await assert.rejects(c.acquire(name), LockedError);
      return 'done';
    });
    assert.equal(result, 'done');
    assert.equal((await c.state(name)).held, false);
  });

  test('using aborts the signal on loss and rejects', async () => {
    const name = unique('lost');
    const seen = [];
    let aborted;
    const e = await c
      .using(name, { ttlMs: 1000, onLost: (err) => seen.push(err) }, async (signal, lease) => {
        // Someone with the token releases it behind the routine's back.
        assert.equal(await rawPost(server.url, `/v1/locks/${encodeURIComponent(name)}/release`, { token: lease.token }), 200);
        aborted = await new Promise((resolve) => {
          const t = setTimeout(() => resolve(false), DEADLINE_MS);
          signal.addEventListener('abort', () => { clearTimeout(t); resolve(true); }, { once: true });
        });
        return 'finished anyway';
      })
      .then(() => assert.fail('using resolved after a loss'), (e) => e);
    assert.equal(aborted, true, 'loss not signalled');
    assert.ok(e instanceof LeaseLostError && e.status === 410, String(e));
    assert.deepEqual(seen, [e]);
  });

  test('using: loss when renewal cannot be confirmed', async () => {
    const name = unique('unconfirmed');
    const proxy = await faultProxy(server.url, 0, 'drop');
    const e = await new Client({ url: proxy.url, retries: 0 })
      .using(name, { ttlMs: 1000 }, async (signal, lease) => {
        await proxy.close(); // the server is unreachable from now on
        await waitFor(() => signal.aborted, 'abort');
        assert.ok(performance.now() >= lease.validUntil);
      })
      .then(() => assert.fail('resolved'), (e) => e);
    assert.ok(e instanceof LeaseLostError && e.status === 0 && e.cause instanceof TransportError, String(e));
  });

  test('using: the routine error is the cause of the loss', async () => {
    const name = unique('lostcause');
    const e = await c
      .using(name, { ttlMs: 1000 }, async (signal, lease) => {
        await rawPost(server.url, `/v1/locks/${encodeURIComponent(name)}/release`, { token: lease.token });
        await waitFor(() => signal.aborted, 'abort');
        signal.throwIfAborted();
      })
      .then(() => assert.fail('resolved'), (e) => e);
    assert.ok(e instanceof LeaseLostError);
    const e2 = await c
      .using(name, { ttlMs: 1000 }, async (signal, lease) => {
        await rawPost(server.url, `/v1/locks/${encodeURIComponent(name)}/release`, { token: lease.token });
        await waitFor(() => signal.aborted, 'abort');
        throw new RangeError('work failed');
      })
      .then(() => assert.fail('resolved'), (e) => e);
    assert.ok(e2 instanceof LeaseLostError && e2.cause instanceof RangeError, String(e2));
  });

  test('using releases after a routine error and passes it on', async () => {
    const name = unique('usingerr');
    await assert.rejects(c.using(name, async () => { throw new SyntaxError('boom'); }), SyntaxError);
    assert.equal((await c.state(name)).held, false);
  });

  test('using on a held lock rejects without running the routine', async () => {
    const name = unique('usingheld');
    const lease = await c.acquire(name, { ttlMs: 10_000 });
    let ran = false;
    await assert.rejects(c.using(name, {}, () => { ran = true; }), LockedError);
    assert.equal(ran, false);
    await lease.release();
  });

  test('errors and options', () => {
    for (const cls of [
      BadRequestError,
      ForbiddenError,
      LeaseLostError,
      LockedError,
      RateLimitedError,
      TransportError,
      UnauthorizedError,
      UnavailableError,
    ]) {
      assert.ok(new cls(400, 'x', 'y', {}) instanceof DlockError);
    }
    for (const opts of [{ url: 'ftp://x' }, { url: 'nohost' }, { timeoutMs: 0 }, { retries: -1 }]) {
      assert.throws(() => new Client(opts), /dlock:/);
    }
  });
});

// A server with an auth file (docs/operations.md), its hashes made by
// `dlock auth hash`: team-a may hold two locks under js-a/, the reader reads
// everything, slow may acquire once in 1000 s under js-s/.
describe('scoped tokens', () => {
  const teamA = 'js-team-a-' + randomUUID();
  const reader = 'js-reader-' + randomUUID();
  const slow = 'js-slow-' + randomUUID();
  let server, dir;
  before(async () => {
    const sha = (token) => execFileSync(dlockBin(), ['auth', 'hash'], { input: token }).toString().trim();
    const tokens = [
      { tenant: 'team-a', sha256: sha(teamA), prefixes: ['js-a/'], access: 'read-write', maxHolds: 2 },
      { tenant: 'ops', sha256: sha(reader), prefixes: [''], access: 'read-only' },
      { tenant: 'slow', sha256: sha(slow), prefixes: ['js-s/'], access: 'read-write', acquiresPerSecond: 0.001 },
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

  test('ForbiddenError: out of scope, read only', async () => {
    const a = new Client({ url: server.url, authToken: teamA });
    for (const call of [() => a.acquire('js-b/x'), () => a.state('js-b/x')]) {
      const e = await call().then(() => assert.fail('allowed'), (e) => e);
      assert.ok(e instanceof ForbiddenError && e instanceof DlockError, String(e));
      assert.deepEqual([e.status, e.error, e.field, e.lockName], [403, 'out of scope', 'name', undefined]);
      assert.match(e.detail, /team-a/);
    }
    const lease = await a.acquire('js-a/forbidden', { ttlMs: 10_000 });
    const r = new Client({ url: server.url, authToken: reader });
    assert.equal((await r.state('js-a/forbidden')).held, true);
    await assert.rejects(r.acquire('js-a/other'), (e) => e instanceof ForbiddenError && e.status === 403 && e.error === 'read only');
    await assert.rejects(r.release(lease), (e) => e instanceof ForbiddenError && e.error === 'read only');
    await lease.release();
    assert.equal((await a.state('js-a/forbidden')).held, false);
  });

  test('RateLimitedError: too many holds, rate limited', async () => {
    const a = new Client({ url: server.url, authToken: teamA });
    const held = [await a.acquire('js-a/holds/0', { ttlMs: 10_000 }), await a.acquire('js-a/holds/1', { ttlMs: 10_000 })];
    let e = await a.acquire('js-a/holds/2', { ttlMs: 10_000 }).then(() => assert.fail('acquired'), (e) => e);
    assert.ok(e instanceof RateLimitedError, String(e));
    assert.deepEqual([e.status, e.error], [429, 'too many holds']);
    assert.ok(e.retryAfterMs >= 1 && e.retryAfter === e.retryAfterMs / 1000, String(e.retryAfterMs));
    await held[0].release();
    await (await a.acquire('js-a/holds/2', { ttlMs: 10_000 })).release();
    await held[1].release();

    const s = new Client({ url: server.url, authToken: slow });
    await (await s.acquire('js-s/1', { ttlMs: 10_000 })).release();
    e = await s.acquire('js-s/2', { ttlMs: 10_000 }).then(() => assert.fail('acquired'), (e) => e);
    assert.ok(e instanceof RateLimitedError, String(e));
    assert.deepEqual([e.status, e.error], [429, 'rate limited']);
    assert.ok(e.retryAfter > 1, String(e.retryAfterMs)); // a new acquire in about 1000 s
    await assert.rejects(
      s.using('js-s/3', async () => assert.fail('must not run')),
      (e) => e instanceof RateLimitedError,
    );
  });
});
