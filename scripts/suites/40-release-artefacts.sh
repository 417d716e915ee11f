#!/usr/bin/env bash
# beside-modules
# scripts/suites/40-release-artefacts.sh: the release artefacts of
# .goreleaser.yaml, built as a snapshot twice and checked, published nowhere.
#
# Tools (lib/tools.sh): GoReleaser, govulncheck and cyclonedx-gomod at pinned
# versions, built once per machine and kept in the Go build cache; the Go
# toolchain of the binaries (GOTOOLCHAIN in .goreleaser.yaml) comes from the Go
# module proxy the first time; gpg signs with a throwaway key made here.
#
# The files of the working tree that git would commit (uncommitted changes
# included) become a fresh git repository, and a `git clone` of it a second one
# at another path (its files have other mtimes). `goreleaser release --snapshot
# --clean` runs in both. Then, on the first, it checks:
#   artefacts  every archive of linux (DLOCK_LONG=1: and darwin, windows) x
#              amd64/arm64 and both .deb
#              exist, hold their files and match the checksums file; the host's
#              archive and .deb run `dlock version`; the .deb's unit, conffile
#              and scripts (systemd-analyze verify where it is installed);
#   toolchain  every binary was built by the toolchain .goreleaser.yaml names,
#              and govulncheck -mode=binary finds no vulnerability it reaches;
#   sbom       every archive and .deb has <artefact>.sbom.json, in the checksums
#              file, listing exactly the modules (and versions) and the Go
#              version that `go version -m` prints for the binary inside it;
#   signature  the checksums file's signature verifies, and a download checks,
#              with the commands of docs/operations.md ("Verify a download")
#              run as written; a tampered checksums file is refused;
#   reproducible  the two builds' binaries, archives, packages, SBOMs and
#              checksums files are byte-identical, and no binary holds a build
#              path.
# Every failure is reported (the checks go on after one), then it exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

log() { printf '==> %s\n' "$*"; }
failures=()
fail() {
	printf 'FAIL: %s\n' "$*" >&2
	failures+=("$*")
}
die() {
	fail "$*"
	exit 1
}

GORELEASER_VERSION=v2.15.1
CYCLONEDX_GOMOD_VERSION=v1.10.0
# govulncheck and its database at the versions the lint suite pins.
GOVULNCHECK_VERSION=$(sed -n 's/^GOVULNCHECK_VERSION=//p' scripts/suites/30-lint.sh)
VULNDB_VERSION=$(sed -n 's/^VULNDB_VERSION=//p' scripts/suites/30-lint.sh)

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
for tool in git dpkg-deb tar sha256sum python3 gpg gpgv gpgconf cmp; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then PY=$(command -v python3); fi

# --- targets --------------------------------------------------------------------
# The default profile builds the linux targets (amd64 and arm64: their archives
# and .deb packages); DLOCK_LONG=1 (the long profile, and step 3 of a release in
# docs/releasing.md) or DLOCK_RELEASE_ALL=1 builds all six of .goreleaser.yaml.
# go1.27.3 compiles the standard library and every dependency once per target,
# about four fifths of the suite's CPU on a new machine: six targets cost the
# test run more than its budget allows (docs/releasing.md, "The release suite").
# Every check is the same for each target; the darwin and windows archives
# differ from linux's in name and format (windows: zip) only.
GOOS_ALL="linux darwin windows"
GOOS_BUILT="linux"
if [ -n "${DLOCK_LONG:-}" ] || [ -n "${DLOCK_RELEASE_ALL:-}" ]; then GOOS_BUILT=$GOOS_ALL; fi

# --- tools ----------------------------------------------------------------------
suite_start=$SECONDS
# shellcheck source=lib/tools.sh
. "$REPO/scripts/suites/lib/tools.sh"
GORELEASER=$(go_tool "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION")
GOVULNCHECK=$(go_tool "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION")
CYCLONEDX=$(go_tool "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$CYCLONEDX_GOMOD_VERSION")
VULNDB=$(vulndb "$VULNDB_VERSION")
# scripts/release/sbom.sh, which GoReleaser runs, finds cyclonedx-gomod on PATH.
export PATH="$(dirname "$CYCLONEDX"):$PATH"
RELEASE_GO=$(sed -n 's/^ *- GOTOOLCHAIN=\(go[0-9.]*\)$/\1/p' .goreleaser.yaml | head -1)
if [ -n "$RELEASE_GO" ]; then
	start=$SECONDS
	(cd / && GOTOOLCHAIN=$RELEASE_GO go version >/dev/null) || die "GOTOOLCHAIN=$RELEASE_GO go version"
	[ $((SECONDS - start)) -le 5 ] || log "toolchain $RELEASE_GO fetched in $((SECONDS - start))s"
fi
log "$("$GORELEASER" --version 2>&1 | grep -m1 GitVersion | tr -s ' '), govulncheck $GOVULNCHECK_VERSION, cyclonedx-gomod $CYCLONEDX_GOMOD_VERSION, release toolchain ${RELEASE_GO:-(none named)}; tools ready in $((SECONDS - suite_start))s"

TMP=$(mktemp -d)
# gpg starts an agent for the suite's GNUPGHOME: stop it, then remove all.
trap 'GNUPGHOME=$TMP/gnupg gpgconf --kill all 2>/dev/null || true; rm -rf "$TMP"' EXIT

# --- two clean repositories of the working tree ---------------------------------
SRC=$TMP/a/dlock
mkdir -p "$SRC"
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
	(cd "$REPO" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
	(cd "$REPO" && tar --null -T - -cf -) | tar -xf - -C "$SRC"
if [ "$GOOS_BUILT" != "$GOOS_ALL" ]; then
	# The snapshot's copy of the configuration builds only GOOS_BUILT.
	grep -qx "    goos: \[${GOOS_ALL// /, }\]" "$SRC/.goreleaser.yaml" ||
		die ".goreleaser.yaml has no line 'goos: [${GOOS_ALL// /, }]': update GOOS_ALL in this suite"
	sed -i "s/^    goos: \[.*\]\$/    goos: [${GOOS_BUILT// /, }]/" "$SRC/.goreleaser.yaml"
	log "targets: $GOOS_BUILT x amd64/arm64 (DLOCK_LONG=1 or DLOCK_RELEASE_ALL=1: $GOOS_ALL)"
fi
git -C "$SRC" init -q
git -C "$SRC" add -A
git -C "$SRC" -c user.name=dlock-release-suite -c user.email=suite@localhost commit -q -m snapshot
# GoReleaser reads the git state, the remote's URL among it (nothing is fetched);
# without one it carries on with commit "none" and no commit date, which the
# times in the archives and packages come from.
git -C "$SRC" remote add origin https://github.com/dlock-dev/dlock.git
SRC2=$TMP/second-checkout/dlock
git clone -q "$SRC" "$SRC2"
git -C "$SRC2" remote set-url origin https://github.com/dlock-dev/dlock.git

# --- a throwaway signing key ----------------------------------------------------
export GNUPGHOME=$TMP/gnupg
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "dlock release suite (throwaway) <suite@localhost>" ed25519 sign 1d 2>/dev/null
DLOCK_SIGNING_KEY=$(gpg --batch --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
export DLOCK_SIGNING_KEY
gpg --batch --armor --export "$DLOCK_SIGNING_KEY" 2>/dev/null >"$TMP/dlock-release-key.asc"

# --- the snapshots ----------------------------------------------------------------
snapshot() { # DIR NAME
	local start=$SECONDS
	(cd "$1" && GOWORK=$1/go.work "$GORELEASER" release --snapshot --clean) >"$TMP/goreleaser-$2.log" 2>&1 || {
		cat "$TMP/goreleaser-$2.log"
		die "goreleaser release --snapshot failed in the $2 checkout"
	}
	log "snapshot in the $2 checkout built in $((SECONDS - start))s"
}
snapshot "$SRC" first
snapshot "$SRC2" second
DIST=$SRC/dist
VERSION=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$DIST/metadata.json")
log "snapshot version $VERSION"
(cd "$DIST" && { ls -l ./*.tar.gz ./*.zip ./*.deb ./*.sbom.json ./*checksums.txt* 2>/dev/null || true; } | awk '{ printf "    %10d  %s\n", $5, $9 }')
# The binaries GoReleaser built: os arch path, one a line.
"$PY" - "$DIST/artifacts.json" "$SRC" >"$TMP/binaries" <<'PY'
import json, os, sys
for a in json.load(open(sys.argv[1])):
    if a["type"] == "Binary":  # its path is relative to the checkout
        print(a["goos"], a["goarch"], os.path.join(sys.argv[2], a["path"]))
PY

# --- archives and checksums -----------------------------------------------------
SUMS=$DIST/dlock_${VERSION}_checksums.txt
[ -f "$SUMS" ] || die "no checksums file dlock_${VERSION}_checksums.txt"
(cd "$DIST" && sha256sum --strict -c "$SUMS" >/dev/null) || fail "checksums do not match"
packaged=() # archives and packages: each has an SBOM
for os in $GOOS_BUILT; do
	for arch in amd64 arm64; do
		ext=tar.gz bin=dlock
		if [ "$os" = windows ]; then ext=zip bin=dlock.exe; fi
		archive=dlock_${VERSION}_${os}_${arch}.$ext
		packaged+=("$archive")
		[ -f "$DIST/$archive" ] || {
			fail "missing archive $archive"
			continue
		}
		if [ "$ext" = zip ]; then
			list=$("$PY" -m zipfile -l "$DIST/$archive" | awk 'NR > 1 { print $1 }')
		else
			list=$(tar -tzf "$DIST/$archive")
		fi
		for want in "$bin" README.md CHANGELOG.md docs/operations.md docs/cli.md packaging/dlock.service packaging/dlock.env; do
			grep -qx "$want" <<<"$list" || fail "$archive lacks $want"
		done
	done
done
for arch in amd64 arm64; do packaged+=("dlock_${VERSION}_${arch}.deb"); done
expected=("${packaged[@]}")
for f in "${packaged[@]}"; do expected+=("$f.sbom.json"); done
for f in "${expected[@]}"; do
	grep -q "  $f\$" "$SUMS" || fail "$f is not in the checksums file"
done
listed=$(wc -l <"$SUMS")
[ "$listed" -eq "${#expected[@]}" ] || fail "the checksums file lists $listed files, want ${#expected[@]} (archives, packages, their SBOMs): $(awk '{ print $2 }' "$SUMS" | tr '\n' ' ')"
log "artefacts: ${#expected[@]} files in the checksums file, all matching it"

host_arch=$(go env GOARCH)
mkdir -p "$TMP/archive"
tar -xzf "$DIST/dlock_${VERSION}_linux_${host_arch}.tar.gz" -C "$TMP/archive"
line=$("$TMP/archive/dlock" version)
log "archive: $line"
[[ "$line" == "dlock v$VERSION "* ]] || fail "archive's dlock version printed '$line', want 'dlock v$VERSION ...'"

# --- the Debian package ---------------------------------------------------------
DEB=$DIST/dlock_${VERSION}_${host_arch}.deb
dpkg-deb --info "$DEB" >"$TMP/deb-info" || die "dpkg-deb --info $DEB"
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
if grep -v '^#' "$TMP/deb/etc/dlock/dlock.env" | grep -v '^$' | grep -vq '^DLOCK_[A-Z_]*='; then
	fail "the env file has a line that is not DLOCK_*=..."
fi
if command -v systemd-analyze >/dev/null 2>&1; then
	# The unit names /usr/bin/dlock, which is not installed here: verify a copy
	# that points at the unpacked binary. verify exits 0 on unknown keys and bad
	# values and only warns, so any output is a failure.
	mkdir -p "$TMP/verify"
	sed "s|/usr/bin/dlock|$TMP/deb/usr/bin/dlock|" "$UNIT" >"$TMP/verify/dlock.service"
	if ! out=$(systemd-analyze verify "$TMP/verify/dlock.service" 2>&1) || [ -n "$out" ]; then
		fail "systemd-analyze verify: $out"
	else
		log "systemd-analyze verify: no findings"
	fi
	systemd-analyze security --offline=true "$TMP/verify/dlock.service" 2>/dev/null | grep 'Overall exposure' | sed 's/^/==> /' || true
else
	log "SKIP systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)"
fi

# --- 1. toolchain and vulnerabilities ---------------------------------------------
start=$SECONDS
[ -n "$RELEASE_GO" ] || fail ".goreleaser.yaml names no GOTOOLCHAIN=goX.Y.Z in the build's env: the binaries get whatever Go the release machine has"
grep -q "GOTOOLCHAIN=${RELEASE_GO:-none}" docs/releasing.md || fail "docs/releasing.md does not say the binaries are built with ${RELEASE_GO:-a named toolchain} (GOTOOLCHAIN=...)"
mkdir -p "$TMP/vuln"
while read -r os arch path; do
	built=$(go version "$path" | awk '{ print $2 }')
	[ "$built" = "${RELEASE_GO:-}" ] || fail "$os/$arch binary built with $built, want ${RELEASE_GO:-the toolchain .goreleaser.yaml names}"
	rc=0
	"$GOVULNCHECK" -db "file://$VULNDB" -mode=binary -format json "$path" >"$TMP/vuln/$os-$arch.json" 2>"$TMP/vuln/$os-$arch.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$TMP/vuln/$os-$arch.err" >&2
		fail "govulncheck -mode=binary $os/$arch exited $rc"
		continue
	fi
	if ! report=$("$PY" - "$TMP/vuln/$os-$arch.json" <<'PY'
import json, sys

# A stream of JSON objects; a finding whose trace starts at a function is one
# the binary reaches (symbol-level), else only its module/package is in it.
dec, text, pos = json.JSONDecoder(), open(sys.argv[1]).read(), 0
summaries, called, scanned = {}, {}, ""
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    obj, pos = dec.raw_decode(text, pos)
    if "config" in obj:
        scanned = obj["config"].get("scan_level", "")
    if "osv" in obj:
        summaries[obj["osv"]["id"]] = obj["osv"].get("summary", "")
    f = obj.get("finding")
    if f and f["trace"] and f["trace"][0].get("function"):
        top = f["trace"][0]
        called.setdefault((f["osv"], top["module"]), (top.get("version", ""), f.get("fixed_version", "")))
for (osv, mod), (ver, fixed) in sorted(called.items()):
    print(f"    VULN {osv} {mod}@{ver or '?'} fixed in {fixed or 'no release'}: {summaries.get(osv, '')}")
if scanned and scanned != "symbol":
    print(f"    govulncheck scanned at {scanned} level, not symbol: it cannot tell what the binary reaches")
    sys.exit(1)
sys.exit(1 if called else 0)
PY
	); then
		printf '%s\n' "$report" >&2
		fail "$os/$arch binary: $(grep -c VULN <<<"$report") reachable vulnerabilities (govulncheck -mode=binary)"
	fi
done <"$TMP/binaries"
log "toolchain: $(wc -l <"$TMP/binaries") binaries checked (toolchain ${RELEASE_GO:-?}, govulncheck -mode=binary) in $((SECONDS - start))s"

# --- 2. SBOMs ---------------------------------------------------------------------
# The binary inside each archive and package, and what go version -m says of it,
# against the SBOM beside it.
mkdir -p "$TMP/sbom"
for f in "${packaged[@]}"; do
	doc=$DIST/$f.sbom.json
	[ -f "$doc" ] || {
		fail "no SBOM $f.sbom.json beside $f"
		continue
	}
	[ -f "$DIST/$f" ] || continue
	x=$TMP/sbom/$f
	mkdir -p "$x"
	case $f in
	*.tar.gz) tar -xzf "$DIST/$f" -C "$x" dlock && bin=$x/dlock ;;
	*.zip) "$PY" -m zipfile -e "$DIST/$f" "$x" && bin=$x/dlock.exe ;;
	*.deb) dpkg-deb -x "$DIST/$f" "$x" && bin=$x/usr/bin/dlock ;;
	esac
	go version -m "$bin" >"$x.buildinfo" || {
		fail "go version -m on the binary of $f"
		continue
	}
	out=$("$PY" - "$x.buildinfo" "$doc" "v$VERSION" <<'PY'
import json, sys
from urllib.parse import unquote

info, doc, version = sys.argv[1:]
lines = open(info).read().splitlines()
gover = lines[0].split(": ", 1)[1].strip()
want, main = {}, None
prev = None
for ln in lines[1:]:
    f = ln.split("\t")[1:]
    if not f:
        continue
    if f[0] == "mod":
        main = f[1]
    elif f[0] == "dep":
        prev = f[1]
        want[f[1]] = f[2]
    elif f[0] == "=>" and prev:
        # A replacement: the module is built from it (a directory of the
        # workspace here); the SBOM names the required version.
        pass
bom = json.load(open(doc))
have = {}
std = None
for c in bom.get("components", []):
    purl = c.get("purl", "")
    if not purl.startswith("pkg:golang/"):
        continue
    path, _, ver = purl[len("pkg:golang/"):].split("?")[0].partition("@")
    path, ver = unquote(path), unquote(ver)
    if path == "std":
        std = ver
        continue
    have[path] = ver
errs = []
comp = bom.get("metadata", {}).get("component", {})
if comp.get("name") != main:
    errs.append(f"main component {comp.get('name')!r}, binary's main module {main!r}")
if comp.get("version") != version:
    errs.append(f"main component version {comp.get('version')!r}, want {version}")
if std != gover:
    errs.append(f"std at {std!r}, binary built by {gover}")
for p in sorted(set(want) | set(have)):
    if want.get(p) != have.get(p):
        errs.append(f"{p}: binary {want.get(p, 'absent')}, SBOM {have.get(p, 'absent')}")
for e in errs:
    print("    " + e)
if not want:
    print("    go version -m lists no dependency")
    sys.exit(1)
sys.exit(1 if errs else 0)
PY
	) || {
		printf '%s\n' "$out" >&2
		fail "$f.sbom.json does not list the modules of the binary in $f"
		continue
	}
done
log "sbom: ${#packaged[@]} artefacts checked against go version -m of their binary"

# --- 3. the signature, verified as docs/operations.md tells users -----------------
SIG=$SUMS.sig
if [ ! -f "$SIG" ]; then
	fail "no signature dlock_${VERSION}_checksums.txt.sig"
else
	# The commands of docs/operations.md's block after "<!-- verify-download -->",
	# run as written in a directory holding what a user downloaded (the checksums
	# file, its signature, one archive, the public key), with the version of
	# this snapshot for the example's.
	steps=$(awk '/<!-- verify-download -->/ { on = 1; next } on && /^```sh$/ { code = 1; next } code && /^```$/ { exit } code' docs/operations.md)
	[ -n "$steps" ] || fail "docs/operations.md has no verify-download block"
	doc_version=$(sed -n 's/.*dlock_\([0-9][0-9.]*\)_checksums.txt.*/\1/p' <<<"$steps" | head -1)
	steps=${steps//"dlock_${doc_version}_"/"dlock_${VERSION}_"}
	for dir in good tampered; do
		mkdir -p "$TMP/download-$dir"
		cp "$SUMS" "$SIG" "$DIST/dlock_${VERSION}_linux_${host_arch}.tar.gz" "$TMP/dlock-release-key.asc" "$TMP/download-$dir/"
	done
	echo "0000000000000000000000000000000000000000000000000000000000000000  dlock_extra.tar.gz" >>"$TMP/download-tampered/$(basename "$SUMS")"
	verify() { (cd "$1" && env -u GNUPGHOME HOME="$1" bash -euo pipefail -c "$steps") >"$1.log" 2>&1; }
	if verify "$TMP/download-good"; then
		log "signature: the download verifies as docs/operations.md shows ($(grep -c . <<<"$steps") commands)"
	else
		cat "$TMP/download-good.log" >&2
		fail "the documented verification of a download failed"
	fi
	if verify "$TMP/download-tampered"; then
		fail "the documented verification accepted a tampered checksums file"
	fi
fi

# --- 4. reproducible --------------------------------------------------------------
DIST2=$SRC2/dist
differ=()
compare=("$(basename "$SUMS")")
while read -r _ _ path; do compare+=("${path#"$DIST"/}"); done <"$TMP/binaries"
for f in "${expected[@]}"; do compare+=("$f"); done
for f in "${compare[@]}"; do
	if [ ! -f "$DIST2/$f" ] || ! cmp -s "$DIST/$f" "$DIST2/$f"; then differ+=("$f"); fi
done
if [ "${#differ[@]}" -ne 0 ]; then
	fail "two builds of one commit differ in ${#differ[@]} of ${#compare[@]} files: ${differ[*]}"
else
	log "reproducible: ${#compare[@]} files (binaries, archives, packages, SBOMs, checksums) byte-identical in two checkouts"
fi
while read -r os arch path; do
	for p in "$SRC" "$SRC2" "$TMP" "$(go env GOMODCACHE)"; do
		if grep -qaF "$p" "$path"; then fail "the $os/$arch binary holds the build path $p"; fi
	done
done <"$TMP/binaries"

log "release artefacts: $((SECONDS - suite_start))s in all"
if [ "${#failures[@]}" -ne 0 ]; then
	log "release artefacts: FAIL (${#failures[@]})"
	printf '    %s\n' "${failures[@]}"
	exit 1
fi
log "release artefacts: PASS"
