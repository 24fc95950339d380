#!/usr/bin/env bash
# Make sure the OpenID provider the console's sign-in tests run is installed: oidc-provider (an OpenID
# Certified implementation, https://github.com/panva/node-oidc-provider), pinned with its dependencies in
# tests/src/peers/oidc/package.json and package-lock.json, installed with `npm ci` (npm checks every
# package against the lock file's integrity) into tests/src/peers/oidc/node_modules, where provider.mjs
# finds it. Installs again only when the lock file changed. Node 20 or later is needed; nodejs and npm are
# installed with apt when npm is missing (root or password-less sudo). Prints the folder on stdout (the
# tests read HERALD_OIDC_PEER, else this folder).
#
#   scripts/ensure-oidc-provider.sh
set -euo pipefail

log() { printf 'ensure-oidc-provider: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/tests/src/peers/oidc"
stamp="$dir/node_modules/.herald-package-lock.json"

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
    else return 127
    fi
}

if ! command -v npm >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "npm is missing and apt-get is not available; install Node.js 20+"
    log "installing nodejs and npm with apt"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2 || die "installing npm needs root"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm </dev/null >&2 \
        || die "apt-get install nodejs npm failed"
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
[[ "$major" -ge 20 ]] || die "oidc-provider needs Node.js 20 or later; this is $(node --version)"

if [[ -f "$stamp" ]] && cmp -s "$dir/package-lock.json" "$stamp" && [[ -d "$dir/node_modules/oidc-provider" ]]; then
    echo "$dir"
    exit 0
fi
log "installing $(node -p "Object.entries(require('$dir/package.json').dependencies).map(([n, v]) => n + '@' + v).join(' ')") with npm ci"
(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error </dev/null >&2) \
    || die "npm ci failed in $dir (is the npm registry reachable?)"
cp "$dir/package-lock.json" "$stamp"
echo "$dir"
