#!/usr/bin/env bash
# Lints the OpenAPI contract embedded in dlock serve
# (cmd/dlock/internal/server/openapi.json) with Redocly CLI, pinned, installed
# from the npm registry into .cache/redocly (gitignored). Every rule of
# Redocly's recommended set is an error (see redocly.yaml); exits non-zero on
# any problem.
#
# 1.34.20 is pinned because it runs on Debian bookworm's nodejs 18 as well as on
# newer nodes (the 2.x line needs node >= 20.19).
set -euo pipefail
cd "$(dirname "$0")/../.."

REDOCLY_VERSION=1.34.20
CACHE=.cache/redocly
SPEC=cmd/dlock/internal/server/openapi.json

log() { printf '==> %s\n' "$*"; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
APT_OPTS=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
apt_install() {
	if [ "${APT_UPDATED:-0}" != 1 ]; then
		log "apt-get update"
		"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq
		APT_UPDATED=1
	fi
	log "apt-get install -y $*"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "$@"
}

command -v node >/dev/null 2>&1 || apt_install nodejs
command -v npm >/dev/null 2>&1 || apt_install npm

bin=$CACHE/node_modules/.bin/redocly
installed=$(node -p "require('./$CACHE/node_modules/@redocly/cli/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$REDOCLY_VERSION" ]; then
	log "npm install @redocly/cli@$REDOCLY_VERSION into $CACHE"
	mkdir -p "$CACHE"
	npm install --prefix "$CACHE" --no-save --no-audit --no-fund --loglevel=error "@redocly/cli@$REDOCLY_VERSION"
fi

log "redocly lint $SPEC (@redocly/cli $REDOCLY_VERSION, node $(node --version))"
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
"$bin" lint --config scripts/suites/redocly.yaml "$SPEC"
