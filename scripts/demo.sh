#!/usr/bin/env bash
# The Herald demo (main job): runs the service end to end on a private PostgreSQL and stand-in channels.
# Arguments are passed to `herald demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo run --release -p herald-app --bin herald -- demo "$@"
