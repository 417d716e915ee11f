"""Fixtures: a real `dlock serve` (embedded memory store) on a free loopback port.

The binary is DLOCK_BIN when set, else built once per run from the checkout
(`cd cmd/dlock && GOWORK=off go build`). Servers are stopped by PID.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
import ssl
from typing import Dict, Iterator, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[3]


class Server:
    def __init__(
        self,
        binary: str,
        env: Optional[Dict[str, str]] = None,
        args: Sequence[str] = (),
        tls: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.port = _free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._tls = tls
        self.log = tempfile.NamedTemporaryFile(prefix="dlock-serve-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.pop("DLOCK_AUTH_TOKEN", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [binary, "serve", "--addr", f"127.0.0.1:{self.port}", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        last: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.output()
                self.stop()
                raise RuntimeError(f"dlock serve exited with {self.proc.returncode}: {out}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2, context=self._tls) as r:
                    if json.load(r).get("status") == "ok":
                        return
            except OSError as e:
                last = e
            time.sleep(0.05)  # poll interval of a deadline-bounded wait
        out = self.output()
        self.stop()
        raise RuntimeError(f"dlock serve not healthy within 60s ({last}): {out}")

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def dlock_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    given = os.environ.get("DLOCK_BIN")
    if given:
        return given
    out = tmp_path_factory.mktemp("bin") / "dlock"
    env = dict(os.environ, GOWORK="off")
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=REPO / "cmd" / "dlock", env=env, check=True)
    return str(out)


def start(
    binary: str,
    env: Optional[Dict[str, str]] = None,
    args: Sequence[str] = (),
    tls: Optional[ssl.SSLContext] = None,
) -> Server:
    # The free port may be taken between the probe and the server's bind:
    # then the server exits, and another port is tried.
    for attempt in range(3):
        try:
            return Server(binary, env, args, tls)
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def server(dlock_bin: str) -> Iterator[Server]:
    s = start(dlock_bin)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def auth_server(dlock_bin: str) -> Iterator[Server]:
    s = start(dlock_bin, {"DLOCK_AUTH_TOKEN": "s3cret-token"})
    yield s
    s.stop()


# Tokens of the scoped server (hashed into its auth file by `dlock auth hash`).
TEAM_A = "py-team-a-" + uuid.uuid4().hex
READER = "py-reader-" + uuid.uuid4().hex
SLOW = "py-slow-" + uuid.uuid4().hex
ADMIN = "py-admin-" + uuid.uuid4().hex


@pytest.fixture(scope="session")
def scoped_server(dlock_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with an auth file (docs/operations.md): team-a may hold two
    locks under py-a/, the reader reads everything, slow may acquire once
    in 1000 s under py-s/, ops/alice (admin) may force-release under py-a/."""

    def sha(token: str) -> str:
        out = subprocess.run([dlock_bin, "auth", "hash"], input=token, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    tokens = [
        {"tenant": "team-a", "sha256": sha(TEAM_A), "prefixes": ["py-a/"], "access": "read-write", "maxHolds": 2},
        {"tenant": "ops", "sha256": sha(READER), "prefixes": [""], "access": "read-only"},
        {"tenant": "slow", "sha256": sha(SLOW), "prefixes": ["py-s/"], "access": "read-write", "acquiresPerSecond": 0.001},
        {"tenant": "ops", "name": "alice", "sha256": sha(ADMIN), "prefixes": ["py-a/"], "access": "admin"},
    ]
    path = tmp_path_factory.mktemp("auth") / "auth.json"
    path.write_text(json.dumps({"tokens": tokens}))
    s = start(dlock_bin, {"DLOCK_AUTH_FILE": str(path)})
    yield s
    s.stop()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name unique to the test."""
    return f"py/{request.node.name}/{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA and certificates (made with Go's crypto/x509 by
    cmd/dlock/internal/tlstest/mkcerts; its doc lists the files): the
    server's for 127.0.0.1, clients team-a and reader (URI SANs
    spiffe://dlock.test/team-a and /reader), and another CA."""
    out = tmp_path_factory.mktemp("certs")
    tool = os.environ.get("DLOCK_MKCERTS")
    if not tool:
        tool = str(tmp_path_factory.mktemp("mkcerts") / "mkcerts")
        env = dict(os.environ, GOWORK="off")
        subprocess.run(
            ["go", "build", "-o", tool, "./internal/tlstest/mkcerts"], cwd=REPO / "cmd" / "dlock", env=env, check=True
        )
    subprocess.run([tool, str(out)], check=True)
    return out


def client_context(certs: Path, who: Optional[str] = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if who:
        ctx.load_cert_chain(str(certs / f"{who}.pem"), str(certs / f"{who}-key.pem"))
    return ctx


@pytest.fixture(scope="session")
def tls_server(dlock_bin: str, certs: Path) -> Iterator[Server]:
    """HTTPS with the private CA's certificate."""
    args = ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server-key.pem")]
    s = start(dlock_bin, args=args, tls=client_context(certs))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def mtls_server(dlock_bin: str, certs: Path) -> Iterator[Server]:
    """Mutual TLS: client certificates of the private CA required; the auth
    file maps team-a's (read-write under py-a/) and reader's (read-only)."""
    entries = [
        {"tenant": "team-a", "identity": "uri:spiffe://dlock.test/team-a", "prefixes": ["py-a/"], "access": "read-write"},
        {"tenant": "ops", "identity": "uri:spiffe://dlock.test/reader", "prefixes": [""], "access": "read-only"},
    ]
    auth = certs / "auth.json"
    auth.write_text(json.dumps({"tokens": entries}))
    args = [
        "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server-key.pem"),
        "--client-ca", str(certs / "ca.pem"), "--auth-file", str(auth),
    ]  # fmt: skip
    s = start(dlock_bin, args=args, tls=client_context(certs, "reader"))
    yield s
    s.stop()
