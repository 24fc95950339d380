#!/usr/bin/env bash
# Make sure axe-core, the accessibility rules the console's browser journeys run on every page they visit
# (tests/tests/browser.rs), is at hand: `npm pack` fetches the pinned version from the npm registry (npm
# checks the registry's integrity), this script checks the tarball against the SHA-512 pinned below and
# keeps its one file, axe.min.js, under target/axe-core/. Installs nodejs and npm with apt when npm is
# missing (needs root or password-less sudo). When the file is there it does nothing. Prints the file's
# path on stdout (the tests read HERALD_AXE, else this path).
#
#   scripts/ensure-axe.sh
set -euo pipefail

log() { printf 'ensure-axe: %s\n' "$*" >&2; }

version="4.14.1"
integrity="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/target/axe-core"
file="$dir/axe-$version.min.js"

if [[ -s "$file" ]]; then
    echo "$file"
    exit 0
fi

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else log "need root or sudo to install npm"; return 1
    fi
}

if ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm with apt"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm </dev/null >&2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "fetching axe-core $version with npm pack"
(cd "$tmp" && npm pack "axe-core@$version" --silent </dev/null >/dev/null)
tarball="$tmp/axe-core-$version.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [[ "$got" != "$integrity" ]]; then
    log "axe-core-$version.tgz is not the pinned tarball (got $got)"
    exit 1
fi
tar -xzf "$tarball" -C "$tmp" package/axe.min.js
mkdir -p "$dir"
mv "$tmp/package/axe.min.js" "$file"
echo "$file"
