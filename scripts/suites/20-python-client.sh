#!/usr/bin/env bash
# scripts/suites/20-python-client.sh: the Python client (clients/python) —
# mypy --strict, a wheel build, and pytest against real `dlock serve`
# processes on loopback ports.
#
# Uses Debian's /usr/bin/python3 (python3, python3-pytest, mypy,
# python3-setuptools, python3-wheel, python3-pip, python3-venv), installed
# when missing. Runs the offline installs of clients/python/README.md as
# written, including the one it shows failing in a default venv. The dlock binary is DLOCK_BIN
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

# The offline installs clients/python/README.md documents, run as written:
# each fenced block after a marker "<!-- offline-install: NAME -->". In a
# scratch directory holding a copy of clients/python, with python3 on PATH
# being $PY (Debian's, as the README says) and no package index:
#   - "fails in a default venv": its "$ " commands, the last of which must
#     fail with every line the README shows of its output;
#   - "system-site-packages" and "wheel": each block with bash -e, after which
#     venv/bin/python must import dlock_client from the venv.
"$PY" -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
"$PY" - clients/python/README.md "$TMP/blocks" <<'PY'
import os, re, sys
text = open(sys.argv[1]).read()
os.makedirs(sys.argv[2])
names = re.findall(r"<!-- offline-install: (.+?) -->\n```[a-z]*\n(.*?)```", text, re.S)
want = {"fails in a default venv", "system-site-packages", "wheel"}
if {n for n, _ in names} != want:
    sys.exit(f"clients/python/README.md: offline-install blocks {sorted(n for n, _ in names)}, want {sorted(want)}")
for name, body in names:
    open(os.path.join(sys.argv[2], name.replace(" ", "-")), "w").write(body)
PY
mkdir -p "$TMP/pybin"
ln -s "$PY" "$TMP/pybin/python3"
offline_dir() { # a fresh scratch directory with clients/python in it
	local d=$TMP/offline-$1
	mkdir -p "$d/clients"
	cp -r clients/python "$d/clients/python"
	echo "$d"
}
offline_env=(env -u PIP_FIND_LINKS PATH="$TMP/pybin:$PATH" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONNOUSERSITE=1)

log "clients/python/README.md: the offline install that fails in a default venv"
d=$(offline_dir fails)
mapfile -t cmds < <(sed -n 's/^\$ //p' "$TMP/blocks/fails-in-a-default-venv")
last=$((${#cmds[@]} - 1))
for i in "${!cmds[@]}"; do
	rc=0
	(cd "$d" && "${offline_env[@]}" bash -c "${cmds[$i]}") >"$TMP/fails.log" 2>&1 || rc=$?
	if [ "$i" -lt "$last" ] && [ "$rc" -ne 0 ]; then
		cat "$TMP/fails.log"
		echo "20-python-client: '${cmds[$i]}' failed (exit $rc)" >&2
		exit 1
	fi
done
if [ "$rc" -eq 0 ]; then
	cat "$TMP/fails.log"
	echo "20-python-client: '${cmds[$last]}' succeeded in a default venv ($("$d/venv/bin/python" -c 'import setuptools; print("setuptools", setuptools.__version__)')); clients/python/README.md says it fails: update the README" >&2
	exit 1
fi
while IFS= read -r want; do
	case $want in '$ '* | '...' | '') continue ;; esac
	grep -qF -- "$(echo "$want" | sed 's/^ *//')" "$TMP/fails.log" || {
		cat "$TMP/fails.log"
		echo "20-python-client: the failing offline install did not print '$want', which clients/python/README.md shows" >&2
		exit 1
	}
done <"$TMP/blocks/fails-in-a-default-venv"
log "  fails as the README shows (exit $rc, $(grep -o "invalid command 'bdist_wheel'" "$TMP/fails.log" | head -1))"

for recipe in system-site-packages wheel; do
	log "clients/python/README.md: offline install, recipe '$recipe'"
	d=$(offline_dir "$recipe")
	(cd "$d" && "${offline_env[@]}" bash -euo pipefail "$TMP/blocks/$recipe") >"$TMP/$recipe.log" 2>&1 ||
		{ cat "$TMP/$recipe.log"; echo "20-python-client: the offline recipe '$recipe' of clients/python/README.md failed" >&2; exit 1; }
	(cd "$TMP" && "$d/venv/bin/python" -c 'import dlock_client, sys; sys.exit(0 if dlock_client.__file__.startswith(sys.argv[1]) else 1)' "$d/venv/") ||
		{ cat "$TMP/$recipe.log"; echo "20-python-client: after the offline recipe '$recipe', the venv does not import dlock_client from itself" >&2; exit 1; }
done

log "pytest clients/python"
rc=0
(cd clients/python && "$PY" -m pytest -p no:cacheprovider -ra) || rc=$?
if [ "$rc" -eq 5 ]; then
	echo "20-python-client: pytest collected no tests" >&2
fi
exit "$rc"
