// Compiled (never run) by `tsc --noEmit` to check index.d.ts against typical use.
import {
  Client,
  ForbiddenError,
  LeaseLostError,
  LockedError,
  RateLimitedError,
  TransportError,
  newToken,
  type HeldMode,
  type ForceReleased,
  type Holder,
  type Lease,
  type LockState,
} from '../index.js';

async function example(): Promise<number> {
  const client = new Client({ url: 'http://127.0.0.1:3009', authToken: 'x', timeoutMs: 5000, retries: 2 });
  const pem: string = '-----BEGIN CERTIFICATE-----';
  const mtls = new Client({ url: 'https://locks.internal:3009', tls: { ca: pem, cert: pem, key: pem, servername: 'locks' } });
  void mtls;
  const lease: Lease = await client.acquire('orders', { ttlMs: 10_000, waitMs: 5000, token: newToken() });
  const bounded: Lease = await client.acquire('orders', { ttlMs: 10_000, maxHoldMs: 60_000 });
  const until: number | undefined = bounded.maxHoldUntil;
  void until;
  const fence: number = lease.fence;
  const ms: number = await lease.extend({ ttlMs: 20_000 });
  await client.release(lease);
  try {
    await client.acquire('orders', { mode: 'shared', limit: 3 });
  } catch (e) {
    if (e instanceof LockedError) {
      const after: number = e.retryAfterMs + e.retryAfter;
      const held: string = e.heldMode;
      const leader: HeldMode = 'election'; // a leader's hold (POST /v1/elections)
      // @ts-expect-error an election is campaigned for, never acquired
      await client.acquire('orders', { mode: 'election' });
      void leader;
      void after, held;
    } else if (e instanceof RateLimitedError) {
      const wait: number = e.retryAfterMs + e.retryAfter;
      void wait;
    } else if (e instanceof ForbiddenError) {
      const outside: string | undefined = e.lockName;
      const code: string = e.error;
      void outside, code;
    } else if (e instanceof TransportError && e.token !== undefined) {
      await client.acquire('orders', { token: e.token });
    }
  }
  const st: LockState = await client.state('orders');
  const job: Lease = await client.acquire('jobs/nightly', { mode: 'mutex', owner: 'web-1', data: 'build 7', minHoldMs: 60_000 });
  void job;
  const who: Holder[] = await client.owners('orders');
  const first: string = st.owners[0]?.owner ?? who[0]?.owner ?? '';
  const since: number | undefined = who[0]?.since;
  const age: number = who[0]?.ageMs ?? 0;
  const forced: ForceReleased = await client.forceRelease('orders');
  const ended: string[] = forced.ended.map((h) => `${h.owner} ${h.data ?? ''} ${h.fence ?? 0}`);
  void first, since, age, forced.by, ended;
  const n: string = await client.using('orders', { ttlMs: 3000, onLost: (err: LeaseLostError) => void err.status }, async (signal, l) => {
    signal.throwIfAborted();
    return `${l.fence}`;
  });
  const m: number = await client.using('orders', async () => 1);
  return fence + ms + st.fence + n.length + m;
}
void example;
