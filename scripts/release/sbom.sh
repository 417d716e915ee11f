#!/bin/sh
# scripts/release/sbom.sh ARTEFACT DOCUMENT VERSION: writes DOCUMENT, the
# CycloneDX SBOM (JSON) of the dlock binary inside ARTEFACT, a release archive
# (.tar.gz, .zip) or Debian package (.deb). .goreleaser.yaml runs it for every
# archive and package (in dist/, with the artefact's path relative to it).
#
# The SBOM is made by `cyclonedx-gomod bin` (on PATH; the pinned version is in
# scripts/suites/40-release-artefacts.sh) from the build information Go
# embeds in the binary, so it lists the module versions the binary was built
# from, the ones `go version -m` prints, and the Go standard library at the
# toolchain's version (-std). VERSION (vX.Y.Z) is the main component's
# version: the binary is built in the workspace, where its own is (devel).
# -noserial -notimestamp leave out the serial number and the time: two builds of one
# commit give the same document.
set -eu
if [ "$#" -ne 3 ]; then
	echo "usage: sbom.sh ARTEFACT DOCUMENT VERSION" >&2
	exit 2
fi
artefact=$1 document=$2 version=$3
case $artefact in /*) ;; *) artefact=$PWD/$artefact ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $artefact in
*.tar.gz)
	tar -xzf "$artefact" -C "$tmp" dlock
	bin=$tmp/dlock
	;;
*.zip)
	python3 -m zipfile -e "$artefact" "$tmp"
	bin=$tmp/dlock.exe
	;;
*.deb)
	if command -v dpkg-deb >/dev/null 2>&1; then
		dpkg-deb --fsys-tarfile "$artefact" >"$tmp/data.tar"
	else
		data=$(ar t "$artefact" | grep '^data\.tar')
		(cd "$tmp" && ar x "$artefact" "$data" && mv "$data" data.tar)
	fi
	tar -xf "$tmp/data.tar" -C "$tmp" ./usr/bin/dlock
	bin=$tmp/usr/bin/dlock
	;;
*)
	echo "sbom.sh: $artefact: not a .tar.gz, .zip or .deb" >&2
	exit 2
	;;
esac
[ -f "$bin" ] || {
	echo "sbom.sh: no dlock binary in $artefact" >&2
	exit 1
}
cyclonedx-gomod bin -json -std -noserial -notimestamp -version "$version" -output "$document" "$bin"
