#!/usr/bin/env bash
# The whole Herald test suite: finds or starts PostgreSQL, then runs every test target and the doc tests.
#
#   scripts/test.sh                                   # everything
#   scripts/test.sh -p herald-domain                  # one package
#   PROPTEST_CASES=100000 scripts/test.sh -p herald-domain   # deep property runs
#   scripts/test.sh -- --nocapture                    # arguments after -- go to the test binaries
#
# Extra arguments are passed to cargo test. Exits with cargo's exit code.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DATABASE_URL="$(scripts/ensure-postgres.sh </dev/null | tail -n 1)"
[[ -n "$DATABASE_URL" ]] || { echo "test.sh: no PostgreSQL available" >&2; exit 1; }
export DATABASE_URL
# The console's browser journeys (tests/tests/browser.rs) need Debian's Chromium and chromedriver.
scripts/ensure-chromium.sh </dev/null
export PROPTEST_CASES="${PROPTEST_CASES:-256}"
echo "test.sh: DATABASE_URL=$(sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#' <<<"$DATABASE_URL") PROPTEST_CASES=$PROPTEST_CASES" >&2

# Look at the cargo options (before a bare --) to decide what to add:
#  * --workspace unless packages were chosen (cargo ignores -p when --workspace is given);
#  * --all-targets and a separate doc-test run unless targets were chosen.
packages=no targets=no
for arg in "$@"; do
    case "$arg" in
        --) break ;;
        -p | -p* | --package | --package=* | --workspace | --all) packages=yes ;;
        --lib | --bin | --bin=* | --bins | --test | --test=* | --tests | --bench | --bench=* | --benches \
            | --example | --example=* | --examples | --all-targets | --doc) targets=yes ;;
    esac
done
scope=()
[[ $packages == yes ]] || scope=(--workspace)

if [[ $targets == yes ]]; then
    exec cargo test "${scope[@]}" "$@"
fi

# The test databases (one per test, and their template) are dropped when the run ends, also after a
# failure: nothing is left on the server. (A run that is killed leaves them to the next run, which drops
# the databases of test processes that no longer exist.)
cleanup() {
    local bin=target/debug/herald-test-db
    [[ -x $bin ]] && "$bin" drop-leftovers || true
}

# Every test binary's summary goes to a log too, so the run can end with one total line.
results="$(mktemp)"
trap 'rm -f "$results"; cleanup' EXIT
rc=0
set +e
cargo test "${scope[@]}" --all-targets "$@" 2>&1 | tee "$results"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] || exit "$rc"

# Doc tests (not part of --all-targets). A chosen package without a library has none; that is not a failure.
log="$(mktemp)"
trap 'rm -f "$log" "$results"; cleanup' EXIT
set +e
cargo test "${scope[@]}" --doc "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]] && grep -q 'no library targets found' "$log"; then
    echo "test.sh: no library in the chosen packages, no doc tests to run" >&2
    rc=0
fi
cat "$log" >>"$results"
# The total over every test binary and the doc tests, as one closing line.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$results"
exit "$rc"
