#!/usr/bin/env bash
# Throughput benchmark against a real PostgreSQL and the stand-in channels; prints figures.
#   scripts/bench.sh [NOTIFICATIONS] [WORKERS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DATABASE_URL="$(scripts/ensure-postgres.sh </dev/null | tail -n 1)"
export DATABASE_URL
cargo build -q --release -p herald-tests --bin herald-bench
exec target/release/herald-bench "$@"
