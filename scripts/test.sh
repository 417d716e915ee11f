#!/usr/bin/env bash
# scripts/test.sh: install what the tests need, then vet and test every Go module.
#
# Usage: scripts/test.sh [go test flags...]
#   scripts/test.sh                 vet + test every module
#   scripts/test.sh -run TestX -v   extra flags go to every `go test`
#   DLOCK_LONG=1 scripts/test.sh    also run the long fault/soak profiles
#   CI=true scripts/test.sh         tests fail (never skip) without redis-server
#   DLOCK_TEST_JOBS=1 scripts/test.sh  one module at a time (default 2)
#
# Every directory holding a go.mod is a module. In each one it runs
# `go vet ./...` and `go test -race -count=1 -timeout 15m [flags] ./...`
# (60m with DLOCK_LONG), two modules at a time,
# carries on after a failure, prints one summary line per module, and exits
# non-zero if any module failed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# cpu_secs FILE writes to FILE, and prints, the CPU seconds (user + system)
# that the calling shell's finished children used: in a module's job, what its
# vet and tests cost the machine. (times runs in the calling shell itself: in a
# $(...) subshell it would see no children.)
cpu_secs() {
	times >"$1"
	awk 'function secs(t,  m) { m = t; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", t); sub(/s$/, "", t); return m * 60 + t }
		NR == 2 { printf "%d\n", secs($1) + secs($2) }' "$1"
}

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
# internal/testredis's WithCallgrind (its test, store/valkey's
# BenchmarkServerInstructions) runs redis-server under valgrind.
have valgrind || apt_install valgrind
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
# tests, which spend much of their time waiting on servers and leases. It runs
# at a lower priority (nice 10): the modules' tests come first, and the suite's
# compiles take the CPU the tests leave idle. Its log is printed, and its result
# counted, after the modules.
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
		APT_UPDATED=$APT_UPDATED nice -n 10 bash "$suite" >"$logf.log" 2>&1 || rc=$?
		cpu_secs "$logf.times" >"$logf.cpu"
		echo "$((SECONDS - start)) $(cat "$logf.cpu")" >"$logf.secs"
		exit "$rc"
	) &
	bg_suites+=("$suite")
	bg_pids+=($!)
	log "suite $suite: started beside the modules (its log follows them)"
done

# --- modules --------------------------------------------------------------------
# DLOCK_TEST_JOBS modules (default 2) are vetted and tested at once: their
# tests spend much of their time waiting on servers, leases and timeouts, which
# one module at a time left the cores idle for. Each module's output goes to a
# log of its own, printed whole when the module ends, so logs never interleave.
# The modules with the longest tests start first (LONG_FIRST), so that the last
# one to end is a short one; the rest follow in name order.
JOBS=${DLOCK_TEST_JOBS:-2}
if ! [[ "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
	echo "scripts/test.sh: DLOCK_TEST_JOBS=$JOBS: want a positive integer" >&2
	exit 2
fi
LONG_FIRST=(./e2e . ./store/zookeeper ./bench ./cmd/dlock)

mapfile -t found < <(
	find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' -not -path '*/node_modules/*' |
		sed 's|/go.mod$||' |
		LC_ALL=C sort
)
if [ "${#found[@]}" -eq 0 ]; then
	echo "scripts/test.sh: no go.mod found" >&2
	exit 1
fi
modules=()
for mod in "${LONG_FIRST[@]}"; do
	for f in "${found[@]}"; do
		if [ "$f" = "$mod" ]; then modules+=("$mod"); fi
	done
done
for f in "${found[@]}"; do
	case " ${LONG_FIRST[*]} " in *" $f "*) continue ;; esac
	modules+=("$f")
done

# run_module MOD LOG: vet and test MOD, its output in LOG, then "VET TEST SECS"
# in LOG.res.
run_module() {
	local mod=$1 logf=$2 start=$SECONDS vet=ok test=ok
	shift 2
	{
		(cd "$mod" && go vet ./...) || vet=FAILED
		(cd "$mod" && go test -race -count=1 -timeout "$TEST_TIMEOUT" "$@" ./...) || test=FAILED
	} >"$logf" 2>&1
	cpu_secs "$logf.times" >"$logf.cpu"
	echo "$vet $test $((SECONDS - start)) $(cat "$logf.cpu")" >"$logf.res"
}


declare -A mod_pid_of=()
declare -A mod_line=()
failed=0
# finish PID: print the log of the module whose job was PID, and its line.
finish() {
	local pid=$1 mod i logf vet test secs cpu status
	mod=${mod_pid_of[$pid]}
	unset "mod_pid_of[$pid]"
	for i in "${!modules[@]}"; do [ "${modules[$i]}" = "$mod" ] && break; done
	logf="$BG_DIR/module-$i.log"
	echo
	log "module $mod"
	cat "$logf"
	read -r vet test secs cpu <"$logf.res" 2>/dev/null || { vet=FAILED test=FAILED secs=0 cpu=0; }
	status=PASS
	if [ "$vet" != ok ] || [ "$test" != ok ]; then
		status=FAIL
		failed=$((failed + 1))
	fi
	mod_line[$mod]=$(printf '%-4s  %-24s  vet %-6s  test %-6s  %4ds  (%ds CPU)' "$status" "$mod" "$vet" "$test" "$secs" "$cpu")
}
log "testing ${#modules[@]} modules, $JOBS at a time: ${modules[*]}"
for i in "${!modules[@]}"; do
	while [ "${#mod_pid_of[@]}" -ge "$JOBS" ]; do
		done_pid=
		wait -n -p done_pid "${!mod_pid_of[@]}" || true
		finish "$done_pid"
	done
	run_module "${modules[$i]}" "$BG_DIR/module-$i.log" "$@" &
	mod_pid_of[$!]=${modules[$i]}
	log "module ${modules[$i]}: started"
done
while [ "${#mod_pid_of[@]}" -gt 0 ]; do
	done_pid=
	wait -n -p done_pid "${!mod_pid_of[@]}" || true
	finish "$done_pid"
done
summary=()
for mod in "${modules[@]}"; do summary+=("${mod_line[$mod]}"); done

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
	read -r secs cpu <"$logf.secs" 2>/dev/null || { secs=0 cpu=0; }
	summary+=("$(printf '%-4s  %-24s  %-24s  %4ds  (%ds CPU)' "$status" "$suite" "(beside the modules)" "$secs" "$cpu")")
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
