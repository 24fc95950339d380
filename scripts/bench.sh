#!/usr/bin/env bash
# The side-by-side benchmark (docs/BENCHMARKS.md): Herald through its real binary, and in the same run
# graphile-worker, pg-boss, apalis-postgres and pgbench with Herald's own SQL, each in its own database on
# the same PostgreSQL. Prints one table of figures and ratios; never asserts a figure.
#
#   scripts/bench.sh              full run (about 10 minutes after the builds; 10 M finished tasks)
#   scripts/bench.sh --quick      small sizes, under 2 minutes after the builds (CI)
#   scripts/bench.sh --scaling    also 1, 2, 4, 8 worker processes and one rate-limited channel's ceiling
#   scripts/bench.sh --write      also write docs/BENCHMARKS.md (+ docs/SCALING.md with --scaling);
#                                 without it the report goes to target/bench/BENCHMARKS.md
#   scripts/bench.sh --debug      use the dev-profile binaries the tests built (NOT representative)
#   scripts/bench.sh --herald-only  Herald's figures only, no peers and no ratios (to iterate; not with --write)
#   scripts/bench.sh --herald-only --latency-at R  only the latency phase, at R notifications/s
#   scripts/bench.sh --herald-only --submit-only  only the submit phase (the API's writes, with its CPU and WAL)
#   scripts/bench.sh --herald-only --status-events  drains without and with a status subscription, alternated, and their ratio
#   scripts/bench.sh --herald-only --no-vacuum  no VACUUM of the claim's queue between Herald's phases
#                                 (the control: on a server without autovacuum, what later phases pay)
#   scripts/bench.sh --history N  N finished tasks in the tables for the second drain (default 10000000;
#                                 --quick: 100000; 0 skips the history drain)
#
# One run at a time (target/bench/.lock): a second one fails at once instead of sharing the first's files.
#
# Needs: cargo, node and npm (Node 20), pgbench, a PostgreSQL (scripts/ensure-postgres.sh). A peer that
# cannot be installed or run fails the run: no peer is skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=release
args=()
for arg in "$@"; do
    case "$arg" in
        --debug) profile=debug ;;
        *) args+=("$arg") ;; # herald-bench checks them
    esac
done

for tool in node npm pgbench; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing (needed for the peers)" >&2; exit 1; }
done

DATABASE_URL="$(scripts/ensure-postgres.sh </dev/null | tail -n 1)"
export DATABASE_URL

cargo_profile=()
[[ $profile == release ]] && cargo_profile=(--release)
echo "bench: building herald and herald-bench ($profile profile)"
# One package per build: built together, their dependencies' features would be unified into a third
# variant of herald, rebuilt from scratch, instead of the one `cargo build -p herald-app` (and the tests'
# `bins::binary`) already made.
cargo build -q "${cargo_profile[@]}" -p herald-app --bin herald
cargo build -q "${cargo_profile[@]}" -p herald-bench --bin herald-bench
echo "bench: building the apalis-postgres peer (bench/apalis, $profile profile)"
# apalis-postgres checks its queries with sqlx's macros: offline, against the query data it ships, never
# against DATABASE_URL (our database has no apalis schema at build time).
env -u DATABASE_URL SQLX_OFFLINE=true \
    cargo build -q "${cargo_profile[@]}" --locked --manifest-path bench/apalis/Cargo.toml --target-dir target/bench-apalis
echo "bench: installing the Node.js peers (bench/node, npm ci)"
(cd bench/node && npm ci --no-audit --no-fund --loglevel=error </dev/null)

exec "target/$profile/herald-bench" --herald "target/$profile/herald" \
    --apalis "target/bench-apalis/$profile/apalis-bench" --profile "$profile" \
    --command "scripts/bench.sh $*" "${args[@]}"
