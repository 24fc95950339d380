#!/usr/bin/env bash
# The contract fuzz: schemathesis (pinned, from PyPI) against the real `herald serve` on a database of its
# own, with every check, three times — as a service, an admin and a user — generating requests from
# /openapi.json. Passes only with 0 failures and no 5xx.
#
#   scripts/fuzz.sh                      # about 3 minutes after the build (about 3200 cases)
#   FUZZ_EXAMPLES=200 scripts/fuzz.sh    # more cases per operation
#   HERALD_BIN=/path/to/herald scripts/fuzz.sh   # a program built already
#
# Needs python3 with pip (schemathesis is installed when missing) and PostgreSQL (scripts/ensure-postgres.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SCHEMATHESIS_VERSION=4.32.5
EXAMPLES="${FUZZ_EXAMPLES:-40}"

if ! python3 -c "import schemathesis, sys; sys.exit(schemathesis.__version__ != '$SCHEMATHESIS_VERSION')" 2>/dev/null; then
    # A Debian system python3 refuses pip installs (PEP 668), hence the second try, as .ci/run does.
    python3 -m pip install --quiet "schemathesis==$SCHEMATHESIS_VERSION" </dev/null \
        || python3 -m pip install --quiet --break-system-packages "schemathesis==$SCHEMATHESIS_VERSION" </dev/null
fi
ST=(python3 -m schemathesis.cli)
python3 -c 'import schemathesis.cli' 2>/dev/null || ST=(st)

if [[ -n "${HERALD_BIN:-}" ]]; then
    HERALD="$HERALD_BIN"   # a program built already
else
    cargo build --quiet --bin herald
    HERALD="${CARGO_TARGET_DIR:-target}/debug/herald"
fi

SERVER_URL="$(scripts/ensure-postgres.sh </dev/null | tail -n 1)"
DB="herald_fuzz_$$"
psql "$SERVER_URL" -qc "CREATE DATABASE $DB" >/dev/null
DATABASE_URL="${SERVER_URL%/*}/$DB"

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    psql "$SERVER_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

random() { head -c 32 /dev/urandom | base64 | tr -d '/+=\n'; }
SVC="svc-$(random)"
ADM="adm-$(random)"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# Channels point at a closed loopback port: test sends answer "not sent" at once, and nothing leaves.
cat >"$WORK/herald.toml" <<EOF
[database]
url = "$DATABASE_URL"
[server]
listen = "127.0.0.1:$PORT"
[auth]
service_tokens = ["$SVC"]
admin_tokens = ["$ADM"]
user_token_keys = [{ id = "f1", secret = "$(random)" }]
[keys]
current = "k1"
k1 = "$("$HERALD" keys generate)"
[worker]
concurrency = 1
lease_ms = 5000
[log]
level = "warn"
[[channel]]
name = "push"
kind = "webhook"
url = "http://127.0.0.1:9"
timeout_ms = 1000
[[channel]]
name = "miao"
kind = "miaotixing"
url = "http://127.0.0.1:9"
timeout_ms = 1000
min_interval_ms = 1000
EOF
# The admin run erases users it makes up (POST /v1/users/{user_id}/erasure), and a later valid write for
# such a user is answered 410 Gone, as documented: an accepted answer to valid data, like 409.
# A schema-violating body larger than the server's body limit is refused 413 before it is parsed: a rejection
# like 400 or 422 (schemathesis's default list of rejections leaves 413 out).
cat >"$WORK/schemathesis.toml" <<EOF
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "410", "429", "5xx"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
EOF
export HERALD_CONFIG="$WORK/herald.toml"
"$HERALD" migrate >/dev/null
"$HERALD" serve 2>"$WORK/serve.log" &
SERVER_PID=$!
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
USER_TOKEN="$("$HERALD" token user fuzz-user --ttl 1h)"

total=0 failed=0 errors=0
for role in service admin user; do
    case $role in
        service) token=$SVC ;;
        admin) token=$ADM ;;
        user) token=$USER_TOKEN ;;
    esac
    echo "fuzz: as $role"
    set +e
    # From the scratch folder: schemathesis keeps a cache (.schemathesis/) where it runs.
    (cd "$WORK" && "${ST[@]}" run "http://127.0.0.1:$PORT/openapi.json" --checks all --max-examples "$EXAMPLES" --workers 2 \
        --header "Authorization: Bearer $token" --seed 1 --no-color) 2>&1 | tee "$WORK/$role.txt"
    set -e
done

# Totals from the three summaries, and any 5xx the server answered (its log names none of the secrets).
python3 - "$WORK" <<'PY'
import pathlib, re, sys
work = pathlib.Path(sys.argv[1])
cases = failures = errors = 0
for role in ("service", "admin", "user"):
    text = (work / f"{role}.txt").read_text(errors="replace")
    cases += sum(int(n) for n in re.findall(r"^\s*(\d+) generated", text, re.M))
    failures += sum(int(n) for n in re.findall(r"(\d+) unique failures?", text))
    # schemathesis's own errors (a generator crashing, not an answer of Herald's): the cases they cost
    # were not run, so they are shown, though they are no finding about the API.
    errors += sum(int(n) for n in re.findall(r"^=+ .*?\b(\d+) errors?\b", text, re.M))
server = [l for l in (work / "serve.log").read_text(errors="replace").splitlines()
          if re.search(r"response failed|status=5\d\d|panicked", l)]
print(f"fuzz: {cases} cases generated, {failures} failures, {len(server)} server 5xx"
      + (f"; {errors} schemathesis error(s) cost some cases (their 'ERRORS' section is printed above)" if errors else ""))
sys.exit(1 if failures or server else 0)
PY
