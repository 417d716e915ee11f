#!/usr/bin/env bash
# scripts/test.sh: install what the tests need, then vet and test every Go module.
#
# Usage: scripts/test.sh [go test flags...]
#   scripts/test.sh                 vet + test every module
#   scripts/test.sh -run TestX -v   extra flags go to every `go test`
#   DLOCK_LONG=1 scripts/test.sh    also run the long fault/soak profiles
#   CI=true scripts/test.sh         tests fail (never skip) without redis-server
#
# Every directory holding a go.mod is a module (the root first). In each one it
# runs `go vet ./...` and `go test -race -count=1 -timeout 15m [flags] ./...`
# (60m with DLOCK_LONG),
# carries on after a failure, prints one summary line per module, and exits
# non-zero if any module failed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# --- system packages ----------------------------------------------------------

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
APT_UPDATED=0
# Wait for another apt/dpkg run (say an install still going) instead of failing.
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

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ] || [ -x "/usr/sbin/$1" ]; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "scripts/test.sh: go not found (expected in PATH or /usr/local/go/bin)" >&2
	exit 1
fi

# go test -race needs cgo, hence a C compiler.
have gcc || apt_install gcc libc6-dev
# internal/testredis starts real redis-server processes (redis-tools, with
# redis-cli, comes along as a dependency).
have redis-server || apt_install redis-server
# e2e/replicas runs three `dlock serve` replicas behind Debian's haproxy.
have haproxy || apt_install haproxy

# --- chromium (browser tests of the dashboard, e2e/) ---------------------------
# cmd/dlock/internal/dashboard (browser_test.go) drives it with chromedp over the DevTools protocol (no driver needed).
have chromium || apt_install chromium

# --- coordination-service stores (store/etcd, store/postgres, store/zookeeper) --
# Their tests start these servers from Debian's packages on loopback ports.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || apt_install postgresql
have etcd || apt_install etcd-server
[ -f /usr/share/java/zookeeper.jar ] && have java || apt_install zookeeper
# -------------------------------------------------------------------------------

log "$(go version)"
if have redis-server; then
	log "$(redis-server --version)"
else
	log "redis-server: not installed"
fi

# Every module is vetted and tested through go.work, the development
# workspace: the modules require each other at release versions (no replace
# lines, so that `go install` and `go get` work for users), and go.work points
# those versions at the directories of this checkout. With GOWORK=off a module
# would look its siblings up on the module proxy, which has no unreleased
# version. How each published module builds as its users get it, from module
# zips and no workspace, is checked by the release rehearsal (the module
# scripts/release, TestRehearsal; docs/releasing.md).
export GOWORK="$PWD/go.work"

# DLOCK_LONG=1 turns on the long fault/soak profiles; the tests read it. The
# soak (e2e/soak) then runs 30 minutes, beyond the default per-binary timeout.
TEST_TIMEOUT=15m
if [ -n "${DLOCK_LONG:-}" ]; then
	export DLOCK_LONG
	TEST_TIMEOUT=60m
	log "DLOCK_LONG=$DLOCK_LONG: long fault/soak profiles on"
fi

# --- suites beside the modules -------------------------------------------------
# A suite marked with a line "# beside-modules" (the linters, the release
# artefacts) builds tools and reads the tree without starting servers: it starts
# now, in the background, so that its tool builds and compiles overlap the module
# tests, which spend much of their time waiting on servers and leases. Its log is
# printed, and its result counted, after the modules.
BG_DIR=$(mktemp -d)
trap 'rm -rf "$BG_DIR"' EXIT
bg_suites=()
bg_pids=()
for suite in scripts/suites/*.sh; do
	grep -qx '# beside-modules' "$suite" 2>/dev/null || continue
	logf="$BG_DIR/$(basename "$suite")"
	(
		start=$SECONDS
		rc=0
		APT_UPDATED=$APT_UPDATED bash "$suite" >"$logf.log" 2>&1 || rc=$?
		echo $((SECONDS - start)) >"$logf.secs"
		exit "$rc"
	) &
	bg_suites+=("$suite")
	bg_pids+=($!)
	log "suite $suite: started beside the modules (its log follows them)"
done

# --- modules --------------------------------------------------------------------

mapfile -t modules < <(
	find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' -not -path '*/node_modules/*' |
		sed 's|/go.mod$||' |
		LC_ALL=C sort |
		awk '$0 == "." { print; next } { rest[++n] = $0 } END { for (i = 1; i <= n; i++) print rest[i] }'
)
if [ "${#modules[@]}" -eq 0 ]; then
	echo "scripts/test.sh: no go.mod found" >&2
	exit 1
fi

summary=()
failed=0
for mod in "${modules[@]}"; do
	echo
	log "module $mod"
	start=$SECONDS
	vet=ok
	test=ok
	if ! (cd "$mod" && go vet ./...); then
		vet=FAILED
	fi
	if ! (cd "$mod" && go test -race -count=1 -timeout "$TEST_TIMEOUT" "$@" ./...); then
		test=FAILED
	fi
	status=PASS
	if [ "$vet" != ok ] || [ "$test" != ok ]; then
		status=FAIL
		failed=$((failed + 1))
	fi
	summary+=("$(printf '%-4s  %-24s  vet %-6s  test %-6s  %4ds' "$status" "$mod" "$vet" "$test" $((SECONDS - start)))")
done

# --- other suites -----------------------------------------------------------------
# Each scripts/suites/*.sh (clients in other languages, linters) installs what it
# needs, runs its suite and exits non-zero on failure. They run after the Go
# modules, in name order, with the same environment.
for i in "${!bg_suites[@]}"; do
	suite=${bg_suites[$i]}
	echo
	log "suite $suite (ran beside the modules)"
	status=PASS
	if ! wait "${bg_pids[$i]}"; then
		status=FAIL
		failed=$((failed + 1))
	fi
	logf="$BG_DIR/$(basename "$suite")"
	cat "$logf.log"
	summary+=("$(printf '%-4s  %-24s  %-24s  %4ds' "$status" "$suite" "(beside the modules)" "$(cat "$logf.secs" 2>/dev/null || echo 0)")")
done
for suite in scripts/suites/*.sh; do
	[ -e "$suite" ] || continue
	grep -qx '# beside-modules' "$suite" && continue
	echo
	log "suite $suite"
	start=$SECONDS
	status=PASS
	if ! APT_UPDATED=$APT_UPDATED bash "$suite"; then
		status=FAIL
		failed=$((failed + 1))
	fi
	summary+=("$(printf '%-4s  %-24s  %-24s  %4ds' "$status" "$suite" "" $((SECONDS - start)))")
done

echo
log "summary: ${#modules[@]} module(s) and $(compgen -G 'scripts/suites/*.sh' | wc -l) suite(s), $failed failed"
printf '    %s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
	exit 1
fi
