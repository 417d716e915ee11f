"""The client over HTTPS and mutual TLS, with a private CA (see conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import Server, client_context, start
from dlock_client import Client, ForbiddenError, TransportError, UnauthorizedError


def test_https_acquire_extend_release(tls_server: Server, certs: Path, name: str) -> None:
    c = Client(tls_server.url, ca_file=str(certs / "ca.pem"), retries=0)
    lease = c.acquire(name, ttl=30)
    assert lease.fence > 0
    assert c.extend(lease, 60) >= 59_000
    c.release(lease)
    assert c.state(name)["held"] is False


def test_https_from_environment(tls_server: Server, certs: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLOCK_SERVER", tls_server.url)
    monkeypatch.setenv("DLOCK_CA_FILE", str(certs / "ca.pem"))
    with Client(retries=0).with_lock(name, ttl=30) as held:
        assert held.lease.fence > 0


def test_https_wrong_ca_names_the_problem(tls_server: Server, certs: Path, name: str) -> None:
    c = Client(tls_server.url, ca_file=str(certs / "other-ca.pem"), retries=0)
    with pytest.raises(TransportError) as e:
        c.acquire(name, ttl=30)
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)


def test_tls_environment_ignored_for_http(server: Server, certs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLOCK_CA_FILE", str(certs / "ca.pem"))
    assert Client(server.url, retries=0).health()["status"] == "ok"


def test_tls_options_need_https(certs: Path) -> None:
    with pytest.raises(ValueError, match="https://"):
        Client("http://127.0.0.1:3009", ca_file=str(certs / "ca.pem"))
    with pytest.raises(ValueError, match="go together"):
        Client("https://127.0.0.1:3009", cert_file=str(certs / "team-a.pem"))


def test_mtls_identities(mtls_server: Server, certs: Path) -> None:
    def as_(who: str) -> Client:
        return Client(
            mtls_server.url,
            ca_file=str(certs / "ca.pem"),
            cert_file=str(certs / f"{who}.pem"),
            key_file=str(certs / f"{who}-key.pem"),
            retries=0,
        )

    team_a, reader = as_("team-a"), as_("reader")
    lease = team_a.acquire("py-a/x", ttl=30)
    team_a.extend(lease, 30)
    with pytest.raises(ForbiddenError) as f:
        team_a.acquire("py-b/x", ttl=30)
    assert f.value.error == "out of scope"
    with pytest.raises(ForbiddenError) as f:
        reader.acquire("py-a/y", ttl=30)
    assert f.value.error == "read only"
    assert reader.state("py-a/x")["held"] is True
    team_a.release(lease)

    # No client certificate: the server's alert names it, unless (TLS 1.3
    # ends the client's handshake before the server checks; on a busy
    # machine the request may be written after the server closed) the
    # connection is reset first. One of another CA: the server ends the
    # handshake.
    with pytest.raises(TransportError) as t:
        Client(mtls_server.url, ca_file=str(certs / "ca.pem"), retries=0).locks()
    msg = str(t.value)
    assert any(s in msg for s in ("CERTIFICATE_REQUIRED", "reset", "Broken pipe", "EOF")), msg
    stranger = Client(
        mtls_server.url,
        ca_file=str(certs / "ca.pem"),
        cert_file=str(certs / "stranger.pem"),
        key_file=str(certs / "stranger-key.pem"),
        retries=0,
    )
    with pytest.raises(TransportError):
        stranger.locks()


def test_mtls_revoked_identity(dlock_bin: str, certs: Path, tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    entry = {"tenant": "team-a", "identity": "uri:spiffe://dlock.test/team-a", "prefixes": ["py-a/"], "access": "read-write"}
    auth.write_text(json.dumps({"tokens": [entry]}))
    args = [
        "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server-key.pem"),
        "--client-ca", str(certs / "ca.pem"), "--auth-file", str(auth),
    ]  # fmt: skip
    s = start(dlock_bin, args=args, tls=client_context(certs, "team-a"))
    try:
        c = Client(s.url, ssl_context=client_context(certs, "team-a"), retries=0)
        c.release(c.acquire("py-a/r", ttl=30))
        auth.write_text(json.dumps({"tokens": []}))
        os.kill(s.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "auth file reloaded" not in s.output():
            assert time.monotonic() < deadline, s.output()
            time.sleep(0.05)  # poll interval of a deadline-bounded wait
        with pytest.raises(UnauthorizedError) as e:
            c.acquire("py-a/r", ttl=30)
        assert "not in the auth file" in str(e.value)
    finally:
        s.stop()
