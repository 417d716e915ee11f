#!/usr/bin/env bash
# scripts/suites/21-js-client.sh: the JavaScript client (clients/js) — its
# TypeScript declarations checked by a pinned `tsc --noEmit`, and
# `node --test` against real `dlock serve` processes on loopback ports (HTTPS
# and mutual TLS with certificates the tests make, test/tls.test.js).
#
# Installs Debian's nodejs when `node` is missing (and npm, for the type
# check, when missing under CI=true; otherwise the check says it is
# skipped). The dlock binary is DLOCK_BIN when set, else built here once.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '==> %s\n' "$*"; }

TYPESCRIPT_VERSION=5.9.3

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

command -v node >/dev/null 2>&1 || apt_install nodejs
if ! command -v npm >/dev/null 2>&1 && [ "${CI:-}" = true ]; then apt_install npm; fi
log "node $(node --version)"
# The client needs fetch, AbortSignal.any and AbortSignal.timeout (Node 20.3+).
node -e 'if (typeof fetch !== "function" || typeof AbortSignal.any !== "function") { console.error("node " + process.version + " lacks fetch or AbortSignal.any (need 20.3+)"); process.exit(1) }'

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if command -v npm >/dev/null 2>&1; then
	log "tsc --noEmit clients/js (typescript@$TYPESCRIPT_VERSION)"
	(cd "$TMP" && npm install --no-save --no-package-lock --no-audit --no-fund --loglevel=error "typescript@$TYPESCRIPT_VERSION" >/dev/null)
	(cd clients/js && "$TMP/node_modules/.bin/tsc" --noEmit -p tsconfig.json)
else
	log "tsc check skipped: npm is not installed"
fi

if [ -z "${DLOCK_BIN:-}" ]; then
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	log "go build cmd/dlock"
	(cd cmd/dlock && go build -o "$TMP/dlock" .)
	DLOCK_BIN=$TMP/dlock
fi
export DLOCK_BIN
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

log "node --test clients/js"
cd clients/js
node --test test/*.test.js
