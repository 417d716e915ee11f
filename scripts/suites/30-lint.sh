#!/usr/bin/env bash
# beside-modules
# scripts/suites/30-lint.sh: golangci-lint (configuration: .golangci.yml) and
# govulncheck over every Go module of the repository, after a look at the tree:
# no executable or object file is tracked (lib/no-tracked-binaries.sh).
#
# Both tools are built at pinned versions from the Go module proxy and kept in
# the Go build cache (lib/tools.sh, go_tool), once per machine: a clean clone
# reuses them, and so does the release suite for govulncheck. Every module
# listed in go.work is linted from its own directory through the repository's go.work (GOWORK=<repo>/go.work),
# which works whether the modules' go.mod files carry replace lines or not.
#
# golangci-lint must report nothing: a finding is fixed, or suppressed where it
# stands with //nolint:<linter> // <reason>.
#
# govulncheck cannot reach vuln.go.dev here, so the vulnerability database is
# built locally from the golang.org/x/vulndb module (its data/osv/*.json, the
# entries vuln.go.dev serves), indexed in the layout govulncheck -db file://DIR
# reads (index/db.json, index/modules.json, ID/*.json) once per machine
# (lib/tools.sh, vulndb; the module's own cmd/indexdb took minutes to build).
# A vulnerability the code reaches in a required module fails the suite (the fix
# is a newer requirement in go.mod). One in the Go standard library is reported
# but fails only with DLOCK_VULN_STDLIB=fail: its fix is a newer Go toolchain on
# the machine, not a change to the repository.
#
# Knobs: DLOCK_LINT_CACHE (default .cache/lint, govulncheck's report),
# DLOCK_VULN_STDLIB=fail.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

GOLANGCI_LINT_VERSION=v2.15.0
GOVULNCHECK_VERSION=v1.9.0
# golang.org/x/vulndb has no tags; a pseudo-version pins the data (bump it to
# pick up new entries: `go list -m golang.org/x/vulndb@latest`).
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

log() { printf '==> %s\n' "$*"; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then PY=$(command -v python3); fi

CACHE=${DLOCK_LINT_CACHE:-$REPO/.cache/lint}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

# shellcheck source=lib/tools.sh
. "$REPO/scripts/suites/lib/tools.sh"
golangci=$(go_tool "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION")
govulncheck=$(go_tool "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION")
log "$("$golangci" version 2>&1 | head -1)"

export GOWORK=$REPO/go.work
mapfile -t modules < <(go list -m -f '{{.Dir}}')
if [ "${#modules[@]}" -eq 0 ]; then
	echo "30-lint: no module in go.work" >&2
	exit 1
fi

failed=0
summary=()

# --- the tree: no compiled file is tracked ------------------------------------------
log "tracked files: no executable or object file"
status=PASS
if ! bash "$REPO/scripts/suites/lib/no-tracked-binaries.sh" "$REPO"; then
	status=FAIL
	failed=$((failed + 1))
fi
summary+=("$(printf '%-4s  tree           %-28s %4ds' "$status" "no tracked binaries" 0)")

# --- golangci-lint ---------------------------------------------------------------
for dir in "${modules[@]}"; do
	rel=.${dir#"$REPO"}
	log "golangci-lint $rel"
	start=$SECONDS
	status=PASS
	if ! (cd "$dir" && "$golangci" run --config "$REPO/.golangci.yml" \
		--allow-parallel-runners --max-issues-per-linter 0 --max-same-issues 0 ./...); then
		status=FAIL
		failed=$((failed + 1))
	fi
	summary+=("$(printf '%-4s  golangci-lint  %-28s %4ds' "$status" "$rel" $((SECONDS - start)))")
done

# --- govulncheck -----------------------------------------------------------------
db=$(vulndb "$VULNDB_VERSION")
log "govulncheck $GOVULNCHECK_VERSION, database $db ($(find "$db/ID" -name '*.json' | wc -l) entries)"

# One run over the packages of every module: they share the standard library's
# analysis (one module at a time takes several times longer).
patterns=()
for dir in "${modules[@]}"; do patterns+=(".${dir#"$REPO"}/..."); done
log "govulncheck ${patterns[*]}"
start=$SECONDS
out=$CACHE/govulncheck.json
rc=0
"$govulncheck" -db "file://$db" -format json "${patterns[@]}" >"$out" || rc=$?
status=PASS
if [ "$rc" -ne 0 ]; then
	echo "30-lint: govulncheck failed (exit $rc)" >&2
	status=FAIL
elif ! "$PY" - "$out" "${DLOCK_VULN_STDLIB:-warn}" <<'PY'; then
import json, sys

# govulncheck -format json writes a stream of JSON objects: "osv" entries and
# "finding"s whose trace starts at the vulnerable symbol (function set when the
# code reaches it, only module/package when it is merely required/imported).
path, stdlib_mode = sys.argv[1], sys.argv[2]
dec, text, pos = json.JSONDecoder(), open(path).read(), 0
summaries, called = {}, {}
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    obj, pos = dec.raw_decode(text, pos)
    if "osv" in obj:
        summaries[obj["osv"]["id"]] = obj["osv"].get("summary", "")
    f = obj.get("finding")
    if f and f["trace"] and f["trace"][0].get("function"):
        top = f["trace"][0]
        key = (f["osv"], top["module"])
        where = next((fr for fr in reversed(f["trace"]) if fr.get("position")), None)
        called.setdefault(key, (top.get("version", ""), f.get("fixed_version", ""), where))
bad = 0
for (osv, mod), (ver, fixed, where) in sorted(called.items()):
    stdlib = mod == "stdlib"
    fatal = not stdlib or stdlib_mode == "fail"
    bad += fatal
    loc = ""
    if where:
        p = where["position"]
        loc = f" (reached from {where.get('module', '')}: {p.get('filename', '?')}:{p.get('line', '?')})"
    print(f"    {'VULN' if fatal else 'warn'} {osv} {mod}@{ver or '?'} fixed in {fixed or 'no release'}: {summaries.get(osv, '')}{loc}")
if called and not bad:
    print("    (standard-library findings: fixed by a newer Go toolchain; DLOCK_VULN_STDLIB=fail makes them fatal)")
sys.exit(1 if bad else 0)
PY
	status=FAIL
fi
if [ "$status" = FAIL ]; then failed=$((failed + 1)); fi
summary+=("$(printf '%-4s  govulncheck    %-28s %4ds' "$status" "every module" $((SECONDS - start)))")

echo
log "30-lint: $failed failed"
printf '    %s\n' "${summary[@]}"
[ "$failed" -eq 0 ]
