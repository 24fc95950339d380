#!/usr/bin/env bash
# The Herald demo (main job): runs the service end to end on a private PostgreSQL and stand-in channels.
# Arguments are passed to `herald demo` (try --help; --exit stops after the summary).
#
# With no database configured (no DATABASE_URL, HERALD__DATABASE__URL, --database-url or --config), the
# demo runs its own PostgreSQL cluster; the server programs are installed with apt first when missing
# (root or password-less sudo; otherwise the demo says how to install them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

configured=no
[[ -n "${DATABASE_URL:-}" || -n "${HERALD__DATABASE__URL:-}" || -n "${HERALD_CONFIG:-}" ]] && configured=yes
for arg in "$@"; do
    case "$arg" in
        --database-url | --database-url=* | --config | --config=* | -c) configured=yes ;;
    esac
done
if [[ $configured == no ]]; then
    # Failure here is not fatal: `herald demo` explains what is missing.
    scripts/ensure-postgres.sh --install || true
fi

# `herald demo` runs the herald-demo program beside it: build both. The dev profile is the one the test
# suite builds too, so running the demo and the tests builds the dependencies once, not twice; the demo
# does not need an optimised build.
cargo build -p herald-app -p herald-demo
exec target/debug/herald demo "$@"
