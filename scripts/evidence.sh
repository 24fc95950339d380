#!/usr/bin/env bash
# The evidence report of the reference cases (SPEC §10): every check with its expected and actual value,
# ending in one line `N passed, N failed`. Finds or starts PostgreSQL like the test command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DATABASE_URL="$(scripts/ensure-postgres.sh </dev/null | tail -n 1)"
export DATABASE_URL
cargo build -q -p herald-tests --bins
exec target/debug/herald-evidence "$@"
