// Types of the dlock client (index.js). Hand-written; checked with tsc --noEmit.

/** http://127.0.0.1:3009 */
export declare const DEFAULT_URL: string;

/** A fresh lease token: 128 bits from the platform's CSPRNG, 32 hex characters. */
export declare function newToken(): string;

/** The mode a lock is held in, as the server reports it. */
export type HeldMode = 'mutex' | 'reentrant' | 'read' | 'write' | 'fair' | 'semaphore' | 'election';

/** The JSON body of an error answer (docs/http.md). */
export interface ErrorBody {
  error?: string;
  message?: string;
  field?: string;
  retryAfterMs?: number;
  heldMode?: HeldMode;
  /** On a 409 or 403 to a multi-lock request: the name concerned. */
  name?: string;
  [key: string]: unknown;
}

/** An error answer of the server, or a failure to reach it. */
export declare class DlockError extends Error {
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** The body's short stable code (`locked`, `lease lost`, `invalid ttlMs`, ...), or `transport`. */
  readonly error: string;
  /** The body's `message`, for people (`message` is the whole error text). */
  readonly detail: string;
  /** On a 400: the rejected input. */
  readonly field: string | undefined;
  readonly body: ErrorBody;
}
/** 400 (bad input; `field` names it), 413 `body too large`, or an empty name refused before sending. */
export declare class BadRequestError extends DlockError {}
/** 401 `unauthorized`: the bearer token is missing or wrong. */
export declare class UnauthorizedError extends DlockError {}
/**
 * 403: a scoped token (`dlock serve --auth-file`) may not do this: `out of
 * scope` (the name is outside the token's prefixes; `field` names the
 * input), `read only` (a read-only token asked to write) or `forbidden` (an
 * endpoint not open to scoped tokens). Not retried.
 */
export declare class ForbiddenError extends DlockError {
  /** The multi-lock name found outside the token's scope (the body's `name`), else undefined. */
  readonly lockName: string | undefined;
}
/**
 * 429: a scoped token over its limit: `rate limited` (over its
 * `acquiresPerSecond`) or `too many holds` (it holds its `maxHolds`). Not
 * retried by the client.
 */
export declare class RateLimitedError extends DlockError {
  /** When to try again, in ms (`retryAfterMs`, else `Retry-After`). */
  readonly retryAfterMs: number;
  /** The same in seconds. */
  readonly retryAfter: number;
}
/** 409 `locked`: held by another holder (also when `waitMs` ran out). */
export declare class LockedError extends DlockError {
  /** The holder's remaining lease time in ms (`retryAfterMs`, else `Retry-After`). */
  readonly retryAfterMs: number;
  /** The same in seconds. */
  readonly retryAfter: number;
  /** The mode holding the name; '' when the server did not say. */
  readonly heldMode: HeldMode | '';
}
/** 409 `upgrade`: a read holder asked for the write lock. */
export declare class UpgradeError extends DlockError {}
/**
 * 410 `lease lost`: the token does not hold the lock; or status 0 when
 * renewal could not be confirmed before the lease ran out. From then on the
 * lock must be presumed held by someone else.
 */
export declare class LeaseLostError extends DlockError {}
/** 503 `store unavailable`, `no quorum`, `shutting down`, `too many streams`. */
export declare class UnavailableError extends DlockError {
  /** From `Retry-After`, in ms; undefined when absent. */
  readonly retryAfterMs: number | undefined;
}
/** No answer (refused, reset, timeout) or not the server's JSON. */
export declare class TransportError extends DlockError {
  /** Set when an acquire's outcome is unknown: the lock may be held with this token. */
  token: string | undefined;
}

export interface ClientOptions {
  /** Default: env DLOCK_SERVER, else DEFAULT_URL. */
  url?: string;
  /** Sent as `Authorization: Bearer`. Default: env DLOCK_AUTH_TOKEN, else none. */
  authToken?: string;
  /** Per request, on top of an acquire's wait. Default 10000. */
  timeoutMs?: number;
  /** Times a request is sent again after a network error or a 503. Default 3. */
  retries?: number;
  /** Default: the global fetch (or node:https with `tls`, `agent` or DLOCK_CA_FILE/DLOCK_CERT/DLOCK_KEY). */
  fetch?: typeof fetch;
  /**
   * TLS options of Node's `https.Agent` (`tls.connect`) for an https:// url:
   * `ca` (PEM of a private CA), `cert` and `key` (a client certificate, for
   * a server with `--client-ca`), and any other. Requests then go through
   * `node:https` with a keep-alive Agent (TLS 1.2 at least) instead of
   * fetch. Default: made from the PEM files named by DLOCK_CA_FILE,
   * DLOCK_CERT and DLOCK_KEY when set, else none (the system's CAs).
   */
  tls?: TLSOptions;
  /** An `https.Agent` of your own, used as `tls` is. */
  agent?: object;
}

/** PEM material and other options of Node's `tls.connect`. */
export interface TLSOptions {
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  cert?: string | Uint8Array | Array<string | Uint8Array>;
  key?: string | Uint8Array | Array<string | Uint8Array>;
  [option: string]: unknown;
}

export interface AcquireOptions {
  /** Lease length, 100-86400000. Default 30000. */
  ttlMs?: number;
  /** How long the server may wait for the lock; 0 (default) fails fast. */
  waitMs?: number;
  /** Default 'exclusive'. */
  mode?: 'exclusive' | 'shared' | Exclude<HeldMode, 'election'>;
  /** Semaphore permits (with mode 'shared'), 1-1000000. */
  limit?: number;
  /** Exclusive locks: grant in arrival order. */
  fair?: boolean;
  /**
   * Who holds, 1-256 bytes: recorded with the hold in every mode and shown in
   * the lock's state (`owners`). Default (the server's): the credential, else
   * the client's address. It decides nothing except in a reentrant lock,
   * where holders with the same owner re-enter: with mode 'exclusive' (the
   * default) an owner makes the lock reentrant; pass mode 'mutex' for a plain
   * mutex with an owner.
   */
  owner?: string;
  /** The caller's data, at most 1024 bytes: recorded with the hold and shown beside its owner. */
  data?: string;
  /** 32-128 hex characters; default newToken(). A retried acquire with the same token is idempotent. */
  token?: string;
  /**
   * Max hold, 100-31536000000: the lease cannot be held longer than this from its grant.
   * The grant's ttlMs is at most this, each extend is capped to what is left (it resolves
   * to what it got), and once it is reached extend rejects with a LeaseLostError; `using`
   * then aborts its signal. Default: none.
   */
  maxHoldMs?: number;
  /**
   * Min hold, 0-31536000000, mutex and fair locks only: a release before
   * grant + minHoldMs resolves but leaves the name held until then, by the
   * store's clock ("at most once per interval"); the fence is unchanged. A
   * holder that stops extending is still bounded by its ttlMs, and maxHoldMs
   * bounds the hold from above. Default: none.
   */
  minHoldMs?: number;
  /** Aborts the acquire (a wait included); rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface ExtendOptions {
  /** Default: the lease's TTL. */
  ttlMs?: number;
  /** Default: the client's. */
  retries?: number;
  signal?: AbortSignal;
}

export interface UsingOptions extends Omit<AcquireOptions, 'signal'> {
  /** Called once, after the signal was aborted, when the lease is lost. Exceptions are ignored. */
  onLost?: (err: LeaseLostError) => void;
}

/** One live hold of a lock (an entry of LockState.owners). Never a token. */
export interface Holder {
  /** Who holds, as its acquire recorded it; '' when unknown (no record, or a foreign library's key). */
  owner: string;
  /** Its grant, unix ms by the store's clock; absent when unknown. */
  since?: number;
  /** How long it had been held when the server answered, by the server's clock; 0 when unknown. */
  ageMs: number;
  /** The caller's data, when given. */
  data?: string;
  /** The hold's fence, when known. */
  fence?: number;
}

export interface LockState {
  name: string;
  mode: HeldMode;
  held: boolean;
  holders: number;
  ttlMs: number;
  fence: number;
  queue: number;
  limit?: number;
  /** One entry per live hold (a reentrant hold is one, each reader and semaphore permit its own), in no set order. */
  owners: Holder[];
}

/** The answer to Client.forceRelease. */
export interface ForceReleased {
  name: string;
  /** Who forced it, as the server names the credential (`<tenant>/<name>`, or the client's address). */
  by: string;
  /** The holds it ended; [] when nobody held the lock. */
  ended: Holder[];
}

export interface Health {
  status: string;
  service: string;
  store: string;
  version?: string;
  uptimeS?: number;
  [key: string]: unknown;
}

/** A lease granted by Client.acquire. */
export declare class Lease {
  readonly name: string;
  /** The capability to extend and release; not enumerable (kept out of JSON and logs). */
  readonly token: string;
  /** Strictly greater than every earlier exclusive grant's: send it with each write to the resource. */
  readonly fence: number;
  /** The lease length last asked for. */
  ttlMs: number;
  readonly mode: HeldMode | '';
  readonly count: number;
  /** performance.now() instant up to which the client counts the lease as held. */
  validUntil: number;
  /** performance.now() instant at which a lease acquired with maxHoldMs reaches it (counted from the acquire's start); else undefined. */
  maxHoldUntil?: number;
  /** Successful extends so far. */
  renewals: number;
  extend(opts?: ExtendOptions): Promise<number>;
  release(): Promise<void>;
}

export declare class Client {
  constructor(opts?: ClientOptions);
  readonly url: string;
  readonly timeoutMs: number;
  readonly retries: number;
  /**
   * Takes a lease. Rejects with LockedError when held (after waitMs),
   * UpgradeError, BadRequestError naming the field, UnauthorizedError, and
   * UnavailableError or TransportError once retries are spent (the same
   * token is sent on every retry; TransportError.token then names it).
   */
  acquire(name: string, opts?: AcquireOptions): Promise<Lease>;
  /** Renews the lease; resolves to the validity the server counts (ms). Rejects with LeaseLostError on 410. */
  extend(lease: Lease, opts?: ExtendOptions): Promise<number>;
  /** Gives the lease up. Rejects with LeaseLostError when the token no longer held it. */
  release(lease: Lease): Promise<void>;
  state(name: string): Promise<LockState>;
  /** The live holds of `name` (its state's `owners`); [] when the lock is free. */
  owners(name: string): Promise<Holder[]>;
  locks(): Promise<LockState[]>;
  /**
   * Ends every hold of `name`, in any mode and by any token, even one kept
   * by minHoldMs: an operator's way out of a name held by a stuck process.
   * Queue places and the fence counter are kept (the next grant's fence is
   * above every ended hold's); the forced holders find out at their next
   * extend (LeaseLostError). With an auth file the credential needs
   * `"access": "admin"`, else ForbiddenError `not admin`. Never retried (a
   * second force-release could end a hold granted after the first): a
   * TransportError leaves the outcome unknown. A store that cannot force a
   * release rejects with a DlockError of status 501.
   */
  forceRelease(name: string): Promise<ForceReleased>;
  health(): Promise<Health>;
  /**
   * Acquires `name`, runs `routine(signal, lease)`, renewing the lease every
   * ttlMs/3, then releases it and resolves to the routine's result.
   *
   * When the server answers 410 to a renewal, or renewal cannot be confirmed
   * before the lease runs out, `signal` is aborted with a LeaseLostError as
   * its reason and `onLost` is called. The routine is not stopped by force:
   * it should pass `signal` to what it awaits (fetch, timers) or check
   * `signal.aborted` / `signal.throwIfAborted()`. Once it settles, `using`
   * rejects with that LeaseLostError (its `cause` the routine's own error,
   * if it threw one, else for a lapsed validity the last renewal error) and
   * does not release: the lock is not ours any more.
   *
   * Without a loss, the lease is released and the routine's result or
   * error comes back (a failed release is ignored after a routine error,
   * and rejects after a success).
   */
  using<T>(name: string, routine: (signal: AbortSignal, lease: Lease) => Promise<T> | T): Promise<T>;
  using<T>(name: string, opts: UsingOptions, routine: (signal: AbortSignal, lease: Lease) => Promise<T> | T): Promise<T>;
}
