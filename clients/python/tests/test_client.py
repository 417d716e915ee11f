"""The client against a real `dlock serve` (see conftest.py)."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Tuple

import pytest

from conftest import ADMIN, READER, SLOW, TEAM_A, Server
from dlock_client import (
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
    new_token,
)

DEADLINE = 30.0  # seconds any awaited event gets on a loaded machine


def raw_post(url: str, path: str, body: Dict[str, Any]) -> int:
    """POST behind the client's back; returns the status."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=DEADLINE) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {DEADLINE}s waiting for {what}")
        time.sleep(0.02)  # poll interval


def test_acquire_release(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=10)
    assert lease.name == name
    assert lease.mode == "mutex"
    assert lease.fence > 0
    assert len(lease.token) == 32 and int(lease.token, 16) >= 0
    assert lease.token not in repr(lease)
    st = c.state(name)
    assert st["held"] is True and st["fence"] == lease.fence and "token" not in st
    assert any(s["name"] == name for s in c.locks())
    c.release(lease)
    assert c.state(name)["held"] is False


def test_fence_increases(server: Server, name: str) -> None:
    c = Client(server.url)
    fences = []
    for _ in range(3):
        lease = c.acquire(name, ttl=5)
        fences.append(lease.fence)
        lease.release()
    assert fences == sorted(fences) and len(set(fences)) == 3, fences


def test_locked_carries_retry_after(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=20)
    with pytest.raises(LockedError) as ei:
        c.acquire(name)
    e = ei.value
    assert (e.status, e.error, e.held_mode) == (409, "locked", "mutex")
    assert 0 < e.retry_after_ms <= 20_000
    assert e.retry_after == e.retry_after_ms / 1000
    with pytest.raises(LockedError) as ei:
        c.acquire(name, mode="shared")
    assert ei.value.held_mode == "mutex"
    lease.release()


def test_waiting_acquire_times_out(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=20)
    start = time.monotonic()
    with pytest.raises(LockedError) as ei:
        c.acquire(name, wait=0.3)
    assert time.monotonic() - start >= 0.3  # it did wait
    assert ei.value.retry_after_ms > 0
    lease.release()


def test_waiting_acquire_gets_released_lock(server: Server, name: str) -> None:
    c = Client(server.url)
    first = c.acquire(name, ttl=20)
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(c.acquire(name, wait=DEADLINE, ttl=5)))
    t.start()
    first.release()  # before or after the waiter asked: either way it gets the lock
    t.join(DEADLINE + 10)
    assert not t.is_alive() and len(got) == 1
    assert got[0].fence > first.fence
    got[0].release()


def test_same_token_is_idempotent(server: Server, name: str) -> None:
    c = Client(server.url)
    tok = new_token()
    a = c.acquire(name, ttl=10, token=tok)
    b = c.acquire(name, ttl=10, token=tok)
    assert (b.token, b.fence) == (tok, a.fence)
    assert c.state(name)["holders"] == 1
    with pytest.raises(LockedError):
        c.acquire(name, token=new_token())
    b.release()
    with pytest.raises(LeaseLostError):
        a.release()


def test_extend(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=1)
    got = lease.extend(20)
    assert 1_000 < got <= 20_000
    assert c.state(name)["ttlMs"] > 1_000
    assert lease.ttl_ms == 20_000
    lease.release()


def test_lease_lost_after_release(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=10)
    lease.release()
    ops: List[Callable[[], object]] = [lease.extend, lease.release]
    for op in ops:
        with pytest.raises(LeaseLostError) as ei:
            op()
        assert (ei.value.status, ei.value.error) == (410, "lease lost")


def test_bad_input(server: Server, name: str) -> None:
    c = Client(server.url)
    cases: List[Tuple[Dict[str, Any], str]] = [
        ({"ttl": 0.01}, "ttlMs"),
        ({"ttl": 100_000}, "ttlMs"),
        ({"wait": -1}, "waitMs"),
        ({"mode": "bogus"}, "mode"),
        ({"token": "not-hex"}, "token"),
        ({"limit": 3}, "limit"),
        ({"mode": "shared", "limit": 0}, "limit"),
        ({"fair": True, "owner": "o" * 257}, "owner"),
        ({"max_hold": 0.05}, "maxHoldMs"),
    ]
    for kwargs, field in cases:
        with pytest.raises(BadRequestError) as ei:
            c.acquire(name, **kwargs)
        e = ei.value
        assert (e.status, e.field) == (400, field), (kwargs, e)
        assert e.error.startswith("invalid ") and e.message
    for bad in ("", "a\x00b", "x" * 257):
        with pytest.raises(BadRequestError) as ei:
            c.acquire(bad)
        assert ei.value.field == "name"
    assert c.state(name)["held"] is False  # nothing left behind


def test_names_are_escaped(server: Server, name: str) -> None:
    c = Client(server.url)
    for n in (name + "/a b?c#d%e", ".", "..", name + "/é"):
        lease = c.acquire(n, ttl=5)
        assert lease.name == n
        assert c.state(n)["held"] is True
        lease.release()


def test_shared_modes(server: Server, name: str) -> None:
    c = Client(server.url)
    r1 = c.acquire(name, mode="shared", ttl=10)
    r2 = c.acquire(name, mode="shared", ttl=10)
    assert r1.mode == r2.mode == "read"
    with pytest.raises(LockedError) as ei:
        c.acquire(name)
    assert ei.value.held_mode == "read"
    assert r2.extend(10) > 0
    r1.release()
    r2.release()
    sem = name + "/sem"
    p = [c.acquire(sem, mode="shared", limit=2) for _ in range(2)]
    with pytest.raises(LockedError) as ei:
        c.acquire(sem, mode="shared", limit=2)
    assert ei.value.held_mode == "semaphore"
    for lease in p:
        lease.release()


def test_auth(auth_server: Server, name: str) -> None:
    for tok in (None, "wrong"):
        with pytest.raises(UnauthorizedError) as ei:
            Client(auth_server.url, auth_token=tok or "").acquire(name)
        assert (ei.value.status, ei.value.error) == (401, "unauthorized")
    c = Client(auth_server.url, auth_token="s3cret-token")
    assert Client(auth_server.url, auth_token="").health()["status"] == "ok"
    lease = c.acquire(name, ttl=5)
    lease.extend()
    lease.release()


def test_forbidden(scoped_server: Server) -> None:
    a = Client(scoped_server.url, auth_token=TEAM_A)
    calls: List[Callable[[], object]] = [lambda: a.acquire("py-b/x"), lambda: a.state("py-b/x")]
    for call in calls:
        with pytest.raises(ForbiddenError) as ei:
            call()
        e = ei.value
        assert (e.status, e.error, e.field) == (403, "out of scope", "name")
        assert "team-a" in e.message and e.lock_name is None
    lease = a.acquire("py-a/forbidden", ttl=10)
    reader = Client(scoped_server.url, auth_token=READER)
    assert reader.state("py-a/forbidden")["held"] is True
    with pytest.raises(ForbiddenError) as ei:
        reader.acquire("py-a/other")
    assert (ei.value.status, ei.value.error) == (403, "read only")
    with pytest.raises(ForbiddenError):
        reader.release(lease)
    lease.release()
    assert not a.state("py-a/forbidden")["held"]


def test_rate_limited(scoped_server: Server) -> None:
    # team-a holds at most two locks at once.
    a = Client(scoped_server.url, auth_token=TEAM_A)
    held = [a.acquire(f"py-a/holds/{i}", ttl=10) for i in range(2)]
    with pytest.raises(RateLimitedError) as ei:
        a.acquire("py-a/holds/2", ttl=10)
    e = ei.value
    assert (e.status, e.error) == (429, "too many holds")
    assert e.retry_after_ms >= 1 and e.retry_after == e.retry_after_ms / 1000.0
    held[0].release()
    a.acquire("py-a/holds/2", ttl=10).release()
    held[1].release()

    # slow may acquire once in 1000 s: the second acquire is told to wait.
    s = Client(scoped_server.url, auth_token=SLOW)
    s.acquire("py-s/1", ttl=10).release()
    with pytest.raises(RateLimitedError) as ei:
        s.acquire("py-s/2", ttl=10)
    e = ei.value
    assert (e.status, e.error) == (429, "rate limited")
    assert e.retry_after > 1.0  # a new acquire in about 1000 s
    with pytest.raises(RateLimitedError):
        with s.with_lock("py-s/3"):
            raise AssertionError("must not run")


def test_unreachable_server() -> None:
    from conftest import _free_port

    c = Client(f"http://127.0.0.1:{_free_port()}", retries=1)
    with pytest.raises(TransportError) as ei:
        c.acquire("x", token=new_token())
    assert ei.value.status == 0 and ei.value.token is not None


# --- retries through a faulty hop -----------------------------------------------


class FaultProxy:
    """A loopback HTTP hop in front of the server that forwards each request,
    then, for the first ``faults`` ones, loses the reply ("drop": closes the
    connection) or replaces it with a 503 ("503"), as a load balancer that
    lost its backend would; or ("nowait") forwards them with ``waitMs`` 0, as
    a server that cut the wait short. Real requests reach the real server."""

    def __init__(self, upstream: str, faults: int, kind: str) -> None:
        self.upstream = upstream
        self.faults = faults
        self.kind = kind
        self.forwarded: List[Dict[str, Any]] = []
        self.times: List[float] = []  # time.monotonic() of each request
        self.replies: List[Dict[str, Any]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                proxy.times.append(time.monotonic())
                doc = json.loads(body)
                if proxy.kind == "nowait" and proxy.faults > 0:
                    proxy.faults -= 1
                    body = json.dumps(dict(doc, waitMs=0)).encode()
                req = urllib.request.Request(upstream + self.path, data=body, method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=DEADLINE) as r:
                        status, data = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                proxy.forwarded.append(doc)
                proxy.replies.append(json.loads(data))
                if proxy.faults > 0 and proxy.kind != "nowait":
                    proxy.faults -= 1
                    if proxy.kind == "drop":
                        self.close_connection = True
                        return  # no reply: the client sees the connection closed
                    status = 503
                    data = b'{"error":"store unavailable","message":"injected by the test proxy"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.mark.parametrize("kind", ["drop", "503"])
def test_retry_after_lost_reply_keeps_one_lease(server: Server, name: str, kind: str) -> None:
    proxy = FaultProxy(server.url, faults=2, kind=kind)
    try:
        c = Client(proxy.url, retries=3)
        lease = c.acquire(name, ttl=10)
        # The first two grants were lost on the way back; the retries sent the same token.
        acquires = [b for b in proxy.forwarded if "ttlMs" in b and "waitMs" in b]
        assert len(acquires) == 3
        assert {b["token"] for b in acquires} == {lease.token}
        st = Client(server.url).state(name)
        assert (st["holders"], st["fence"]) == (1, lease.fence)
        Client(server.url).release(lease)
    finally:
        proxy.close()


def test_waiting_acquire_honours_retry_after(server: Server, name: str) -> None:
    holder = Client(server.url).acquire(name, ttl=1)  # never released: it expires
    proxy = FaultProxy(server.url, faults=1, kind="nowait")
    try:
        lease = Client(proxy.url).acquire(name, wait=DEADLINE, ttl=5)
        assert lease.fence > holder.fence
        assert len(proxy.forwarded) == 2, proxy.replies
        first = proxy.replies[0]
        assert first["error"] == "locked" and first["retryAfterMs"] > 0
        # The 409 came before the asked wait: the next try waited Retry-After.
        assert proxy.times[1] - proxy.times[0] >= first["retryAfterMs"] / 1000
        lease.release()
    finally:
        proxy.close()


def test_transport_error_carries_token(server: Server, name: str) -> None:
    proxy = FaultProxy(server.url, faults=1, kind="drop")
    try:
        with pytest.raises(TransportError) as ei:
            Client(proxy.url, retries=0).acquire(name, ttl=10)
        tok = ei.value.token
        assert tok is not None
        # The grant happened; acquiring again with its token gets that lease.
        c = Client(server.url)
        lease = c.acquire(name, ttl=10, token=tok)
        assert c.state(name)["holders"] == 1
        lease.release()
    finally:
        proxy.close()


def test_unavailable_error_after_retries(server: Server, name: str) -> None:
    proxy = FaultProxy(server.url, faults=10, kind="503")
    try:
        with pytest.raises(UnavailableError) as ei:
            Client(proxy.url, retries=1).acquire(name, ttl=10)
        assert (ei.value.status, ei.value.error) == (503, "store unavailable")
    finally:
        proxy.close()
    Client(server.url).acquire(name, token=proxy.forwarded[0]["token"]).release()


def test_release_retry_after_lost_reply(server: Server, name: str) -> None:
    lease = Client(server.url).acquire(name, ttl=10)
    proxy = FaultProxy(server.url, faults=1, kind="drop")
    try:
        Client(proxy.url, retries=2).release(lease)  # the retry finds it released: not an error
        assert len(proxy.forwarded) == 2
    finally:
        proxy.close()
    assert Client(server.url).state(name)["held"] is False


# --- with_lock ---------------------------------------------------------------------


def test_with_lock_renews_past_ttl(server: Server, name: str) -> None:
    c = Client(server.url)
    ttl = 3.0  # renewals every 1 s: a loaded machine has slack
    with c.with_lock(name, ttl=ttl) as held:
        start = time.monotonic()
        fence = held.lease.fence
        wait_for(lambda: held.renewals >= 4 or held.lost.is_set(), "4 renewals")
        assert not held.lost.is_set(), held.error
        assert time.monotonic() - start > ttl  # 4 renewals at ttl/3 outlast the TTL
        st = c.state(name)
        assert (st["held"], st["fence"]) == (True, fence)
        with pytest.raises(LockedError):
            c.acquire(name)
        held.check()
    assert c.state(name)["held"] is False


def test_max_hold_caps_extends(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=60, max_hold=1.5)
    granted = time.monotonic()  # the server counts the max hold from before this
    assert lease.ttl_ms == 1500  # the grant asks for no more than the max hold
    assert lease.max_hold_until is not None and lease.max_hold_until <= granted + 1.5
    deadline = granted + DEADLINE
    extends = 0
    while True:
        sent = time.monotonic()
        try:
            got = lease.extend(60)
        except LeaseLostError as e:
            assert (e.status, e.error) == (410, "lease lost") and "maxHoldMs" in e.message, e
            break
        extends += 1
        # Capped: the server's count ends by the grant plus the max hold.
        assert sent + (got - 1) / 1000.0 <= granted + 1.5, (extends, got)
        assert time.monotonic() < deadline, "still extendable long after the max hold"
        time.sleep(0.02)  # pacing
    assert extends > 0
    wait_for(lambda: c.state(name)["held"] is False, "the name freed after the max hold")


def test_with_lock_max_hold(server: Server, name: str) -> None:
    c = Client(server.url)
    seen: List[LeaseLostError] = []
    with pytest.raises(LeaseLostError) as ei:
        with c.with_lock(name, ttl=0.6, max_hold=1.5, on_lost=seen.append) as held:
            # A block that hangs: the renewal stops at the max hold.
            assert held.lost.wait(DEADLINE), "max hold not signalled"
            assert seen == [held.error]
            assert "max hold" in str(held.error), held.error
    assert ei.value is held.error
    wait_for(lambda: c.state(name)["held"] is False, "the name freed after the max hold")


def test_with_lock_signals_loss(server: Server, name: str) -> None:
    c = Client(server.url)
    seen: List[LeaseLostError] = []
    with pytest.raises(LeaseLostError) as ei:
        with c.with_lock(name, ttl=1, on_lost=seen.append) as held:
            # Someone with the token releases it behind the block's back.
            assert raw_post(server.url, f"/v1/locks/{urllib.parse.quote(name, safe='')}/release", {"token": held.lease.token}) == 200
            assert held.lost.wait(DEADLINE), "loss not signalled"
            assert isinstance(held.error, LeaseLostError) and held.error.status == 410
            assert seen == [held.error]
            # The work goes on uncooperatively: the with statement raises at its end.
    assert ei.value is held.error
    # The block's own exception is chained when the lease was lost meanwhile.
    with pytest.raises(LeaseLostError) as ei:
        with c.with_lock(name, ttl=1) as held:
            raw_post(server.url, f"/v1/locks/{urllib.parse.quote(name, safe='')}/release", {"token": held.lease.token})
            held.lost.wait(DEADLINE)
            raise KeyError("work failed")
    assert isinstance(ei.value.__cause__, KeyError)


def test_with_lock_loss_when_renewal_cannot_be_confirmed(server: Server, name: str) -> None:
    proxy = FaultProxy(server.url, faults=0, kind="drop")
    with pytest.raises(LeaseLostError) as ei:
        with Client(proxy.url, retries=0).with_lock(name, ttl=1) as held:
            proxy.close()  # the server is unreachable from now on
            assert held.lost.wait(DEADLINE), "loss not signalled"
            assert time.monotonic() >= held.lease.valid_until
    assert ei.value.status == 0 and isinstance(ei.value.__cause__, TransportError)


def test_with_lock_check_raises_and_propagates(server: Server, name: str) -> None:
    c = Client(server.url)
    with pytest.raises(LeaseLostError):
        with c.with_lock(name, ttl=1) as held:
            raw_post(server.url, f"/v1/locks/{urllib.parse.quote(name, safe='')}/release", {"token": held.lease.token})
            while True:  # cooperative work loop
                held.check()
                held.lost.wait(0.05)


def test_with_lock_releases_on_error(server: Server, name: str) -> None:
    c = Client(server.url)
    with pytest.raises(ZeroDivisionError):
        with c.with_lock(name, ttl=5):
            1 / 0
    assert c.state(name)["held"] is False


def test_with_lock_refused(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=10)
    with pytest.raises(LockedError):
        with c.with_lock(name):
            raise AssertionError("must not run")
    lease.release()


def test_errors_are_dlock_errors() -> None:
    for cls in (
        BadRequestError,
        ForbiddenError,
        LeaseLostError,
        LockedError,
        RateLimitedError,
        TransportError,
        UnauthorizedError,
        UnavailableError,
    ):
        assert issubclass(cls, DlockError)


def test_bad_client_options() -> None:
    for kwargs in ({"url": "ftp://x"}, {"url": "nohost"}, {"timeout": 0}, {"retries": -1}):
        with pytest.raises(ValueError):
            Client(**kwargs)  # type: ignore[arg-type]


# --- who holds it, min hold, force-release (issue 38) --------------------------


def test_owner_and_data_in_state_and_list(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=30, mode="mutex", owner="web-1/4242", data="build 7")
    st = c.state(name)
    assert st["mode"] == "mutex" and len(st["owners"]) == 1, st
    (h,) = c.owners(name)
    assert (h.owner, h.data, h.fence) == ("web-1/4242", "build 7", lease.fence), h
    now_ms = int(time.time() * 1000)
    assert h.since_ms is not None and abs(h.since_ms - now_ms) < 60_000, (h, now_ms)
    assert 0 <= h.age_ms < 60_000, h
    listed = [s for s in c.locks() if s["name"] == name]
    assert [o["owner"] for o in listed[0]["owners"]] == ["web-1/4242"], listed
    assert lease.token not in json.dumps(st) + json.dumps(listed)
    lease.release()
    assert c.owners(name) == [] and c.state(name)["owners"] == []


def test_owner_is_the_credential_by_default(scoped_server: Server) -> None:
    a = Client(scoped_server.url, auth_token=TEAM_A)
    lease = a.acquire("py-a/default-owner", ttl=30)
    try:
        (h,) = a.owners("py-a/default-owner")
        assert h.owner.startswith("team-a/127.0.0.1:"), h  # <tenant>/<client address>: the entry has no name
    finally:
        lease.release()


def test_shared_holds_each_have_an_owner(server: Server, name: str) -> None:
    c = Client(server.url)
    r1 = c.acquire(name, ttl=30, mode="read", owner="reader-a", data="a")
    r2 = c.acquire(name, ttl=30, mode="read", owner="reader-b")
    got = sorted((h.owner, h.data) for h in c.owners(name))
    assert got == [("reader-a", "a"), ("reader-b", "")], got
    assert c.state(name)["holders"] == 2
    r1.release()
    assert [h.owner for h in c.owners(name)] == ["reader-b"]
    r2.release()


def test_owner_and_data_refused_by_field(server: Server, name: str) -> None:
    c = Client(server.url)
    for kwargs, field in (
        (dict(data="x" * 1025), "data"),
        (dict(mode="read", min_hold=1.0), "minHoldMs"),
        (dict(min_hold=-1.0), "minHoldMs"),
    ):
        with pytest.raises(BadRequestError) as ei:
            c.acquire(name, ttl=10, **kwargs)  # type: ignore[arg-type]
        assert (ei.value.status, ei.value.field) == (400, field), (kwargs, ei.value)
    assert c.state(name)["held"] is False  # nothing left behind
    lease = c.acquire(name, ttl=10, data="x" * 1024)  # the limit itself is fine
    assert c.owners(name)[0].data == "x" * 1024
    lease.release()


def test_min_hold_keeps_the_name_after_release(server: Server, name: str) -> None:
    c = Client(server.url)
    start = time.monotonic()
    lease = c.acquire(name, ttl=30, min_hold=5.0, owner="job", mode="mutex")
    lease.release()  # answers normally, but the name stays held until grant + 5 s
    st = c.state(name)
    assert st["held"] is True and 0 < st["ttlMs"] <= 5_000, st
    assert [h.owner for h in c.owners(name)] == ["job"]
    with pytest.raises(LockedError) as ei:
        c.acquire(name)
    assert 0 < ei.value.retry_after_ms <= 5_000
    # Those checks must have run within the min hold to mean anything.
    assert time.monotonic() - start < 5.0, "the checks ran after the min hold had passed"
    # The store's own expiry frees it: a waiting acquire gets it, with a higher fence.
    nxt = c.acquire(name, ttl=10, wait=DEADLINE)
    assert nxt.fence > lease.fence
    nxt.release()


def test_with_lock_passes_owner_data_min_hold(server: Server, name: str) -> None:
    c = Client(server.url)
    with c.with_lock(name, ttl=10, mode="mutex", owner="cron/nightly", data="run 12", min_hold=30.0) as held:
        (h,) = c.owners(name)
        assert (h.owner, h.data, h.fence) == ("cron/nightly", "run 12", held.lease.fence)
    # Released at the block's end, but kept by its min hold.
    assert c.state(name)["held"] is True
    c.force_release(name)


def test_force_release(server: Server, name: str) -> None:
    c = Client(server.url)
    lease = c.acquire(name, ttl=60, mode="mutex", owner="stuck/1", min_hold=60.0)
    got = c.force_release(name)
    assert (got.name, [h.owner for h in got.ended], [h.fence for h in got.ended]) == (name, ["stuck/1"], [lease.fence])
    assert got.by.startswith("127.0.0.1:"), got  # no auth file: the client's address
    assert c.state(name)["held"] is False  # even a min hold is ended
    nxt = c.acquire(name, ttl=10)
    assert nxt.fence > lease.fence  # the forced holder's late writes are fenced out
    with pytest.raises(LeaseLostError):
        lease.extend()  # the forced holder finds out at its next extend
    nxt.release()
    assert c.force_release(name).ended == []  # nobody holds it: nothing to end


def test_force_release_needs_admin(scoped_server: Server) -> None:
    a = Client(scoped_server.url, auth_token=TEAM_A)
    lease = a.acquire("py-a/stuck", ttl=60, mode="read", owner="reader-1")
    with pytest.raises(ForbiddenError) as ei:
        a.force_release("py-a/stuck")
    assert (ei.value.status, ei.value.error) == (403, "not admin")
    with pytest.raises(ForbiddenError) as ei:
        Client(scoped_server.url, auth_token=READER).force_release("py-a/stuck")
    assert ei.value.status == 403  # "read only": the read-only check comes first
    assert a.state("py-a/stuck")["held"] is True
    admin = Client(scoped_server.url, auth_token=ADMIN)
    with pytest.raises(ForbiddenError) as ei:
        admin.force_release("py-b/x")
    assert ei.value.error == "out of scope"
    got = admin.force_release("py-a/stuck")
    assert (got.by, [h.owner for h in got.ended]) == ("ops/alice", ["reader-1"]), got
    assert a.state("py-a/stuck")["held"] is False
    with pytest.raises(LeaseLostError):
        lease.release()
