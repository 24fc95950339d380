#!/usr/bin/env bash
# The fault soak (issue 9): `herald serve` plus worker processes on one private PostgreSQL, stand-ins that
# answer at random, submitters that retry every unanswered submit, and faults (SIGKILL and SIGSTOP/SIGCONT
# of workers, pg_terminate_backend of Herald's connections, one PostgreSQL restart). It ends with a ledger
# in Jepsen's terms and `soak: N passed, N failed`; it exits non-zero on any violation.
#
#   scripts/soak.sh                        # short run (under 3 minutes with a built tree), as in CI
#   scripts/soak.sh --minutes 20           # long run
#   scripts/soak.sh --plant finish-without-token              # a planted bug: must show the damage
#   scripts/soak.sh --plant refusal-after-uncertainty-failed  # (exits non-zero when it does)
#   scripts/soak.sh --plant claim-ignores-erasure             # (issue 42)
#   scripts/soak.sh --plant status-without-refused            # (issue 46)
#   scripts/soak.sh soak-control [PLANT]   # the negative control: a planted run must fail, and say why
#
# Other options go to the driver (tests/src/bin/herald-soak.rs): --workers K, --seed N.
# Environment: HERALD_SOAK_DIR (work folder, default a new temporary folder), HERALD_PG_BASE and
# HERALD_PG_FIRST_PORT (the private cluster, default /var/tmp/herald-soak-pg and 5540).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'soak.sh: %s\n' "$*" >&2; }

if [[ "${1:-}" == "soak-control" ]]; then
    shift
    # A planted bug must make the run exit non-zero AND show in the ledger line that names its damage:
    #  * refusal-after-uncertainty-failed (default; B3): a refusal after an uncertain attempt written down
    #    as FAILED -> tasks FAILED although the stand-in accepted them;
    #  * finish-without-token (NC3): a superseded holder's finish overwrites the task -> real duplicate
    #    sends (or a state that contradicts the stand-in);
    #  * claim-ignores-erasure (issue 42): the claim reads every user as not erased -> a task in flight at
    #    its user's erasure that comes back for a retry is decided as if the user were there: its
    #    destination is destroyed, so it is parked for a person (or, were one left, called again);
    #  * status-without-refused (issue 46): the status subscription leaves out `refused` -> refused tasks
    #    whose event never arrives.
    plant="refusal-after-uncertainty-failed"
    detail='^check '
    if [[ $# -gt 0 && "$1" != --* ]]; then plant="$1"; shift; fi
    case "$plant" in
        refusal-after-uncertainty-failed) expect='FAILED or SUPPRESSED although the stand-in accepted it' ;;
        finish-without-token) expect='(real duplicate sends of one task|FAILED or SUPPRESSED although the stand-in accepted it|SENT automatically with no real acceptance at the stand-in)' ;;
        claim-ignores-erasure) expect='(no call for an erased user after its erasure committed|erased users: tasks parked for a person after the erasure)' ;;
        status-without-refused)
            expect='status events: settled tasks without the event of their outcome'
            # Missing for the reason planted, not for another.
            detail='^soak: status events missing, by the event expected: .*refused=[1-9]' ;;
        *) log "unknown plant: $plant"; exit 2 ;;
    esac
    out="$(mktemp)"
    trap 'rm -f "$out"' EXIT
    set +e
    "$0" --plant "$plant" "$@" 2>&1 | tee "$out" | sed -u 's/^/control | /'
    rc=${PIPESTATUS[0]}
    set -e
    # The control's own summary is prefixed above ("control | soak: …"), so the last `soak:` summary of
    # a CI log is the real soak's.
    if [[ $rc -ne 0 ]] && grep -Eq "^check ${expect} .*VIOLATION\$" "$out" && grep -Eq "$detail" "$out"; then
        echo "soak-control: the planted bug ($plant) was seen: exit $rc and a VIOLATION in the ledger"
        echo "soak-control: 1 passed, 0 failed"
        exit 0
    fi
    echo "soak-control: the planted bug ($plant) was NOT seen (exit $rc)"
    echo "soak-control: 0 passed, 1 failed"
    exit 1
fi

export HERALD_PG_BASE="${HERALD_PG_BASE:-/var/tmp/herald-soak-pg}"
export HERALD_PG_FIRST_PORT="${HERALD_PG_FIRST_PORT:-5540}"

log "building herald and herald-soak"
# The status events' receiver is the Python peer verifying with `standardwebhooks`.
if [[ -z "${HERALD_PYTHON:-}" ]]; then
    HERALD_PYTHON="$(scripts/ensure-python-peers.sh 2>/dev/null | tail -n 1)"
    export HERALD_PYTHON
fi
cargo build -q -p herald-app -p herald-tests --bin herald --bin herald-soak

url="$(DATABASE_URL='' scripts/ensure-postgres.sh --private </dev/null | tail -n 1)"
[[ -n "$url" ]] || { log "no private PostgreSQL"; exit 1; }
# Where ensure-postgres.sh keeps the cluster: $HERALD_PG_BASE/<major>/data, pg_ctl beside initdb.
data="$(ls -d "$HERALD_PG_BASE"/*/data | head -n 1)"
major="$(basename "$(dirname "$data")")"
pg_ctl="/usr/lib/postgresql/$major/bin/pg_ctl"
[[ -x "$pg_ctl" ]] || pg_ctl="$(command -v pg_ctl || true)"
[[ -x "$pg_ctl" ]] || { log "pg_ctl not found"; exit 1; }

workdir="${HERALD_SOAK_DIR:-$(mktemp -d /tmp/herald-soak.XXXXXX)}"
mkdir -p "$workdir"
target="${CARGO_TARGET_DIR:-target}"
driver_pid=""
cleanup() {
    # Only what this run started: the driver and the processes it recorded in its pid file.
    if [[ -n "$driver_pid" ]] && kill -0 "$driver_pid" 2>/dev/null; then kill -TERM "$driver_pid" 2>/dev/null || true; fi
    if [[ -f "$workdir/pids" ]]; then
        while read -r pid; do
            [[ -n "$pid" ]] || continue
            # A pid is only ours while its command line still names this run's work folder.
            [[ -r "/proc/$pid/cmdline" ]] || continue
            tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$workdir" || continue
            kill -CONT "$pid" 2>/dev/null || true
            kill -KILL "$pid" 2>/dev/null || true
        done <"$workdir/pids"
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

log "work folder $workdir"
"$target/debug/herald-soak" \
    --herald "$target/debug/herald" \
    --admin-url "$url" \
    --pg-ctl "$pg_ctl" \
    --pg-data "$data" \
    --pg-log "$(dirname "$data")/server.log" \
    --workdir "$workdir" \
    "$@" &
driver_pid=$!
set +e
wait "$driver_pid"
rc=$?
set -e
driver_pid=""
# A passing or planted run leaves nothing behind; a failing real one keeps its logs and database.
planted=no
for arg in "$@"; do [[ "$arg" == --plant ]] && planted=yes; done
if [[ -z "${HERALD_SOAK_DIR:-}" && ($rc -eq 0 || $planted == yes) ]]; then rm -rf "$workdir"; fi
exit "$rc"
