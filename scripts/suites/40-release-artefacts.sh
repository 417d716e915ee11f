#!/usr/bin/env bash
# beside-modules
# scripts/suites/40-release-artefacts.sh: the release artefacts of
# .goreleaser.yaml, built as a snapshot and checked, published nowhere.
#
# Installs GoReleaser at the pinned version with `go install` into a cache
# directory (DLOCK_TOOLS_CACHE, default ~/.cache/dlock-tools; built once per
# machine, a few CPU-minutes), copies the files of the working tree that git
# would commit into a fresh git repository (a clean clone of the tree,
# uncommitted changes included), and runs `goreleaser release --snapshot
# --clean` there. Then it checks that every archive of
# linux/darwin/windows x amd64/arm64 exists, holds the binary and the docs,
# and matches the checksums file; runs the `dlock version` of the host's
# archive; unpacks the host's .deb with `dpkg-deb -x` into a temporary
# directory (nothing is installed on this machine), checks its files, its
# conffile and its scripts, runs the unpacked `dlock version`, and checks
# the systemd unit with `systemd-analyze verify` (that one check is skipped,
# with the reason printed, where systemd-analyze is missing). Exits non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

log() { printf '==> %s\n' "$*"; }
fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

GORELEASER_VERSION=v2.15.1

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
for tool in git dpkg-deb tar sha256sum python3; do
	command -v "$tool" >/dev/null 2>&1 || fail "$tool not found"
done

# --- GoReleaser ----------------------------------------------------------------
TOOLS=${DLOCK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlock-tools}
GORELEASER=$TOOLS/goreleaser-$GORELEASER_VERSION/goreleaser
if [ ! -x "$GORELEASER" ]; then
	log "go install github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION (into $TOOLS)"
	start=$SECONDS
	mkdir -p "$(dirname "$GORELEASER")"
	(cd / && GOWORK=off GOBIN="$(dirname "$GORELEASER")" go install "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION")
	log "GoReleaser built in $((SECONDS - start))s"
fi
log "$("$GORELEASER" --version 2>&1 | grep -m1 GitVersion | tr -s ' ')"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# --- a clean repository of the working tree -------------------------------------
SRC=$TMP/src
mkdir -p "$SRC"
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
	(cd "$REPO" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
	(cd "$REPO" && tar --null -T - -cf -) | tar -xf - -C "$SRC"
git -C "$SRC" init -q
git -C "$SRC" add -A
git -C "$SRC" -c user.name=dlock-release-suite -c user.email=suite@localhost commit -q -m snapshot
export GOWORK=$SRC/go.work

# --- the snapshot ---------------------------------------------------------------
log "goreleaser release --snapshot --clean"
start=$SECONDS
(cd "$SRC" && "$GORELEASER" release --snapshot --clean) >"$TMP/goreleaser.log" 2>&1 || {
	cat "$TMP/goreleaser.log"
	fail "goreleaser release --snapshot failed"
}
log "snapshot built in $((SECONDS - start))s"
DIST=$SRC/dist
VERSION=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$DIST/metadata.json")
log "snapshot version $VERSION"
(cd "$DIST" && ls -l ./*.tar.gz ./*.zip ./*.deb ./*checksums.txt | awk '{ printf "    %10d  %s\n", $5, $9 }')

# --- archives and checksums -----------------------------------------------------
SUMS=$DIST/dlock_${VERSION}_checksums.txt
[ -f "$SUMS" ] || fail "no checksums file dlock_${VERSION}_checksums.txt"
(cd "$DIST" && sha256sum --strict -c "$SUMS" >/dev/null) || fail "checksums do not match"
expected=()
for os in linux darwin windows; do
	for arch in amd64 arm64; do
		ext=tar.gz bin=dlock
		if [ "$os" = windows ]; then ext=zip bin=dlock.exe; fi
		archive=dlock_${VERSION}_${os}_${arch}.$ext
		expected+=("$archive")
		[ -f "$DIST/$archive" ] || fail "missing archive $archive"
		if [ "$ext" = zip ]; then
			list=$(python3 -m zipfile -l "$DIST/$archive" | awk 'NR > 1 { print $1 }')
		else
			list=$(tar -tzf "$DIST/$archive")
		fi
		for want in "$bin" README.md CHANGELOG.md docs/operations.md docs/cli.md packaging/dlock.service packaging/dlock.env; do
			grep -qx "$want" <<<"$list" || fail "$archive lacks $want"
		done
	done
done
for arch in amd64 arm64; do expected+=("dlock_${VERSION}_${arch}.deb"); done
for f in "${expected[@]}"; do
	grep -q "  $f\$" "$SUMS" || fail "$f is not in the checksums file"
done
listed=$(wc -l <"$SUMS")
[ "$listed" -eq "${#expected[@]}" ] || fail "the checksums file lists $listed files, want ${#expected[@]}: $(awk '{ print $2 }' "$SUMS" | tr '\n' ' ')"
log "${#expected[@]} artefacts, all in the checksums file and matching it"

host_arch=$(go env GOARCH)
mkdir -p "$TMP/archive"
tar -xzf "$DIST/dlock_${VERSION}_linux_${host_arch}.tar.gz" -C "$TMP/archive"
line=$("$TMP/archive/dlock" version)
log "archive: $line"
[[ "$line" == "dlock v$VERSION "* ]] || fail "archive's dlock version printed '$line', want 'dlock v$VERSION ...'"

# --- the Debian package ---------------------------------------------------------
DEB=$DIST/dlock_${VERSION}_${host_arch}.deb
dpkg-deb --info "$DEB" >"$TMP/deb-info" || fail "dpkg-deb --info $DEB"
grep -q "Package: dlock" "$TMP/deb-info" || fail "the .deb is not package dlock"
mkdir -p "$TMP/deb" "$TMP/control"
dpkg-deb -x "$DEB" "$TMP/deb"
dpkg-deb -e "$DEB" "$TMP/control"
for f in usr/bin/dlock usr/lib/systemd/system/dlock.service etc/dlock/dlock.env usr/share/doc/dlock/README.md usr/share/doc/dlock/CHANGELOG.md usr/share/doc/dlock/operations.md; do
	[ -f "$TMP/deb/$f" ] || fail "the .deb lacks /$f"
done
grep -qx /etc/dlock/dlock.env "$TMP/control/conffiles" || fail "/etc/dlock/dlock.env is not a conffile"
grep -q "adduser --system" "$TMP/control/postinst" || fail "postinst does not create the dlock user"
line=$("$TMP/deb/usr/bin/dlock" version)
log "deb: $line"
[[ "$line" == "dlock v$VERSION "* ]] || fail "unpacked dlock version printed '$line', want 'dlock v$VERSION ...'"
UNIT=$TMP/deb/usr/lib/systemd/system/dlock.service
for want in User=dlock EnvironmentFile=/etc/dlock/dlock.env ExecStart=/usr/bin/dlock Restart=on-failure NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes; do
	grep -q "^$want" "$UNIT" || fail "the unit lacks $want"
done
grep -v '^#' "$TMP/deb/etc/dlock/dlock.env" | grep -v '^$' | grep -vq '^DLOCK_[A-Z_]*=' &&
	fail "the env file has a line that is not DLOCK_*=..."

if command -v systemd-analyze >/dev/null 2>&1; then
	# The unit names /usr/bin/dlock, which is not installed here: verify a copy
	# that points at the unpacked binary. verify exits 0 on unknown keys and bad
	# values and only warns, so any output is a failure.
	mkdir -p "$TMP/verify"
	sed "s|/usr/bin/dlock|$TMP/deb/usr/bin/dlock|" "$UNIT" >"$TMP/verify/dlock.service"
	out=$(systemd-analyze verify "$TMP/verify/dlock.service" 2>&1) || fail "systemd-analyze verify: $out"
	[ -z "$out" ] || fail "systemd-analyze verify: $out"
	log "systemd-analyze verify: no findings"
	systemd-analyze security --offline=true "$TMP/verify/dlock.service" 2>/dev/null | grep 'Overall exposure' | sed 's/^/==> /' || true
else
	log "SKIP systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)"
fi
log "release artefacts: PASS"
