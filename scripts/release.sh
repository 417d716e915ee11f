#!/usr/bin/env bash
# scripts/release.sh VERSION: the mechanical part of cutting a release
# (docs/releasing.md, steps 2 to 4). It
#   1. bumps every requirement between the repository's modules, and the
#      versioned replacements of go.work, to VERSION (scripts/release bump);
#   2. vets every module through the workspace;
#   3. runs the release rehearsal at VERSION: the published modules of the
#      working tree packed into a file proxy, `go install .../cmd/dlock@VERSION`
#      and a consumer's `go get` from file proxies only, an empty module cache;
#   4. prints the tags to create, one per published module, and the commands.
# It creates no tag, commits nothing and pushes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
	echo "usage: scripts/release.sh vX.Y.Z" >&2
	exit 64
fi
VERSION=$1
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
export GOWORK=$PWD/go.work
release() { (cd scripts/release && go run . "$@"); }

echo "==> bump the modules' requirements on each other to $VERSION"
release bump "$VERSION"

echo "==> go vet every module (through go.work)"
while IFS= read -r mod; do
	(cd "$(dirname "$mod")" && go vet ./...)
done < <(git ls-files -- 'go.mod' '*/go.mod')

echo "==> release rehearsal at $VERSION"
release rehearse "$VERSION"

if ! grep -q "^## \[${VERSION#v}\]" CHANGELOG.md; then
	echo "warning: CHANGELOG.md has no section '## [${VERSION#v}]'" >&2
fi

echo
echo "==> ready. Commit, then create and push these tags on that commit:"
tags=$(release tags "$VERSION")
echo "$tags" | sed 's/^/    /'
echo
echo "    git commit -am 'Release $VERSION'"
echo "$tags" | sed "s/.*/    git tag -a & -m 'dlock $VERSION'/"
echo "    git push origin main $(echo "$tags" | tr '\n' ' ')"
echo "    GORELEASER_CURRENT_TAG=$VERSION goreleaser release --clean"
