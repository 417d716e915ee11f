#!/usr/bin/env bash
# scripts/suites/lib/no-tracked-binaries.sh [DIR]: fails when git tracks a
# compiled file in the repository at DIR (default: this checkout): an
# executable or object file by its first bytes (ELF, Mach-O, PE/COFF, an ar
# archive such as a .a, WebAssembly, a Java class), by its name (.o .obj .a
# .so .dylib .dll .exe .lib .test .wasm .class .pyc), or a file with the
# executable bit that is neither a script (#!) nor text. Build outputs are
# made by `go build`/`go run`; .gitignore lists the usual ones. 30-lint.sh
# runs it first.
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")/../../.." && pwd)}
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then PY=$(command -v python3); fi
git -C "$DIR" ls-files -z --stage | "$PY" -c '
import os, sys

root = sys.argv[1]
magics = [
    (b"\x7fELF", "an ELF executable or object"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xce\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xfe\xed\xfa\xcf", "a Mach-O executable"),
    (b"\xfe\xed\xfa\xce", "a Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O universal binary or Java class"),
    (b"MZ", "a PE (Windows) executable"),
    (b"!<arch>\n", "an ar archive (.a, .lib)"),
    (b"\x00asm", "a WebAssembly module"),
    (b"\x64\x86", "a COFF object (amd64)"),
    (b"\x4c\x01", "a COFF object (386)"),
]
suffixes = (".o", ".obj", ".a", ".so", ".dylib", ".dll", ".exe", ".lib", ".test", ".wasm", ".class", ".pyc")
bad = []
entries = sys.stdin.buffer.read().split(b"\0")
for e in entries:
    if not e:
        continue
    meta, path = e.split(b"\t", 1)
    mode = meta.split()[0]
    path = path.decode("utf-8", "surrogateescape")
    if mode in (b"120000", b"160000"):  # symlink, submodule
        continue
    try:
        with open(os.path.join(root, path), "rb") as f:
            head = f.read(8192)
    except FileNotFoundError:  # deleted in the work tree, not yet staged
        continue
    why = next((w for m, w in magics if head.startswith(m)), None)
    if why and head.startswith(b"MZ") and b"\0" not in head:
        why = None  # text that starts with "MZ"
    if why and head[:2] in (b"\x64\x86", b"\x4c\x01") and b"\0" not in head:
        why = None
    if not why and path.lower().endswith(suffixes):
        why = "a build output by its name"
    if not why and mode == b"100755" and not head.startswith(b"#!") and b"\0" in head:
        why = "an executable file that is not a script"
    if why:
        size = os.path.getsize(os.path.join(root, path))
        bad.append(f"{path} (mode {mode.decode()}, {size} bytes): {why}")
if bad:
    print("tracked compiled files (git rm --cached them and add them to .gitignore):")
    for b in bad:
        print("    " + b)
    sys.exit(1)
print(f"no compiled file among the {sum(1 for e in entries if e)} tracked files")
' "$DIR"
