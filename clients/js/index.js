// Client of the /v1 lease API of `dlock serve` (see docs/http.md).
// No dependencies: Node's global fetch, AbortController and Web Crypto; with
// TLS options (a private CA, a client certificate), Node's https module.

export const DEFAULT_URL = 'http://127.0.0.1:3009';

// The server waits at most this long in one acquire (waitMs ≤ 300000).
const MAX_SERVER_WAIT_MS = 300_000;
// A lease counts as valid for ttl * (1 - DRIFT) - 2 ms from the start of the
// request that granted or renewed it, as the Go library counts it.
const DRIFT = 0.01;

/** A fresh lease token: 128 bits from the platform's CSPRNG, in hex. */
export function newToken() {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// Every character but letters, digits, '-' and '_' is escaped (see also
// checkName for "." and "..").
function quoteName(name) {
  return encodeURIComponent(name).replace(/[.!'()*~]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

// --- errors -------------------------------------------------------------------

/** An error answer of the server, or a failure to reach it. */
export class DlockError extends Error {
  constructor(status, error, message, { field, body, cause } = {}) {
    super(status ? `dlock: ${status} ${error}: ${message}` : `dlock: ${error}: ${message}`, cause ? { cause } : undefined);
    this.name = new.target.name;
    this.status = status;
    this.error = error;
    this.field = field;
    this.body = body ?? {};
    this.detail = message;
  }
}

/** 400 (bad input; `field` names it), 413, or a name refused before sending. */
export class BadRequestError extends DlockError {}
/** 401 unauthorized. */
export class UnauthorizedError extends DlockError {}
/** 403: a scoped token may not do this (`out of scope`, `read only`, `forbidden`). */
export class ForbiddenError extends DlockError {
  /** The multi-lock name found outside the token's scope (the body's `name`), else undefined. */
  get lockName() {
    return typeof this.body.name === 'string' ? this.body.name : undefined;
  }
}
/** 429: a scoped token over its limit (`rate limited`, `too many holds`); `retryAfterMs`. */
export class RateLimitedError extends DlockError {
  constructor(status, error, message, { retryAfterMs, ...rest }) {
    super(status, error, message, rest);
    this.retryAfterMs = retryAfterMs;
  }
  /** When to try again, in seconds. */
  get retryAfter() {
    return this.retryAfterMs / 1000;
  }
}
/** 409 locked: `retryAfterMs` (holder's remaining lease time), `heldMode`. */
export class LockedError extends DlockError {
  constructor(status, error, message, { retryAfterMs, heldMode, ...rest }) {
    super(status, error, message, rest);
    this.retryAfterMs = retryAfterMs;
    this.heldMode = heldMode;
  }
  /** The holder's remaining lease time, in seconds. */
  get retryAfter() {
    return this.retryAfterMs / 1000;
  }
}
/** 409 upgrade: a read holder asked for the write lock. */
export class UpgradeError extends DlockError {}
/** 410 lease lost, or (status 0) renewal not confirmed before the lease ran out. */
export class LeaseLostError extends DlockError {}
/** 503: `retryAfterMs` from Retry-After, or undefined. */
export class UnavailableError extends DlockError {
  constructor(status, error, message, { retryAfterMs, ...rest }) {
    super(status, error, message, rest);
    this.retryAfterMs = retryAfterMs;
  }
}
/** No answer, or not the server's JSON. `token` is set when an acquire's outcome is unknown. */
export class TransportError extends DlockError {
  constructor(status, message, { token, cause } = {}) {
    super(status, 'transport', message, { cause });
    this.token = token;
  }
}

function toError(status, doc, retryAfterHeader) {
  const code = (typeof doc.error === 'string' && doc.error) || `http ${status}`;
  const message = (typeof doc.message === 'string' && doc.message) || code;
  const field = typeof doc.field === 'string' ? doc.field : undefined;
  let headerMs;
  if (retryAfterHeader != null && /^\s*\d+\s*$/.test(retryAfterHeader)) headerMs = Number(retryAfterHeader) * 1000;
  const opts = { field, body: doc };
  switch (status) {
    case 400:
    case 413:
      return new BadRequestError(status, code, message, opts);
    case 401:
      return new UnauthorizedError(status, code, message, opts);
    case 403:
      return new ForbiddenError(status, code, message, opts);
    case 429: {
      const ms = Number.isInteger(doc.retryAfterMs) ? doc.retryAfterMs : headerMs ?? 1000;
      return new RateLimitedError(status, code, message, { ...opts, retryAfterMs: ms });
    }
    case 409: {
      if (code === 'upgrade') return new UpgradeError(status, code, message, opts);
      const ms = Number.isInteger(doc.retryAfterMs) ? doc.retryAfterMs : headerMs ?? 0;
      return new LockedError(status, code, message, { ...opts, retryAfterMs: ms, heldMode: doc.heldMode ?? '' });
    }
    case 410:
      return new LeaseLostError(status, code, message, opts);
    case 503:
      return new UnavailableError(status, code, message, {
        ...opts,
        retryAfterMs: headerMs ?? (Number.isInteger(doc.retryAfterMs) ? doc.retryAfterMs : undefined),
      });
    default:
      return new DlockError(status, code, message, opts);
  }
}

function retryDelayMs(err, attempt) {
  if (err.retryAfterMs > 0) return err.retryAfterMs;
  const cap = Math.min(1000, 50 * 2 ** (attempt - 1));
  return cap / 2 + Math.random() * (cap / 2);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(signal.reason);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

const validUntil = (start, ttlMs) => start + ttlMs * (1 - DRIFT) - 2;

// --- lease ----------------------------------------------------------------------

/** A lease granted by Client.acquire. */
export class Lease {
  #client;
  constructor(client, { name, token, fence, ttlMs, mode, count, validUntil, maxHoldUntil }) {
    this.#client = client;
    this.name = name;
    this.fence = fence;
    this.ttlMs = ttlMs;
    this.mode = mode;
    this.count = count;
    this.validUntil = validUntil;
    this.maxHoldUntil = maxHoldUntil;
    this.renewals = 0;
    // The capability to extend and release: kept out of JSON.stringify and inspection.
    Object.defineProperty(this, 'token', { value: token, enumerable: false });
  }
  extend(opts) {
    return this.#client.extend(this, opts);
  }
  release() {
    return this.#client.release(this);
  }
}

// --- client ---------------------------------------------------------------------

export class Client {
  #auth;
  #fetch;

  constructor({ url, authToken, timeoutMs = 10_000, retries = 3, fetch, tls, agent } = {}) {
    const env = globalThis.process?.env ?? {};
    const base = url ?? (env.DLOCK_SERVER || DEFAULT_URL);
    let u;
    try {
      u = new URL(base);
    } catch {
      throw new TypeError(`dlock: url ${JSON.stringify(base)} must be an http:// or https:// URL`);
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !u.host) {
      throw new TypeError(`dlock: url ${JSON.stringify(base)} must be an http:// or https:// URL`);
    }
    if (!(timeoutMs > 0)) throw new RangeError('dlock: timeoutMs must be positive');
    if (!(Number.isInteger(retries) && retries >= 0)) throw new RangeError('dlock: retries must be a non-negative integer');
    this.url = base.replace(/\/+$/, '');
    this.#auth = authToken ?? (env.DLOCK_AUTH_TOKEN || undefined);
    this.timeoutMs = timeoutMs;
    this.retries = retries;
    const files = { ca: env.DLOCK_CA_FILE, cert: env.DLOCK_CERT, key: env.DLOCK_KEY };
    const fromEnv = !tls && !agent && !fetch && (files.ca || files.cert || files.key) && u.protocol === 'https:';
    if ((tls || agent) && u.protocol !== 'https:') throw new TypeError('dlock: tls and agent need an https:// url');
    if (tls && agent) throw new TypeError('dlock: give tls or agent, not both');
    if ((tls || agent) && fetch) throw new TypeError('dlock: tls and agent replace fetch; give one of them');
    this.#fetch = fetch ?? (tls || agent || fromEnv ? httpsFetch(agent, tls, fromEnv ? files : undefined) : globalThis.fetch);
  }

  // One request: the JSON body of a 2xx, or the error of any other answer.
  async #send(method, path, body, timeoutMs, signal) {
    const headers = { accept: 'application/json', 'user-agent': 'dlock-client-js' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.#auth) headers.authorization = `Bearer ${this.#auth}`;
    const timeout = AbortSignal.timeout(Math.ceil(timeoutMs));
    const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
    let res, text;
    try {
      res = await this.#fetch(this.url + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        redirect: 'manual',
        signal: sig,
      });
      text = await res.text();
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      let why = timeout.aborted ? `no answer within ${timeoutMs} ms` : e?.cause?.message ?? e?.message ?? String(e);
      const code = e?.cause?.code ?? e?.code;
      if (!timeout.aborted && typeof code === 'string' && !why.includes(code)) why += ` (${code})`;
      throw new TransportError(0, `${method} ${path}: ${why}`, { cause: e });
    }
    let doc;
    try {
      doc = text ? JSON.parse(text) : {};
    } catch {
      doc = undefined;
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
      throw new TransportError(res.status, `${method} ${path}: HTTP ${res.status} with a body that is not a JSON object`);
    }
    if (res.status >= 200 && res.status < 300) return doc;
    throw toError(res.status, doc, res.headers.get('retry-after'));
  }

  // #send, sent again after a network error or a 503 up to `retries` times.
  async #call(method, path, body, { timeoutMs, retries, signal } = {}) {
    const n = retries ?? this.retries;
    for (let attempt = 0; ; ) {
      try {
        return await this.#send(method, path, body, timeoutMs ?? this.timeoutMs, signal);
      } catch (e) {
        if (!(e instanceof TransportError || e instanceof UnavailableError) || attempt >= n) throw e;
        attempt++;
        await sleep(retryDelayMs(e, attempt), signal);
      }
    }
  }

  /**
   * Takes a lease on the lock `name`. See index.d.ts for the options and errors.
   */
  async acquire(name, { ttlMs = 30_000, waitMs = 0, mode = 'exclusive', limit, fair, owner, data, token, minHoldMs, maxHoldMs, signal } = {}) {
    checkName(name);
    const tok = token ?? newToken();
    const body = { ttlMs, mode, token: tok };
    if (limit !== undefined) body.limit = limit;
    if (fair) body.fair = true;
    if (owner !== undefined) body.owner = owner;
    if (data !== undefined) body.data = data;
    if (minHoldMs !== undefined) body.minHoldMs = minHoldMs;
    if (maxHoldMs !== undefined) body.maxHoldMs = maxHoldMs;
    const path = `/v1/locks/${quoteName(name)}/acquire`;
    const deadline = performance.now() + Math.max(0, Number(waitMs) || 0);
    let failures = 0;
    for (;;) {
      const left = Math.max(0, Math.round(deadline - performance.now()));
      // A wait that is not a number in range goes to the server as it is, for its 400.
      body.waitMs = typeof waitMs === 'number' && waitMs >= 0 ? Math.min(left, MAX_SERVER_WAIT_MS) : waitMs;
      const start = performance.now();
      const asked = typeof body.waitMs === 'number' ? body.waitMs : 0;
      try {
        const doc = await this.#send('POST', path, body, this.timeoutMs + asked, signal);
        const lease = this.#lease(name, doc, start, tok);
        // Counted from before the request: never later than the server's count.
        if (typeof maxHoldMs === 'number') lease.maxHoldUntil = start + maxHoldMs;
        return lease;
      } catch (e) {
        if (e instanceof LockedError) {
          const rest = deadline - performance.now();
          if (rest <= 0) throw e;
          // The server answered before waiting what it was asked.
          if (performance.now() - start < asked) await sleep(Math.min(e.retryAfterMs, rest), signal);
          continue;
        }
        if (e instanceof TransportError || e instanceof UnavailableError) {
          failures++;
          if (failures > this.retries) {
            if (e instanceof TransportError) e.token = tok;
            throw e;
          }
          await sleep(retryDelayMs(e, failures), signal);
          continue;
        }
        throw e;
      }
    }
  }

  #lease(name, doc, start, token) {
    if (!Number.isFinite(doc.fence) || !Number.isFinite(doc.ttlMs)) {
      throw new TransportError(200, `acquire ${JSON.stringify(name)}: unexpected answer ${JSON.stringify(doc)}`);
    }
    return new Lease(this, {
      name: doc.name ?? name,
      token: doc.token ?? token,
      fence: doc.fence,
      ttlMs: doc.ttlMs,
      mode: doc.mode ?? '',
      count: doc.count ?? 1,
      validUntil: validUntil(start, doc.ttlMs),
    });
  }

  /** Renews `lease`; resolves to the validity the server now counts, in ms. */
  async extend(lease, { ttlMs, retries, signal } = {}) {
    const body = { token: lease.token, ttlMs: ttlMs ?? lease.ttlMs };
    if (lease.mode && lease.mode !== 'mutex') body.mode = lease.mode;
    const start = performance.now();
    let timeoutMs = this.timeoutMs;
    if (retries === 0) timeoutMs = Math.max(50, Math.min(timeoutMs, lease.validUntil - start));
    const doc = await this.#call('POST', `/v1/locks/${quoteName(lease.name)}/extend`, body, { timeoutMs, retries, signal });
    const got = Number.isFinite(doc.ttlMs) ? doc.ttlMs : body.ttlMs;
    lease.ttlMs = body.ttlMs;
    lease.validUntil = validUntil(start, got);
    lease.renewals++;
    return got;
  }

  /** Gives `lease` up. A retry after a lost answer that finds it not held resolves. */
  async release(lease) {
    const body = { token: lease.token };
    if (lease.mode && lease.mode !== 'mutex') body.mode = lease.mode;
    const path = `/v1/locks/${quoteName(lease.name)}/release`;
    for (let failures = 0; ; ) {
      try {
        await this.#send('POST', path, body, this.timeoutMs);
        break;
      } catch (e) {
        if (e instanceof LeaseLostError && failures > 0) break;
        if (!(e instanceof TransportError || e instanceof UnavailableError)) throw e;
        failures++;
        if (failures > this.retries) throw e;
        await sleep(retryDelayMs(e, failures));
      }
    }
    lease.validUntil = 0;
  }

  async state(name) {
    checkName(name);
    return this.#call('GET', `/v1/locks/${quoteName(name)}`);
  }

  /** The live holds of `name` (its state's `owners`): one per hold; [] when free. */
  async owners(name) {
    const st = await this.state(name);
    return Array.isArray(st.owners) ? st.owners : [];
  }

  async locks() {
    const doc = await this.#call('GET', '/v1/locks');
    return Array.isArray(doc.locks) ? doc.locks : [];
  }

  /**
   * Ends every hold of `name` (an operator's force-release; admin access with
   * an auth file). Never sent again: a second one could end a hold granted
   * after the first.
   */
  async forceRelease(name) {
    checkName(name);
    const doc = await this.#call('POST', `/v1/locks/${quoteName(name)}/force-release`, {}, { retries: 0 });
    return { name: doc.name ?? name, by: doc.by ?? '', ended: Array.isArray(doc.ended) ? doc.ended : [] };
  }

  async health() {
    return this.#call('GET', '/health', undefined, { retries: 0 });
  }

  /**
   * Runs `routine(signal, lease)` holding the lock `name`, renewing the
   * lease every ttlMs/3; `signal` is aborted (reason: a LeaseLostError)
   * when the lease is lost. See index.d.ts for exactly what happens.
   */
  async using(name, opts, routine) {
    if (typeof opts === 'function') [opts, routine] = [{}, opts];
    if (typeof routine !== 'function') throw new TypeError('dlock: using needs a routine');
    const { onLost, ...acquireOpts } = opts ?? {};
    const lease = await this.acquire(name, acquireOpts);
    const ctl = new AbortController();
    const renewer = new Renewer(this, lease, (err) => {
      if (ctl.signal.aborted) return;
      ctl.abort(err);
      if (onLost) {
        try {
          onLost(err);
        } catch {
          // ignored, as documented
        }
      }
    });
    let result, failed = false, failure;
    try {
      result = await routine(ctl.signal, lease);
    } catch (e) {
      failed = true;
      failure = e;
    }
    await renewer.stop();
    if (!ctl.signal.aborted) {
      try {
        await this.release(lease);
      } catch (e) {
        if (e instanceof LeaseLostError) ctl.abort(e);
        else if (!failed) throw e;
      }
    }
    if (ctl.signal.aborted) {
      const lost = ctl.signal.reason;
      if (failed && failure !== lost) lost.cause = failure;
      throw lost;
    }
    if (failed) throw failure;
    return result;
  }
}

// Renews a lease every ttl/3 until stopped; calls lose(err) once when lost.
class Renewer {
  #client;
  #lease;
  #lose;
  #timer;
  #inflight = Promise.resolve();
  #stopped = false;
  #ctl = new AbortController();

  constructor(client, lease, lose) {
    this.#client = client;
    this.#lease = lease;
    this.#lose = lose;
    this.ttlMs = lease.ttlMs;
    this.#schedule(this.ttlMs / 3);
  }

  #schedule(ms) {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#inflight = this.#tick();
    }, ms);
  }

  async #tick() {
    const lease = this.#lease;
    if (lease.maxHoldUntil !== undefined && performance.now() >= lease.maxHoldUntil) {
      return this.#lose(new LeaseLostError(0, 'lease lost', `the lease on lock ${JSON.stringify(lease.name)} reached its max hold`));
    }
    try {
      await this.#client.extend(lease, { ttlMs: this.ttlMs, retries: 0, signal: this.#ctl.signal });
    } catch (e) {
      if (this.#stopped) return;
      if (e instanceof LeaseLostError) return this.#lose(e);
      const left = lease.validUntil - performance.now();
      if (left <= 0) {
        return this.#lose(
          new LeaseLostError(0, 'lease lost', `renewal of lock ${JSON.stringify(lease.name)} could not be confirmed before the lease ran out`, { cause: e }),
        );
      }
      return this.#schedule(Math.min(this.ttlMs / 12, left));
    }
    // A max hold caps the validity: renew (or find it lost) when it ends.
    this.#schedule(Math.min(this.ttlMs / 3, Math.max(lease.validUntil - performance.now(), 0)));
  }

  async stop() {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#ctl.abort(new Error('dlock: renewal stopped'));
    await this.#inflight.catch(() => {});
  }
}

// --- TLS ----------------------------------------------------------------------

// A fetch for the client's own requests over node:https with an Agent:
// `agent` as given, or one made of the `tls` options (Node's tls.connect
// options: ca, cert, key, ...) or of the PEM files named by DLOCK_CA_FILE,
// DLOCK_CERT and DLOCK_KEY. Keep-alive; TLS 1.2 at least. It supports
// what #send uses: method, headers, a string body, signal; and answers
// status, headers.get and text().
function httpsFetch(agent, tls, files) {
  let ready;
  const getAgent = async () => {
    const https = await import('node:https');
    if (agent) return { https, agent };
    let opts = tls;
    if (files) {
      const { readFileSync } = await import('node:fs');
      opts = {};
      for (const k of ['ca', 'cert', 'key']) if (files[k]) opts[k] = readFileSync(files[k]);
    }
    if ((opts.cert == null) !== (opts.key == null)) throw new TypeError('dlock: a client cert and its key go together');
    return { https, agent: new https.Agent({ keepAlive: true, minVersion: 'TLSv1.2', ...opts }) };
  };
  return async (url, { method, headers, body, signal }) => {
    ready ??= getAgent();
    const { https, agent: a } = await ready;
    return new Promise((resolve, reject) => {
      const req = https.request(url, { method, headers, agent: a, signal }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode,
            headers: { get: (h) => res.headers[h.toLowerCase()] ?? null },
            text: async () => text,
          });
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  };
}

function checkName(name) {
  if (typeof name !== 'string' || name === '') {
    throw new BadRequestError(400, 'invalid name', 'name must be 1 to 256 bytes', { field: 'name' });
  }
  // The URL standard that fetch follows drops a path segment "." or ".."
  // even when percent-encoded, so these two names cannot be addressed.
  if (name === '.' || name === '..') {
    throw new BadRequestError(400, 'invalid name', 'the names "." and ".." cannot travel in a fetch URL path', { field: 'name' });
  }
}
