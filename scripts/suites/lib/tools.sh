# scripts/suites/lib/tools.sh: sourced by the suites (30-lint, 40-release-artefacts).
#
# go_tool PKG@VERSION prints the path of that command, built from the Go module
# proxy with the machine's Go (GOTOOLCHAIN=local) and kept in the Go build
# cache: `go run -exec echo` builds the executable once per machine (go run
# caches executables since Go 1.24) and prints where it is. A second suite,
# a clean clone or a later run asks again and gets the cached one in about a
# second; `go clean -cache` removes them with everything else. Nothing is
# written to the repository or installed on PATH.
#
# vulndb VERSION prints a directory holding the Go vulnerability database of
# golang.org/x/vulndb@VERSION (its data/osv/*.json, the entries vuln.go.dev
# serves) in the layout `govulncheck -db file://DIR` reads, indexed once per
# machine into ${XDG_CACHE_HOME:-~/.cache}/dlock-tools (two suites indexing it
# at once each write their own and keep the first).

go_tool() {
	local start=$SECONDS out cache i
	cache=$(go env GOCACHE)
	# The run that builds it prints the path of a temporary copy, removed as go
	# run exits; the next one finds it in the cache and prints that path.
	for i in 1 2; do
		if ! out=$(cd / && GOWORK=off GOFLAGS=-modcacherw GOTOOLCHAIN=local go run -exec echo "$1"); then
			echo "go_tool: cannot build $1" >&2
			return 1
		fi
		out=${out##*$'\n'}
		[[ "$out" != "$cache"/* ]] || break
	done
	if [[ "$out" != "$cache"/* ]] || [ ! -x "$out" ]; then
		echo "go_tool: $1 is not in the Go build cache ($out)" >&2
		return 1
	fi
	if [ $((SECONDS - start)) -gt 5 ]; then
		printf '==> %s ready in %ds (built once, kept in the Go build cache)\n' "$1" $((SECONDS - start)) >&2
	fi
	printf '%s\n' "$out"
}

vulndb() {
	local version=$1
	local cache=${XDG_CACHE_HOME:-$HOME/.cache}/dlock-tools
	local db=$cache/vulndb-$version
	if [ ! -f "$db/index/modules.json" ]; then
		printf '==> vulnerability database from golang.org/x/vulndb@%s\n' "$version" >&2
		mkdir -p "$cache"
		local src tmp
		src=$(cd / && GOWORK=off GOFLAGS=-modcacherw go mod download -json "golang.org/x/vulndb@$version" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') || return 1
		tmp=$(mktemp -d "$cache/vulndb.XXXXXX")
		# The v1 layout of https://go.dev/security/vuln/database#api, as the
		# module's cmd/indexdb writes it (which takes minutes to build: it
		# needs go-git and Google Cloud's clients): ID/<id>.json, the OSV
		# entries; index/modules.json, each module's entry IDs; index/db.json,
		# the latest modification.
		python3 - "$src/data/osv" "$tmp/db" <<'PY' >&2 || return 1
import json, os, shutil, sys

src, out = sys.argv[1:]
os.makedirs(os.path.join(out, "ID"))
os.makedirs(os.path.join(out, "index"))
modules, latest, n = {}, "", 0
for name in sorted(os.listdir(src)):
    if not name.endswith(".json"):
        continue
    with open(os.path.join(src, name)) as f:
        entry = json.load(f)
    if name != entry["id"] + ".json":
        sys.exit(f"vulndb: {name} holds entry {entry['id']}")
    shutil.copyfile(os.path.join(src, name), os.path.join(out, "ID", name))
    latest = max(latest, entry["modified"])
    for path in sorted({a["package"]["name"] for a in entry.get("affected", [])}):
        modules.setdefault(path, []).append({"id": entry["id"], "modified": entry["modified"]})
    n += 1
with open(os.path.join(out, "index", "modules.json"), "w") as f:
    json.dump([{"path": p, "vulns": v} for p, v in sorted(modules.items())], f)
with open(os.path.join(out, "index", "db.json"), "w") as f:
    json.dump({"modified": latest}, f)
print(f"==> vulndb: {n} entries of {len(modules)} modules")
PY
		mv -T "$tmp/db" "$db" 2>/dev/null || true # another suite's copy won
		rm -rf "$tmp"
		[ -f "$db/index/modules.json" ] || return 1
	fi
	printf '%s\n' "$db"
}
