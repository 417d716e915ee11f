"""Client of the /v1 lease API of `dlock serve` (see docs/http.md)."""

from __future__ import annotations

import http.client
import json
import os
import random
import secrets
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Type

from ._errors import (
    BadRequestError,
    DlockError,
    ForbiddenError,
    LeaseLostError,
    LockedError,
    RateLimitedError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    UpgradeError,
)

__all__ = ["Client", "Lease", "HeldLock", "Holder", "ForceReleased", "new_token", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:3009"

# The server waits at most this long in one acquire (waitMs ≤ 300000).
_MAX_SERVER_WAIT_MS = 300_000
# The client counts a lease valid for ttl * (1 - _DRIFT) - 2 ms from the
# start of the request that granted or renewed it, as the Go library does.
_DRIFT = 0.01
_MAX_REPLY = 4 << 20


def new_token() -> str:
    """A fresh lease token: 128 bits from the operating system's CSPRNG, in hex."""
    return secrets.token_hex(16)


def _quote_name(name: str) -> str:
    # Every byte but unreserved ones is escaped, dots too: a name "." or ".."
    # must not become a path segment that HTTP stacks clean away.
    return urllib.parse.quote(name, safe="").replace(".", "%2E")


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _tls_context(
    scheme: str, ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str]
) -> Optional[ssl.SSLContext]:
    """The TLS context of the files given, None when none is."""
    if ca_file is None and cert_file is None and key_file is None:
        return None
    if scheme != "https":
        raise ValueError("dlock: ca_file, cert_file and key_file need an https:// url")
    if (cert_file is None) != (key_file is None):
        raise ValueError("dlock: cert_file and key_file go together")
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None and key_file is not None:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


@dataclass(frozen=True)
class Holder:
    """One live hold of a lock, as ``GET /v1/locks/{name}`` shows it (``owners``).

    ``owner`` is who holds it, as its acquire recorded it (``""`` when
    unknown: no record, or a foreign library's key on Valkey/Redis);
    ``since_ms`` its grant, in unix milliseconds by the store's clock
    (``None`` when unknown); ``age_ms`` how long it had been held when the
    server answered, by the server's clock (0 when unknown); ``data`` the
    caller's data (``""`` when none); ``fence`` the hold's fence (``None``
    when unknown). Never a token.
    """

    owner: str
    since_ms: Optional[int]
    age_ms: int
    data: str
    fence: Optional[int]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Holder":
        """The Holder of one entry of ``owners`` (or of a force-release's ``ended``)."""
        since = doc.get("since")
        fence = doc.get("fence")
        return cls(
            owner=str(doc.get("owner", "")),
            since_ms=int(since) if isinstance(since, int) and since > 0 else None,
            age_ms=int(doc.get("ageMs", 0)),
            data=str(doc.get("data", "")),
            fence=int(fence) if isinstance(fence, int) and fence > 0 else None,
        )


@dataclass(frozen=True)
class ForceReleased:
    """The answer to :meth:`Client.force_release`: the lock ``name``, ``by``
    who forced it (as the server names the credential), and the holds it
    ``ended`` (empty when nobody held the lock)."""

    name: str
    by: str
    ended: List[Holder]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The API never redirects a valid request; a redirect is an error to report.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Lease:
    """A lease granted by :meth:`Client.acquire`.

    ``fence`` is strictly greater than that of every earlier exclusive grant
    of the same lock: send it with each write to the protected resource and
    have the resource refuse lower fences. ``token`` is the capability to
    extend and release; it is left out of ``repr``. ``ttl_ms`` is the lease
    length the server last confirmed; ``valid_until`` the ``time.monotonic()``
    instant up to which the client counts the lease as held (request start +
    TTL less 1% and 2 ms for clock drift), unless the server says otherwise.
    ``max_hold_until`` is the ``time.monotonic()`` instant at which a lease
    acquired with ``max_hold`` reaches it (counted from the acquire's start,
    so never later than the server's count), else ``None``.
    """

    def __init__(
        self,
        client: "Client",
        name: str,
        token: str,
        fence: int,
        ttl_ms: int,
        mode: str,
        count: int,
        valid_until: float,
        max_hold_until: Optional[float] = None,
    ) -> None:
        self._client = client
        self.name = name
        self.token = token
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.mode = mode
        self.count = count
        self.valid_until = valid_until
        self.max_hold_until = max_hold_until

    def __repr__(self) -> str:
        return f"Lease(name={self.name!r}, fence={self.fence}, ttl_ms={self.ttl_ms}, mode={self.mode!r})"

    def extend(self, ttl: Optional[float] = None) -> int:
        """Same as ``client.extend(lease, ttl)``."""
        return self._client.extend(self, ttl)

    def release(self) -> None:
        """Same as ``client.release(lease)``."""
        self._client.release(self)


class Client:
    """A client of one `dlock serve` (or of a load balancer in front of several).

    ``url`` defaults to the environment's ``DLOCK_SERVER``, else
    ``http://127.0.0.1:3009``; ``auth_token`` (sent as ``Authorization:
    Bearer``) to ``DLOCK_AUTH_TOKEN``, else none. ``timeout`` bounds each
    request, in seconds, on top of the time an acquire asks the server to
    wait. ``retries`` is how many times a request is sent again after a
    network error or a 503 (after the server's ``Retry-After``, else a
    capped, jittered backoff); an acquire is retried with the same token, so
    it is idempotent.

    For an ``https://`` url the server's certificate is checked against the
    system's CAs, or against ``ca_file`` (PEM; default the environment's
    ``DLOCK_CA_FILE`` for an ``https://`` url). A server that requires a client certificate (mutual
    TLS, ``dlock serve --client-ca``) gets ``cert_file`` and ``key_file``
    (PEM; defaults ``DLOCK_CERT`` and ``DLOCK_KEY``). ``ssl_context`` replaces
    all three with a :class:`ssl.SSLContext` of your own. TLS 1.2 is the
    minimum. A certificate problem is a :class:`TransportError` naming it
    (``CERTIFICATE_VERIFY_FAILED``, ``certificate required``).

    A Client holds no connection and is safe to share between threads.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        auth_token: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 3,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        base = url if url is not None else os.environ.get("DLOCK_SERVER") or DEFAULT_URL
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"dlock: url {base!r} must be an http:// or https:// URL")
        self.url = base.rstrip("/")
        self._auth = auth_token if auth_token is not None else os.environ.get("DLOCK_AUTH_TOKEN") or None
        if timeout <= 0:
            raise ValueError("dlock: timeout must be positive")
        if retries < 0:
            raise ValueError("dlock: retries must not be negative")
        self.timeout = timeout
        self.retries = retries
        # The environment's files apply to an https:// url only.
        env: Mapping[str, str] = os.environ
        if parts.scheme != "https":
            env = {}
        ctx = ssl_context or _tls_context(
            parts.scheme,
            ca_file if ca_file is not None else env.get("DLOCK_CA_FILE") or None,
            cert_file if cert_file is not None else env.get("DLOCK_CERT") or None,
            key_file if key_file is not None else env.get("DLOCK_KEY") or None,
        )
        if ctx is not None and parts.scheme != "https":
            raise ValueError("dlock: ca_file, cert_file, key_file and ssl_context need an https:// url")
        handlers: List[urllib.request.BaseHandler] = [_NoRedirect()]
        if ctx is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        self._opener = urllib.request.build_opener(*handlers)

    # --- transport ------------------------------------------------------------

    def _send(self, method: str, path: str, body: Optional[Mapping[str, Any]], timeout: float) -> Dict[str, Any]:
        """One request. Returns the JSON body of a 2xx; raises the error of any other answer."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "User-Agent": "dlock-client-python"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._auth:
            headers["Authorization"] = "Bearer " + self._auth
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                status = resp.status
                raw = resp.read(_MAX_REPLY)
                hdrs = resp.headers
        except urllib.error.HTTPError as e:
            status, hdrs = e.code, e.headers
            try:
                raw = e.read(_MAX_REPLY)
            except (OSError, http.client.HTTPException) as re:
                raise TransportError(status, f"{method} {path}: reading the answer: {re}") from re
            finally:
                e.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise TransportError(0, f"{method} {path}: {reason}") from e
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise TransportError(status, f"{method} {path}: HTTP {status} with a body that is not a JSON object")
        if 200 <= status < 300:
            return doc
        raise _error(status, doc, hdrs.get("Retry-After"))

    def _call(
        self,
        method: str,
        path: str,
        body: Optional[Mapping[str, Any]] = None,
        *,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
    ) -> Dict[str, Any]:
        """_send, sent again after a network error or a 503 up to ``retries`` times."""
        n = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return self._send(method, path, body, self.timeout if timeout is None else timeout)
            except (TransportError, UnavailableError) as e:
                if attempt >= n:
                    raise
                attempt += 1
                time.sleep(_retry_delay(e, attempt))

    # --- the lease API --------------------------------------------------------

    def acquire(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: str = "exclusive",
        limit: Optional[int] = None,
        fair: bool = False,
        owner: Optional[str] = None,
        data: Optional[str] = None,
        token: Optional[str] = None,
        min_hold: Optional[float] = None,
        max_hold: Optional[float] = None,
    ) -> Lease:
        """Takes a lease on the lock ``name`` for ``ttl`` seconds.

        With ``wait`` 0 it fails fast; otherwise the server waits for the
        lock (it is woken when the lock is released) for up to ``wait``
        seconds. A wait longer than the server's 300 s cap goes on in further
        requests; a 409 that comes back before the server waited what it was
        asked is retried after its Retry-After (capped by the time left).
        ``mode``, ``limit`` and ``fair`` are those of docs/http.md
        (``shared`` + ``limit`` is a semaphore, ``fair`` a FIFO lock).

        ``owner`` (1-256 bytes) names who holds: it is recorded with the hold
        in every mode and shown by :meth:`state`, :meth:`owners` and
        :meth:`locks`; the server's default is the credential, else the
        client's address. It decides nothing except in a reentrant lock,
        where holders with the same owner re-enter: with the default mode
        ``exclusive`` an owner makes the lock reentrant, so pass
        ``mode="mutex"`` for a plain mutex with an owner. ``data`` (at most
        1024 bytes) is recorded and shown beside the owner.

        ``min_hold`` (seconds; mutex and fair locks only) makes a release
        before grant + ``min_hold`` leave the name held until then, by the
        store's clock ("at most once per interval"); the fence is unchanged.
        A holder that stops extending is still bounded by its ``ttl``, and
        ``max_hold`` bounds the hold from above.

        ``max_hold`` (seconds, 0.1 to 365 days) bounds how long the lease can
        be held from its grant: the grant's TTL is at most that, each extend
        is capped to what is left of it (:meth:`extend` returns what it got),
        and once it is reached extend raises :class:`LeaseLostError`.

        ``token`` (32-128 hex characters) defaults to :func:`new_token`. The
        same token is sent again when a request fails on the network or with
        a 503, so a retry never takes a second lease: the server answers with
        the same lease and fence.

        Raises :class:`LockedError` (held; ``retry_after``, ``held_mode``)
        when the lock was not free in time, :class:`UpgradeError`,
        :class:`BadRequestError` naming the field, :class:`UnauthorizedError`,
        :class:`ForbiddenError` and :class:`RateLimitedError` (a scoped
        token; not retried), :class:`UnavailableError` or :class:`TransportError` once retries are
        spent (the latter carries the token: the lock may be held with it).
        """
        _check_name(name)
        tok = token if token is not None else new_token()
        body: Dict[str, Any] = {"ttlMs": _ms(ttl), "mode": mode, "token": tok}
        if limit is not None:
            body["limit"] = limit
        if fair:
            body["fair"] = True
        if owner is not None:
            body["owner"] = owner
        if data is not None:
            body["data"] = data
        if min_hold is not None:
            body["minHoldMs"] = _ms(min_hold)
        if max_hold is not None:
            body["maxHoldMs"] = _ms(max_hold)
        path = f"/v1/locks/{_quote_name(name)}/acquire"
        deadline = time.monotonic() + max(wait, 0.0)
        failures = 0
        while True:
            left_ms = max(0, _ms(deadline - time.monotonic()))
            wait_ms = _ms(wait) if wait < 0 else min(left_ms, _MAX_SERVER_WAIT_MS)  # a negative wait: the server's 400
            body["waitMs"] = wait_ms
            start = time.monotonic()
            try:
                doc = self._send("POST", path, body, self.timeout + wait_ms / 1000.0)
            except LockedError as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                if time.monotonic() - start < wait_ms / 1000.0:
                    # The server answered before waiting what it was asked.
                    time.sleep(min(e.retry_after, left))
                continue
            except (TransportError, UnavailableError) as e:
                failures += 1
                if failures > self.retries:
                    if isinstance(e, TransportError):
                        e.token = tok
                    raise
                time.sleep(_retry_delay(e, failures))
                continue
            lease = self._lease(name, doc, start, tok)
            if max_hold is not None:
                lease.max_hold_until = start + max_hold
            return lease

    def _lease(self, name: str, doc: Mapping[str, Any], start: float, token: str) -> Lease:
        try:
            ttl_ms = int(doc["ttlMs"])
            return Lease(
                self,
                name=str(doc.get("name", name)),
                token=str(doc.get("token", token)),
                fence=int(doc["fence"]),
                ttl_ms=ttl_ms,
                mode=str(doc.get("mode", "")),
                count=int(doc.get("count", 1)),
                valid_until=_valid_until(start, ttl_ms),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise TransportError(200, f"acquire {name!r}: unexpected answer {doc!r}") from e

    def extend(self, lease: Lease, ttl: Optional[float] = None, *, retries: Optional[int] = None) -> int:
        """Renews ``lease`` to ``ttl`` seconds from now (default: its TTL) and
        returns the validity the server now counts, in milliseconds (a little
        less than asked, for clock drift; less again when the lease's
        ``max_hold`` capped it).

        Raises :class:`LeaseLostError` when the token no longer holds the
        lock: from then on it must be presumed held by someone else. Network
        errors and 503s are retried ``retries`` times (default the client's);
        renewing twice is harmless.
        """
        body: Dict[str, Any] = {"token": lease.token, "ttlMs": _ms(ttl) if ttl is not None else lease.ttl_ms}
        if lease.mode and lease.mode != "mutex":
            body["mode"] = lease.mode  # lets another instance (or a restarted one) find it
        start = time.monotonic()
        timeout = self.timeout
        if retries == 0:
            timeout = max(0.05, min(timeout, lease.valid_until - start))
        doc = self._call("POST", f"/v1/locks/{_quote_name(lease.name)}/extend", body, timeout=timeout, retries=retries)
        got = int(doc.get("ttlMs", body["ttlMs"]))
        lease.ttl_ms = body["ttlMs"]
        lease.valid_until = _valid_until(start, got)
        return got

    def release(self, lease: Lease) -> None:
        """Gives ``lease`` up.

        Raises :class:`LeaseLostError` when the token did not hold the lock
        any more (released, expired, lost). A release sent again after a
        network error or a 503 that then finds the lock not held returns
        normally: the first one may have released it.
        """
        body: Dict[str, Any] = {"token": lease.token}
        if lease.mode and lease.mode != "mutex":
            body["mode"] = lease.mode
        path = f"/v1/locks/{_quote_name(lease.name)}/release"
        failures = 0
        while True:
            try:
                self._send("POST", path, body, self.timeout)
            except LeaseLostError:
                if failures:
                    break
                raise
            except (TransportError, UnavailableError) as e:
                failures += 1
                if failures > self.retries:
                    raise
                time.sleep(_retry_delay(e, failures))
                continue
            break
        lease.valid_until = 0.0

    def state(self, name: str) -> Dict[str, Any]:
        """The state of lock ``name`` as docs/http.md gives it (``held``,
        ``mode``, ``holders``, ``ttlMs``, ``fence``, ``queue``, and
        ``owners``: one entry per live hold, ``owner``, ``since``, ``ageMs``,
        ``data``, ``fence``; never tokens). :meth:`owners` gives the owners
        as :class:`Holder` values."""
        _check_name(name)
        return self._call("GET", f"/v1/locks/{_quote_name(name)}")

    def owners(self, name: str) -> List[Holder]:
        """The live holds of lock ``name``: one :class:`Holder` per hold (a
        reentrant hold is one, each reader and semaphore permit its own), in
        no set order; empty when the lock is free."""
        got = self.state(name).get("owners")
        return [Holder.from_json(o) for o in got if isinstance(o, dict)] if isinstance(got, list) else []

    def locks(self) -> List[Dict[str, Any]]:
        """The states of the held locks (at most 1000), each as :meth:`state` gives it, ``owners`` included."""
        got = self._call("GET", "/v1/locks").get("locks")
        return list(got) if isinstance(got, list) else []

    def force_release(self, name: str) -> ForceReleased:
        """Ends every hold of lock ``name``, in any mode and by any token,
        even one kept by a min hold: an operator's way out of a name held by
        a stuck process. Queue places and the fence counter are kept (the
        next grant's fence is above every ended hold's). The forced holders
        are not told: each finds out at its next extend
        (:class:`LeaseLostError`).

        With an auth file the credential needs ``"access": "admin"``, else
        :class:`ForbiddenError` ``not admin``. Not sent again after a network
        error or a 503 (a second force-release could end a hold granted
        after the first): a :class:`TransportError` leaves the outcome
        unknown; look with :meth:`owners`. A store that cannot force a
        release answers :class:`DlockError` with status 501.
        """
        _check_name(name)
        doc = self._call("POST", f"/v1/locks/{_quote_name(name)}/force-release", {}, retries=0)
        ended = doc.get("ended")
        return ForceReleased(
            name=str(doc.get("name", name)),
            by=str(doc.get("by", "")),
            ended=[Holder.from_json(o) for o in ended if isinstance(o, dict)] if isinstance(ended, list) else [],
        )

    def health(self) -> Dict[str, Any]:
        """GET /health; raises :class:`UnavailableError` when the store is unreachable."""
        return self._call("GET", "/health", retries=0)

    def with_lock(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: str = "exclusive",
        limit: Optional[int] = None,
        fair: bool = False,
        owner: Optional[str] = None,
        on_lost: Optional[Callable[[LeaseLostError], None]] = None,
        max_hold: Optional[float] = None,
        data: Optional[str] = None,
        min_hold: Optional[float] = None,
    ) -> "HeldLock":
        """A context manager that holds the lock ``name`` while its block runs.

        ``with client.with_lock("orders", ttl=10) as held:`` acquires (as
        :meth:`acquire`, raising its errors from the ``with`` line), then a
        background thread renews the lease every ``ttl / 3`` seconds. See
        :class:`HeldLock` for what happens when the lease is lost. With
        ``max_hold`` the renewal stops there: the lease is then lost as
        above (a bounded watchdog: a block that hangs does not hold the lock
        for ever). ``owner``, ``data`` and ``min_hold`` are those of
        :meth:`acquire`; with ``min_hold`` the release at the block's end
        leaves the name held until grant + ``min_hold``.
        """
        opts = dict(
            ttl=ttl, wait=wait, mode=mode, limit=limit, fair=fair, owner=owner, data=data, min_hold=min_hold, max_hold=max_hold
        )
        return HeldLock(self, name, opts, on_lost)


class HeldLock:
    """The lock held by a ``with client.with_lock(...)`` block.

    While the block runs, a daemon thread renews the lease every TTL/3. A
    renewal that fails on the network or with a 503 is tried again (every
    TTL/12 or so) until the lease's local validity runs out. When the server
    answers 410, or the validity runs out unconfirmed, the lease is lost:

    1. ``error`` is set to a :class:`LeaseLostError`, then the
       ``threading.Event`` ``lost`` is set, then ``on_lost(error)`` is called
       on the renewal thread (exceptions it raises are ignored);
    2. renewal stops. Python cannot safely interrupt another thread, so the
       block itself is not stopped: it should check ``held.lost.is_set()``
       or call ``held.check()`` between steps, wait with ``held.lost.wait(t)``
       instead of ``time.sleep(t)``, and send ``held.lease.fence`` with its
       writes so the resource refuses them once a later holder wrote;
    3. when the block ends — normally or by any exception — the lease loss
       is raised from the ``with`` statement as :class:`LeaseLostError`
       (its ``__cause__`` the block's exception, if any, unless that
       exception is this very error; else the renewal's last error when
       validity ran out). The lock is not released: it is not ours.

    When the lease was not lost, leaving the block stops the renewal thread
    (waiting for it) and releases the lease; the block's exception, if any,
    propagates unchanged (a failed release is then ignored: the lease ends
    at its TTL). After a block that ended normally, a failed release raises
    its error (a 410 there is a lost lease, raised as above).
    """

    def __init__(
        self,
        client: Client,
        name: str,
        opts: Dict[str, Any],
        on_lost: Optional[Callable[[LeaseLostError], None]],
    ) -> None:
        self._client = client
        self._name = name
        self._opts = opts
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lease: Optional[Lease] = None
        self.lost = threading.Event()
        self.error: Optional[LeaseLostError] = None
        self.renewals = 0

    @property
    def lease(self) -> Lease:
        """The lease held (its ``fence`` is what the resource should check)."""
        if self._lease is None:
            raise RuntimeError("dlock: the lock is held only inside the with block")
        return self._lease

    def check(self) -> None:
        """Raises the :class:`LeaseLostError` if the lease was lost; returns otherwise."""
        if self.lost.is_set() and self.error is not None:
            raise self.error

    def __enter__(self) -> "HeldLock":
        if self._thread is not None:
            raise RuntimeError("dlock: a HeldLock is entered once")
        self._lease = self._client.acquire(self._name, **self._opts)
        self._thread = threading.Thread(target=self._renew, name=f"dlock-renew-{self._name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        lease = self.lease
        if not self.lost.is_set():
            try:
                self._client.release(lease)
            except LeaseLostError as e:
                self._lose(e)
            except DlockError:
                if exc is None:
                    raise
        if self.lost.is_set() and self.error is not None:
            if exc is self.error:
                return None
            if exc is None:
                raise self.error  # keeps its own cause
            raise self.error from exc
        return None

    def _lose(self, err: LeaseLostError) -> None:
        if self.lost.is_set():
            return
        self.error = err
        self.lost.set()
        if self._on_lost is not None:
            try:
                self._on_lost(err)
            except Exception:
                pass

    def _renew(self) -> None:
        lease = self.lease
        ttl = max(lease.ttl_ms, 1) / 1000.0
        delay = ttl / 3
        while not self._stop.wait(delay):
            if lease.max_hold_until is not None and time.monotonic() >= lease.max_hold_until:
                self._lose(LeaseLostError(0, "lease lost", f"the lease on lock {lease.name!r} reached its max hold"))
                return
            try:
                self._client.extend(lease, ttl, retries=0)
            except LeaseLostError as e:
                self._lose(e)
                return
            except Exception as e:  # network, 503, or anything else: try again while valid
                left = lease.valid_until - time.monotonic()
                if left <= 0:
                    lost = LeaseLostError(
                        0, "lease lost", f"renewal of lock {lease.name!r} could not be confirmed before the lease ran out: {e}"
                    )
                    lost.__cause__ = e
                    self._lose(lost)
                    return
                delay = min(ttl / 12, left)
                continue
            self.renewals += 1
            # A max hold caps the validity: renew (or find it lost) when it ends.
            delay = min(ttl / 3, max(lease.valid_until - time.monotonic(), 0.0))
        # Stopped by __exit__.


def _check_name(name: str) -> None:
    if not isinstance(name, str) or name == "":
        raise BadRequestError(400, "invalid name", "name must be 1 to 256 bytes", field="name")


def _valid_until(start: float, ttl_ms: int) -> float:
    return start + ttl_ms / 1000.0 * (1 - _DRIFT) - 0.002


def _retry_delay(e: DlockError, attempt: int) -> float:
    after = getattr(e, "retry_after", None)
    if isinstance(after, (int, float)) and after > 0:
        return float(after)
    cap = min(1.0, 0.05 * (2 ** (attempt - 1)))
    return random.uniform(cap / 2, cap)


def _error(status: int, doc: Mapping[str, Any], retry_after_header: Optional[str]) -> DlockError:
    code = str(doc.get("error", "")) or f"http {status}"
    message = str(doc.get("message", "")) or code
    field = doc.get("field")
    field = str(field) if field is not None else None
    header_s: Optional[float] = None
    if retry_after_header is not None:
        try:
            header_s = float(int(retry_after_header.strip()))
        except ValueError:
            header_s = None
    if status in (400, 413):
        return BadRequestError(status, code, message, field=field, body=doc)
    if status == 401:
        return UnauthorizedError(status, code, message, body=doc)
    if status == 403:
        return ForbiddenError(status, code, message, field=field, body=doc)
    if status == 429:
        ms = doc.get("retryAfterMs")
        if not isinstance(ms, int) or isinstance(ms, bool):
            ms = int(header_s * 1000) if header_s is not None else 1000
        return RateLimitedError(status, code, message, retry_after_ms=ms, field=field, body=doc)
    if status == 409:
        if code == "upgrade":
            return UpgradeError(status, code, message, body=doc)
        ms = doc.get("retryAfterMs")
        if not isinstance(ms, int):
            ms = int(header_s * 1000) if header_s is not None else 0
        return LockedError(status, code, message, retry_after_ms=ms, held_mode=str(doc.get("heldMode", "")), body=doc)
    if status == 410:
        return LeaseLostError(status, code, message, body=doc)
    if status == 503:
        after = header_s
        if after is None and isinstance(doc.get("retryAfterMs"), int):
            after = doc["retryAfterMs"] / 1000.0
        return UnavailableError(status, code, message, retry_after=after, body=doc)
    return DlockError(status, code, message, field=field, body=doc)
