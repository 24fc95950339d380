#!/usr/bin/env bash
# The Herald demo (main job): runs the service end to end on PostgreSQL and stand-in channels.
# Arguments are passed to `herald demo` (try --help; --exit stops after the summary).
#
# Its PostgreSQL follows the rule of scripts/test.sh (README): DATABASE_URL when set, else the server at
# 127.0.0.1:5432 when it answers, else the project's private cluster, which `herald demo` starts with the
# embedded scripts/ensure-postgres.sh — installing the server programs with apt first when they are
# missing (root or password-less sudo; otherwise the demo says how to install them). It prints which.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# `herald demo` runs the herald-demo program beside it: build both. The dev profile is the one the test
# suite builds too, so the tests reuse what this compiles, except the crates whose features the tests
# change (README, "What they need"); the demo does not need an optimised build.
cargo build -p herald-app -p herald-demo
exec target/debug/herald demo "$@"
