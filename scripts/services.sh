#!/usr/bin/env bash
# The real services the storage tests use: a PostgreSQL server (Debian's `postgresql`) and
# an S3-compatible server (moto's standalone server, from PyPI), both on 127.0.0.1 on free
# ports, for this worktree only.
#
#   scripts/services.sh install   installs them if missing (apt-get postgresql, pip moto)
#   scripts/services.sh start     starts both (if not running) and prints the environment
#   scripts/services.sh env       prints the environment of the running services
#   scripts/services.sh stop      stops both and removes their data
#
# `eval "$(scripts/services.sh start)"` sets, for the tests (tests/common/services.rs):
#   BSRS_TEST_POSTGRES=postgres://postgres@127.0.0.1:PORT/bsrs_test
#   BSRS_TEST_S3_ENDPOINT=http://127.0.0.1:PORT   BSRS_TEST_S3_BUCKET=bsrs-test
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT, AWS_ALLOW_HTTP
# PostgreSQL trusts every local connection and runs with fsync off: test data only.
# The state (ports, pids, the data folder's path) is kept in target/services/ of the
# worktree (BSRS_SERVICES_STATE to put it elsewhere); the data live in a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."

MOTO_VERSION=5.2.1
state="${BSRS_SERVICES_STATE:-$PWD/target/services}"
bucket=bsrs-test

log() { echo "services: $*" >&2; }

pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

install() {
    if [ -z "$(pg_bin)" ]; then
        log "installing postgresql"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
    fi
    if ! python3 -c "import moto.server, flask_cors" 2>/dev/null ||
        [ "$(python3 -c 'import moto; print(moto.__version__)')" != "$MOTO_VERSION" ]; then
        log "installing moto[server]==$MOTO_VERSION"
        python3 -m pip install -q "moto[server]==$MOTO_VERSION" >&2
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

print_env() {
    # shellcheck disable=SC1091
    . "$state/ports"
    cat <<EOF
export BSRS_TEST_POSTGRES=postgres://postgres@127.0.0.1:$PG_PORT/bsrs_test
export BSRS_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export BSRS_TEST_S3_BUCKET=$bucket
export AWS_ACCESS_KEY_ID=bsrs-test
export AWS_SECRET_ACCESS_KEY=bsrs-test-secret
export AWS_REGION=us-east-1
export AWS_ENDPOINT=http://127.0.0.1:$S3_PORT
export AWS_ALLOW_HTTP=true
EOF
}

running() {
    [ -f "$state/ports" ] || return 1
    # shellcheck disable=SC1091
    . "$state/ports"
    kill -0 "$S3_PID" 2>/dev/null && [ -f "$PG_DATA/data/postmaster.pid" ] &&
        kill -0 "$(head -n 1 "$PG_DATA/data/postmaster.pid")" 2>/dev/null
}

start() {
    if running; then
        print_env
        return
    fi
    [ -f "$state/ports" ] && stop
    install
    local bin pg_port s3_port data
    bin=$(pg_bin) || { log "no PostgreSQL server found"; exit 1; }
    mkdir -p "$state"
    pg_port=$(free_port)
    s3_port=$(free_port)
    # initdb refuses root: the cluster belongs to the postgres user, in a folder of its own.
    data=$(mktemp -d "${TMPDIR:-/tmp}/bsrs-pg.XXXXXX")
    chown postgres: "$data"
    printf 'PG_PORT=%s\nS3_PORT=%s\nPG_DATA=%s\nPG_BIN=%s\nS3_PID=\n' \
        "$pg_port" "$s3_port" "$data" "$bin" >"$state/ports"
    runuser -u postgres -- "$bin/initdb" -D "$data/data" -U postgres -A trust -E UTF8 \
        --no-sync >"$state/initdb.log" 2>&1 || { cat "$state/initdb.log" >&2; exit 1; }
    runuser -u postgres -- "$bin/pg_ctl" -D "$data/data" -l "$data/postgres.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $pg_port -k $data -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c max_connections=200" start >/dev/null ||
        { cat "$data/postgres.log" >&2; exit 1; }
    runuser -u postgres -- "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres bsrs_test

    # moto keeps its buckets in memory; setsid so that it outlives this shell's job.
    setsid python3 -m moto.server -H 127.0.0.1 -p "$s3_port" >"$state/moto.log" 2>&1 </dev/null &
    local pid=$!
    sed -i "s/^S3_PID=.*/S3_PID=$pid/" "$state/ports"
    python3 - "$s3_port" "$bucket" <<'PY' || { cat "$state/moto.log" >&2; exit 1; }
import sys, time, urllib.request
port, bucket = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/{bucket}"
for _ in range(300):
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=2).read()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit("services: moto did not answer within 30 s")
PY
    log "PostgreSQL on 127.0.0.1:$pg_port, S3 (moto) on 127.0.0.1:$s3_port, bucket $bucket"
    print_env
}

stop() {
    [ -f "$state/ports" ] || return 0
    # shellcheck disable=SC1091
    . "$state/ports"
    if [ -n "${S3_PID:-}" ] && kill -0 "$S3_PID" 2>/dev/null; then
        kill "$S3_PID" 2>/dev/null || true
    fi
    if [ -f "$PG_DATA/data/postmaster.pid" ]; then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA/data" -m fast -w stop >/dev/null || true
    fi
    case "$PG_DATA" in
    */bsrs-pg.*) rm -rf "$PG_DATA" ;;
    esac
    rm -f "$state/ports"
    log "stopped"
}

case "${1:-}" in
install) install ;;
start) start ;;
env)
    running || { log "not running (scripts/services.sh start)"; exit 1; }
    print_env
    ;;
stop) stop ;;
*)
    echo "usage: $0 install|start|env|stop" >&2
    exit 2
    ;;
esac
