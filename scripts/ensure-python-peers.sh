#!/usr/bin/env bash
# Find or make a Python 3 that can import the e-mail and Web Push tests' peers — aiosmtpd (a real SMTP
# server), http_ece and cryptography (independent Web Push decryption and VAPID checks), standardwebhooks
# (the status events' verifier) — and print its
# path as the last line of stdout; progress goes to stderr.
#
#   python="$(scripts/ensure-python-peers.sh | tail -n 1)"   # scripts/test.sh exports it as HERALD_PYTHON
#
# Order:
#   1. $HERALD_PYTHON, when set (it must import them: a set but unusable HERALD_PYTHON is an error, never
#      passed over for another interpreter);
#   2. python3 on PATH, if it imports them;
#   3. a virtual environment of the project's own, ${XDG_CACHE_HOME:-$HOME/.cache}/herald/python-peers
#      (HERALD_PYTHON_VENV chooses another folder), made once with the versions pinned in
#      tests/src/peers/requirements.txt from PyPI and reused; made again when that file changes. The
#      system Python's packages are never touched (a Debian python3 refuses pip installs, PEP 668).
# python3 and its venv module are installed with apt when missing (root or password-less sudo).
# Exits non-zero, saying what is missing, when none of this works.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'ensure-python-peers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

MODULES="aiosmtpd, http_ece, cryptography, standardwebhooks"
REQUIREMENTS="tests/src/peers/requirements.txt"
VENV="${HERALD_PYTHON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/herald/python-peers}"

imports() { "$1" -c "import $MODULES" >/dev/null 2>&1; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
    else return 127
    fi
}
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "$* missing and apt-get is not available; install it by hand"
    log "installing $* with apt"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2 \
        || die "installing $* needs root or password-less sudo"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" </dev/null >&2 \
        || die "apt-get install $* failed"
}

if [[ -n "${HERALD_PYTHON:-}" ]]; then
    if imports "$HERALD_PYTHON"; then
        log "using HERALD_PYTHON=$HERALD_PYTHON"
        echo "$HERALD_PYTHON"
        exit 0
    fi
    die "HERALD_PYTHON=$HERALD_PYTHON cannot import $MODULES; fix it (\"$HERALD_PYTHON\" -m pip install -r \
$REQUIREMENTS), or unset it to use python3 or the project's virtual environment"
fi
if command -v python3 >/dev/null 2>&1 && imports python3; then
    log "using $(command -v python3)"
    command -v python3
    exit 0
fi

python="$VENV/bin/python"
if [[ -x "$python" ]] && cmp -s "$REQUIREMENTS" "$VENV/requirements.txt" && imports "$python"; then
    log "using the virtual environment $VENV"
    echo "$python"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || apt_install python3
if [[ ! -x "$python" ]]; then
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    log "making a virtual environment in $VENV"
    if ! python3 -m venv "$VENV" >&2 2>/dev/null; then
        # Debian ships venv's pip bootstrap apart, as python3-venv.
        rm -rf "$VENV"
        apt_install python3-venv
        python3 -m venv "$VENV" >&2 || die "python3 -m venv $VENV failed"
    fi
fi
log "installing $(grep -o "^[A-Za-z0-9_.-]*==[^ ]*" "$REQUIREMENTS" | paste -sd " ") from PyPI into $VENV"
"$python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS" </dev/null >&2 \
    || die "pip could not install $REQUIREMENTS into $VENV (is PyPI reachable?)"
imports "$python" || die "$python still cannot import $MODULES after the install"
cp "$REQUIREMENTS" "$VENV/requirements.txt"
echo "$python"
