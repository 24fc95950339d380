#!/usr/bin/env bash
# Make sure Debian's Chromium and its WebDriver are installed, for the console's browser tests
# (tests/tests/browser.rs). Like ensure-postgres.sh, it installs with apt when they are missing (needs
# root or password-less sudo); when they are present it does nothing. Prints nothing on stdout.
#
#   scripts/ensure-chromium.sh
#
# The tests find the programs at /usr/bin/chromium and /usr/bin/chromedriver (override with
# HERALD_CHROMIUM and HERALD_CHROMEDRIVER).
set -euo pipefail

log() { printf 'ensure-chromium: %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else log "need root or sudo to install chromium"; return 1
    fi
}

log "installing chromium and chromium-driver with apt"
as_root env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    chromium chromium-driver fonts-noto-cjk </dev/null >&2
command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || {
    log "chromium or chromedriver still missing after the install"
    exit 1
}
log "$(chromium --version 2>/dev/null || echo chromium installed)"
