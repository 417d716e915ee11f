#!/usr/bin/env bash
# scripts/suites/20-python-client.sh: the Python client (clients/python) —
# mypy --strict, a wheel build, and pytest against real `dlock serve`
# processes on loopback ports.
#
# Uses Debian's /usr/bin/python3 (python3, python3-pytest, mypy,
# python3-setuptools, python3-wheel, python3-pip), installed when missing. The dlock binary is DLOCK_BIN
# when set, else built here once. Exits non-zero on any failure, including
# a pytest run that collected no tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '==> %s\n' "$*"; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
APT_UPDATED=${APT_UPDATED:-0}
APT_OPTS=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
apt_install() {
	if [ "$APT_UPDATED" -eq 0 ]; then
		log "apt-get update"
		"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq
		APT_UPDATED=1
	fi
	log "apt-get install -y $*"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "$@"
}

PY=/usr/bin/python3
if [ ! -x "$PY" ]; then apt_install python3; fi
missing=()
"$PY" -c 'import pytest' 2>/dev/null || missing+=(python3-pytest)
"$PY" -m mypy --version >/dev/null 2>&1 || missing+=(mypy)
"$PY" -c 'import setuptools' 2>/dev/null || missing+=(python3-setuptools)
"$PY" -c 'import wheel' 2>/dev/null || missing+=(python3-wheel)
"$PY" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ "${#missing[@]}" -gt 0 ]; then apt_install "${missing[@]}"; fi
log "$("$PY" --version), pytest $("$PY" -c 'import pytest; print(pytest.__version__)'), $("$PY" -m mypy --version)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -z "${DLOCK_BIN:-}" ]; then
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	log "go build cmd/dlock"
	(cd cmd/dlock && go build -o "$TMP/dlock" .)
	DLOCK_BIN=$TMP/dlock
fi
export DLOCK_BIN
export PYTHONDONTWRITEBYTECODE=1
# The TLS tests' certificates: made with Go's crypto/x509 by
# cmd/dlock/internal/tlstest/mkcerts (DLOCK_MKCERTS when set).
if [ -z "${DLOCK_MKCERTS:-}" ]; then
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	log "go build cmd/dlock/internal/tlstest/mkcerts"
	(cd cmd/dlock && go build -o "$TMP/mkcerts" ./internal/tlstest/mkcerts)
	DLOCK_MKCERTS=$TMP/mkcerts
fi
export DLOCK_MKCERTS

log "mypy --strict clients/python"
(cd clients/python && "$PY" -m mypy --strict --no-incremental src tests)

log "wheel of clients/python"
cp -r clients/python "$TMP/src"
(cd "$TMP/src" && "$PY" -c 'import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))' "$TMP/dist" >"$TMP/wheel.log" 2>&1) ||
	{ cat "$TMP/wheel.log"; exit 1; }
"$PY" - "$TMP"/dist/*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("dlock_client/__init__.py", "dlock_client/py.typed"):
    if want not in names:
        sys.exit(f"wheel {sys.argv[1]} lacks {want}: {names}")
print("wheel ok:", sys.argv[1].rsplit("/", 1)[-1])
PY

# The offline install clients/python/README.md documents: no package index,
# the build backend from the Python installation.
log "pip install --no-build-isolation --no-index clients/python (offline)"
cp -r clients/python "$TMP/offline-src"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install --quiet --no-build-isolation --no-index --no-deps \
	--target "$TMP/offline" "$TMP/offline-src" >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log"; exit 1; }
(cd "$TMP" && PYTHONPATH="$TMP/offline" "$PY" -c 'import dlock_client, sys; sys.exit(0 if dlock_client.__file__.startswith(sys.argv[1]) else 1)' "$TMP/offline") ||
	{ echo "20-python-client: the offline install did not install dlock_client" >&2; exit 1; }

log "pytest clients/python"
rc=0
(cd clients/python && "$PY" -m pytest -p no:cacheprovider -ra) || rc=$?
if [ "$rc" -eq 5 ]; then
	echo "20-python-client: pytest collected no tests" >&2
fi
exit "$rc"
