#!/usr/bin/env bash
# The whole Herald test suite: finds or starts PostgreSQL, installs what the tests talk to (Chromium and
# chromedriver, the Python peers), then runs every test target and the doc tests.
#
#   scripts/test.sh                                   # everything
#   scripts/test.sh -p herald-domain                  # one package
#   scripts/test.sh --test it email::                 # chosen targets (no doc tests)
#   PROPTEST_CASES=100000 scripts/test.sh -p herald-domain   # deep property runs
#   scripts/test.sh -- --nocapture                    # arguments after -- go to the test binaries
#   HERALD_ALLOW_SKIP=1 scripts/test.sh               # a test whose peer is missing is skipped, not failed
#
# Extra arguments are passed to cargo test. The last line is the total over every test binary and the doc
# tests: `N passed, N failed, N skipped` — a test that returned early because its peer or premise was
# missing (allowed only with HERALD_ALLOW_SKIP=1) is counted as skipped, never as passed. Exits with
# cargo's exit code.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }

# PostgreSQL: the rule README states, in one place (scripts/ensure-postgres.sh): DATABASE_URL when set,
# else the server at 127.0.0.1:5432 when it answers, else the project's private cluster.
pg_out="$(scripts/ensure-postgres.sh </dev/null)" || { say "no PostgreSQL available (above)"; exit 1; }
DATABASE_URL="$(tail -n 1 <<<"$pg_out")"
pg_which="$(sed -n 's/^# //p' <<<"$pg_out" | tail -n 1)"
[[ -n "$DATABASE_URL" ]] || { say "no PostgreSQL available"; exit 1; }
export DATABASE_URL
say "PostgreSQL: ${pg_which:-DATABASE_URL}, $(sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#' <<<"$DATABASE_URL")"

# The console's browser journeys (tests/tests/browser.rs) need Debian's Chromium and chromedriver, and
# axe-core (npm pack, pinned) to check every page they visit.
scripts/ensure-chromium.sh </dev/null
HERALD_AXE="$(scripts/ensure-axe.sh </dev/null | tail -n 1)"
export HERALD_AXE
say "axe-core: $HERALD_AXE"

# The OpenID provider the console's sign-in tests run (oidc-provider from npm, pinned; npm ci).
HERALD_OIDC_PEER="$(scripts/ensure-oidc-provider.sh </dev/null | tail -n 1)"
export HERALD_OIDC_PEER
say "OpenID provider: $HERALD_OIDC_PEER"

# The e-mail and Web Push tests' real peers (aiosmtpd, http_ece, cryptography), in a virtual environment
# of the project's own when python3 lacks them; the tests run the interpreter HERALD_PYTHON names.
if python="$(scripts/ensure-python-peers.sh </dev/null | tail -n 1)" && [[ -n "$python" ]]; then
    export HERALD_PYTHON="$python"
    say "Python peers: $HERALD_PYTHON"
elif [[ "${HERALD_ALLOW_SKIP:-0}" != 0 && -n "${HERALD_ALLOW_SKIP:-}" ]]; then
    say "Python peers missing (above); HERALD_ALLOW_SKIP is set: their tests will be reported as skipped"
else
    say "Python peers missing (above): the e-mail and Web Push tests cannot run against them."
    say "Fix what is said above, or set HERALD_ALLOW_SKIP=1 to run without them (reported as skipped)."
    exit 1
fi

export PROPTEST_CASES="${PROPTEST_CASES:-256}"
say "PROPTEST_CASES=$PROPTEST_CASES"

# Look at the cargo options (before a bare --) to decide what to add:
#  * --workspace unless packages were chosen (cargo ignores -p when --workspace is given);
#  * --all-targets and a separate doc-test run unless targets were chosen;
#  * --no-fail-fast, so the closing line counts every test binary, not only those before a failure.
packages=no targets=no
for arg in "$@"; do
    case "$arg" in
        --) break ;;
        -p | -p* | --package | --package=* | --workspace | --all) packages=yes ;;
        --lib | --bin | --bin=* | --bins | --test | --test=* | --tests | --bench | --bench=* | --benches \
            | --example | --example=* | --examples | --all-targets | --doc) targets=yes ;;
    esac
done
scope=(--no-fail-fast)
[[ $packages == yes ]] || scope+=(--workspace)

# Every test binary's summary goes to a log, and every skipped test writes a line to another
# (herald_standin::skip), so the run can end with one total line.
results="$(mktemp)"
log="$(mktemp)"
export HERALD_SKIP_LOG
HERALD_SKIP_LOG="$(mktemp)"

# The test databases (one per test, and their template) are dropped when the run ends, also after a
# failure: nothing is left on the server. (A run that is killed leaves them to the next run, which drops
# the databases of test processes that no longer exist.)
cleanup() {
    local bin=target/debug/herald-test-db
    [[ -x $bin ]] && "$bin" drop-leftovers || true
}
trap 'rm -f "$results" "$log" "$HERALD_SKIP_LOG"; cleanup' EXIT

rc=0
set +e
if [[ $targets == yes ]]; then
    cargo test "${scope[@]}" "$@" 2>&1 | tee "$results"
    rc=${PIPESTATUS[0]}
else
    cargo test "${scope[@]}" --all-targets "$@" 2>&1 | tee "$results"
    rc=${PIPESTATUS[0]}
    if [[ $rc -eq 0 ]]; then
        # Doc tests (not part of --all-targets). A chosen package without a library has none; that is not
        # a failure.
        cargo test "${scope[@]}" --doc "$@" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        if [[ $rc -ne 0 ]] && grep -q 'no library targets found' "$log"; then
            say "no library in the chosen packages, no doc tests to run"
            rc=0
        fi
        cat "$log" >>"$results"
    fi
fi
set -e

# The databases first, so that the total is the last line.
cleanup
trap 'rm -f "$results" "$log" "$HERALD_SKIP_LOG"' EXIT
if [[ -s "$HERALD_SKIP_LOG" ]]; then
    say "skipped (HERALD_ALLOW_SKIP is set):"
    sed 's/^/  /' "$HERALD_SKIP_LOG" >&2
fi
# libtest counts a skipped test as passed (it returned): it is moved from passed to skipped. An #[ignore]d
# test is skipped too.
skipped="$(grep -c . "$HERALD_SKIP_LOG" || true)"
awk -v skipped="$skipped" '
    /^test result:/ { for (i = 1; i <= NF; i++) {
        if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
    END { printf "%d passed, %d failed, %d skipped\n", p - skipped, f, skipped + g }' "$results"
exit "$rc"
