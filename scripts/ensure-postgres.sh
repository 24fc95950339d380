#!/usr/bin/env bash
# Find or start a PostgreSQL server the Herald tests and the demo can use, and report its URL.
#
# The URL names a role that may create databases (tests create one fresh database each; the demo its own).
# Order — the one rule of scripts/test.sh, scripts/demo.sh and `herald demo` (README):
#   1. $DATABASE_URL, when set (it must answer: a set but unusable DATABASE_URL is an error, never passed
#      over for another server);
#   2. the server at 127.0.0.1:5432 (postgres://postgres@127.0.0.1:5432/postgres), if it answers;
#   3. a private cluster owned by this script: PostgreSQL is installed with apt if missing
#      (needs root or password-less sudo), then initdb'd once, started on a free port from 5433
#      up, and left running for the next call to reuse.
#
# Usage:
#   url=$(scripts/ensure-postgres.sh)    # the URL is the last line of stdout, after a line `# WHICH`
#                                        # saying which server it is; progress goes to stderr
#   source scripts/ensure-postgres.sh    # exports DATABASE_URL into the calling shell (no arguments)
#   scripts/ensure-postgres.sh --stop    # stop the private cluster (if this script started one)
#   scripts/ensure-postgres.sh --private # skip steps 1 and 2
#   scripts/ensure-postgres.sh --install # only install the server programs if missing (for herald demo)
#
# Environment:
#   DATABASE_URL           step 1
#   HERALD_PG_PROBE_PORT   port probed in step 2 (default 5432)
#   HERALD_PG_BASE         private cluster folder (default /var/tmp/herald-pg as root,
#                          else ${XDG_CACHE_HOME:-$HOME/.cache}/herald/pg)
#   HERALD_PG_FIRST_PORT   first port tried for the private cluster (default 5433)

# Sourced: run as a child process so our shell options and exits stay out of the caller.
# (No arguments are passed on: when sourced without any, "$@" would be the caller's.)
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    if __herald_pg_url="$(bash "${BASH_SOURCE[0]}" </dev/null | tail -n 1)" && [[ -n "$__herald_pg_url" ]]; then
        export DATABASE_URL="$__herald_pg_url"
        unset __herald_pg_url
        return 0
    fi
    unset __herald_pg_url
    return 1
fi

set -euo pipefail

log() { printf 'ensure-postgres: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

PROBE_PORT="${HERALD_PG_PROBE_PORT:-5432}"
FIRST_PORT="${HERALD_PG_FIRST_PORT:-5433}"
if [[ $EUID -eq 0 ]]; then
    BASE="${HERALD_PG_BASE:-/var/tmp/herald-pg}"
else
    BASE="${HERALD_PG_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/herald/pg}"
fi
export PGCONNECT_TIMEOUT=5

mode="find"
case "${1:-}" in
    "") ;;
    --private) mode=private ;;
    --stop) mode=stop ;;
    --install) mode=install ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown argument: $1 (try --help)" ;;
esac

# --- PostgreSQL binaries -------------------------------------------------------------------

BIN=""
find_bin() {
    BIN=""
    local d
    # Debian/Ubuntu layout; newest major version first.
    # shellcheck disable=SC2012 # paths are /usr/lib/postgresql/<number>/bin
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
        if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then BIN="$d"; return 0; fi
    done
    # Other layouts: initdb on PATH or known to pg_config.
    if command -v pg_config >/dev/null 2>&1; then
        d="$(pg_config --bindir 2>/dev/null || true)"
        if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then BIN="$d"; return 0; fi
    fi
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        BIN="$(dirname "$(command -v initdb)")"; return 0
    fi
    return 1
}
find_bin || true

# A client tool from the server binaries if we have them, else from PATH, else nothing.
client() {
    if [[ -n "$BIN" && -x "$BIN/$1" ]]; then echo "$BIN/$1"
    elif command -v "$1" >/dev/null 2>&1; then command -v "$1"
    fi
}

port_open() { # host port -> 0 when something accepts TCP connections there
    timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# 0 when the URL answers and its role may create databases.
probe_url() {
    local url="$1" psql out
    psql="$(client psql)"
    if [[ -z "$psql" ]]; then
        # No client installed: all we can check is that the port accepts connections.
        local hostport host port
        hostport="${url#*://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"; hostport="${hostport%%\?*}"
        host="${hostport%:*}"; port="${hostport##*:}"
        [[ "$host" == "$hostport" ]] && port=5432
        [[ -z "$host" ]] && host=127.0.0.1
        if port_open "$host" "$port"; then
            log "psql not installed; $host:$port accepts connections, assuming it is usable"
            return 0
        fi
        return 1
    fi
    out="$("$psql" "$url" -X -A -t -q -v ON_ERROR_STOP=1 \
        -c "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user" 2>/dev/null)" || return 1
    if [[ "$out" != "t" ]]; then
        log "$(redact "$url") answers but its role may not create databases"
        return 1
    fi
    return 0
}

redact() { sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#' <<<"$1"; }

# --- running commands as the cluster owner -------------------------------------------------

# initdb/postgres refuse to run as root; as root everything runs as the postgres user.
# fd 9 (our lock) is closed so a server started here does not hold the lock forever.
as_owner() {
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@") 9>&-
    else
        "$@" 9>&-
    fi
}

ensure_owner() {
    [[ $EUID -eq 0 ]] || return 0
    if ! id postgres >/dev/null 2>&1; then
        log "creating system user postgres"
        useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
    fi
}

sudo_cmd() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
    else return 127
    fi
}

install_postgres() {
    find_bin && return 0
    command -v apt-get >/dev/null 2>&1 \
        || die "PostgreSQL is not installed and apt-get is not available; install PostgreSQL or set DATABASE_URL"
    if [[ $EUID -ne 0 ]] && ! { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
        die "PostgreSQL is not installed; installing it needs root or password-less sudo (or set DATABASE_URL)"
    fi
    log "PostgreSQL not found; installing it with apt"
    sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2
    sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql </dev/null >&2
    find_bin || die "apt-get install postgresql finished but no initdb/pg_ctl was found"
}

# --- private cluster -----------------------------------------------------------------------

major_of_bin() { "$BIN/pg_ctl" --version | sed -E 's/.* ([0-9]+)(\.[0-9]+)?.*/\1/'; }

private_dirs() {
    MAJOR="$(major_of_bin)"
    DATA="$BASE/$MAJOR/data"
    LOGFILE="$BASE/$MAJOR/server.log"
    PORTFILE="$BASE/$MAJOR/port"
}

# Port the running private server listens on (from postmaster.pid), or nothing.
running_port() {
    as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || return 1
    sed -n '4p' "$DATA/postmaster.pid" 2>/dev/null
}

start_private() {
    ensure_owner
    private_dirs
    mkdir -p "$BASE/$MAJOR"
    if [[ $EUID -eq 0 ]]; then
        chown postgres: "$BASE" "$BASE/$MAJOR"
        chmod 0755 "$BASE" "$BASE/$MAJOR"
    fi

    # One caller at a time from here on (flock is in util-linux; skip the lock if it is absent).
    if command -v flock >/dev/null 2>&1; then
        exec 9>>"$BASE/lock"
        flock -w 120 9 || die "timed out waiting for $BASE/lock"
    fi

    if [[ ! -f "$DATA/PG_VERSION" ]]; then
        # Missing or half-created: start from scratch.
        rm -rf "$DATA"
        log "initdb into $DATA"
        as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C \
            --auth-local=trust --auth-host=trust >"$BASE/$MAJOR/initdb.log" 2>&1 \
            || { cat "$BASE/$MAJOR/initdb.log" >&2; die "initdb failed"; }
        # Loopback only, socket inside the data folder (no need for /var/run/postgresql).
        cat >>"$DATA/postgresql.conf" <<EOF

# added by Herald scripts/ensure-postgres.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DATA'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
    fi

    local port url
    if port="$(running_port)" && [[ -n "$port" ]]; then
        url="postgres://postgres@127.0.0.1:$port/postgres"
        if probe_url "$url"; then
            log "private cluster already running on port $port"
            echo "# the private cluster on 127.0.0.1:$port (in $DATA)"
            echo "$url"
            return 0
        fi
        log "private cluster on port $port does not answer; restarting it"
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
    fi

    # Prefer the port used last time, then the first free one from FIRST_PORT up.
    local candidates=() p failures=0
    [[ -f "$PORTFILE" ]] && candidates+=("$(cat "$PORTFILE")")
    for ((p = FIRST_PORT; p < FIRST_PORT + 50; p++)); do candidates+=("$p"); done
    for p in "${candidates[@]}"; do
        [[ "$p" =~ ^[0-9]+$ ]] || continue
        port_open 127.0.0.1 "$p" && continue
        log "starting private cluster on port $p (log: $LOGFILE)"
        if as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOGFILE" -o "-p $p" -w -t 60 start >&2; then
            local i
            for ((i = 0; i < 60; i++)); do
                if as_owner "$BIN/pg_isready" -q -h 127.0.0.1 -p "$p"; then break; fi
                sleep 0.5
            done
            url="postgres://postgres@127.0.0.1:$p/postgres"
            if probe_url "$url"; then
                echo "$p" >"$PORTFILE"
                log "private cluster ready on port $p"
                echo "# the private cluster on 127.0.0.1:$p (in $DATA)"
                echo "$url"
                return 0
            fi
            log "server started on port $p but does not answer; see $LOGFILE"
            as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
        else
            log "pg_ctl start on port $p failed; last log lines:"
            tail -n 5 "$LOGFILE" >&2 2>/dev/null || true
        fi
        failures=$((failures + 1))
        [[ $failures -lt 3 ]] || break
    done
    die "could not start a private PostgreSQL cluster in $DATA"
}

stop_private() {
    if ! find_bin; then log "PostgreSQL is not installed; nothing to stop"; return 0; fi
    private_dirs
    if [[ -f "$DATA/postmaster.pid" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2
        log "stopped the private cluster in $DATA"
    else
        log "private cluster in $DATA is not running"
    fi
}

# --- main ----------------------------------------------------------------------------------

case "$mode" in
    stop) stop_private; exit 0 ;;
    install) install_postgres; log "PostgreSQL server programs: $BIN"; exit 0 ;;
    find)
        if [[ -n "${DATABASE_URL:-}" ]]; then
            if probe_url "$DATABASE_URL"; then
                log "using DATABASE_URL"
                echo "# DATABASE_URL"
                echo "$DATABASE_URL"
                exit 0
            fi
            die "DATABASE_URL is set but $(redact "$DATABASE_URL") does not answer, or its role may not create \
databases; fix it, or unset it to use 127.0.0.1:$PROBE_PORT or the private cluster"
        fi
        url="postgres://postgres@127.0.0.1:$PROBE_PORT/postgres"
        if probe_url "$url"; then
            log "using the server at 127.0.0.1:$PROBE_PORT"
            echo "# the server at 127.0.0.1:$PROBE_PORT"
            echo "$url"
            exit 0
        fi
        log "no usable server at 127.0.0.1:$PROBE_PORT"
        ;;
esac

install_postgres
start_private
