#!/usr/bin/env bash
# The relay cluster benchmark (docs/benchmarks.md, "Relays in a cluster"): starts NATS with
# JetStream (one node, or three in one NATS cluster) and three `bsor-stream serve --cluster`
# relays on free ports of 127.0.0.1, runs `bsor-stream-load` against them with the
# arguments given, and stops what it started. Before that, the same load against one relay
# alone (started by the load tool), unless KILL_AFTER is set or SINGLE=0.
#
#   scripts/cluster-bench.sh --scenario one --viewers 3000 --seconds 20
#   NATS_NODES=3 scripts/cluster-bench.sh --scenario many --sessions 100 --seconds 20
#   KILL_AFTER=10 scripts/cluster-bench.sh --scenario many --sessions 300 --seconds 20
#
# Environment:
#   BIN          folder of bsor-stream and bsor-stream-load (default: $CARGO_TARGET_DIR or
#                target, then /release; build with `cargo build --release -p
#                bsor-stream-tools -p bsor-stream-cli`)
#   NATS_NODES   1 (default) or 3: three nodes, and the relays with --cluster-replicas 3
#   KILL_AFTER   seconds: the load tool kills relay A (where the publishers are) with
#                SIGKILL this long into the song (--kill-pid), and reports the resume times
#   KILL         relay (default) or nats: with NATS_NODES=3, the first NATS node is killed
#                instead, and the load tool reports how long clients waited across it
#   SINGLE       0: no run against one relay alone
#   KEEP         1: keep the working folder (NATS store, relays' logs) and say where
#   STREAM_MAX_CONSUMERS  N: create the stream BSOR_LIVE before the relays do, with their
#                configuration and this consumer limit (nats-server 2.15 refuses a
#                stream's 1,001st consumer unless the stream sets a limit itself; the relay
#                sets 1,000,000, raising a lower limit it finds: to see the ceiling, run an
#                older relay)
# nats-server comes from PATH (scripts/services.sh install puts 2.15.1 there) or
# BSRS_NATS_SERVER. Prints the date and the load average before and after each run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release}
nodes=${NATS_NODES:-1}
nats=${BSRS_NATS_SERVER:-$(command -v nats-server || true)}
[ -x "$bin/bsor-stream" ] && [ -x "$bin/bsor-stream-load" ] || {
    echo "cluster-bench: $bin/bsor-stream or bsor-stream-load missing: cargo build --release -p bsor-stream-tools -p bsor-stream-cli" >&2
    exit 1
}
[ -n "$nats" ] || { echo "cluster-bench: no nats-server (scripts/services.sh install)" >&2; exit 1; }
case $nodes in 1|3) ;; *) echo "cluster-bench: NATS_NODES is 1 or 3" >&2; exit 1 ;; esac

# 3,300 connections in the load tool, up to as many in a relay.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
work=$(mktemp -d "${TMPDIR:-/tmp}/cluster-bench.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${KEEP:-0}" = 1 ]; then echo "cluster-bench: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

stamp() { echo "-- $(date -u '+%Y-%m-%d %H:%M:%S UTC') load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "cluster-bench: nothing listens on 127.0.0.1:$1" >&2
    exit 1
}

if [ -z "${KILL_AFTER:-}" ] && [ "${SINGLE:-1}" != 0 ]; then
    echo "== one relay alone (started by the load tool): bsor-stream-load $*"
    stamp
    "$bin/bsor-stream-load" "$@" || echo "cluster-bench: the one-relay run exited $?"
    stamp
fi

# NATS: one node, or three routed to each other as one cluster.
client_ports=() route_ports=()
for i in $(seq "$nodes"); do client_ports+=("$(free_port)"); route_ports+=("$(free_port)"); done
routes=$(printf 'nats://127.0.0.1:%s,' "${route_ports[@]}"); routes=${routes%,}
nats_pids=()
for i in $(seq 0 $((nodes - 1))); do
    args=(-a 127.0.0.1 -p "${client_ports[$i]}" -js -sd "$work/js$i")
    if [ "$nodes" = 3 ]; then
        args+=(--server_name "n$i" --cluster_name bsrs --cluster "nats://127.0.0.1:${route_ports[$i]}" --routes "$routes")
    fi
    "$nats" "${args[@]}" >/dev/null 2>"$work/nats$i.log" &
    pids+=($!); nats_pids+=($!)
done
for p in "${client_ports[@]}"; do wait_port "$p"; done
urls=$(printf 'nats://127.0.0.1:%s,' "${client_ports[@]}"); urls=${urls%,}
replicas=()
[ "$nodes" = 3 ] && replicas=(--cluster-replicas 3)
if [ -n "${STREAM_MAX_CONSUMERS:-}" ]; then
    # The relay's stream (relay/src/cluster.rs), with a consumer limit, through NATS's
    # text protocol and the JetStream API.
    python3 - "${client_ports[0]}" "$nodes" "$STREAM_MAX_CONSUMERS" <<'PY'
import json, socket, sys, time
port, replicas, limit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
config = {"name": "BSOR_LIVE", "subjects": ["bsor.live.*"], "storage": "file",
          "num_replicas": replicas, "max_age": 86400 * 10**9, "max_bytes": 8 << 30,
          "discard": "new", "duplicate_window": 120 * 10**9, "max_msg_size": 8 << 20,
          "allow_direct": True, "max_consumers": limit}
body = json.dumps(config).encode()
answer = {"error": "no answer"}
for attempt in range(30):  # a new cluster elects its meta leader first: no answer till then
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(5)
        s.recv(4096)
        s.sendall(b'CONNECT {"verbose":false}\r\nSUB _INBOX.cb 1\r\nPUB $JS.API.STREAM.CREATE.BSOR_LIVE _INBOX.cb %d\r\n%s\r\n' % (len(body), body))
        buf = b""
        while b"MSG " not in buf or b"}" not in buf.split(b"MSG ", 1)[1]:
            buf += s.recv(65536)
        s.close()
        answer = json.loads(buf[buf.index(b"{", buf.index(b"MSG ")):buf.rindex(b"}") + 1])
    except (OSError, ValueError) as e:
        answer = {"error": str(e)}
    if "error" not in answer:
        print(f"cluster-bench: stream BSOR_LIVE created, max_consumers {answer['config']['max_consumers']}")
        break
    time.sleep(1)
else:
    sys.exit(f"cluster-bench: creating BSOR_LIVE: {answer['error']}")
PY
fi

token=cluster-bench-$RANDOM$RANDOM
echo "$token" >"$work/tokens"
addrs=() relay_pids=()
for r in a b c; do
    "$bin/bsor-stream" serve --tcp 127.0.0.1:0 --token-file "$work/tokens" --cluster "$urls" \
        "${replicas[@]}" --max-per-address 5000 >"$work/relay-$r.out" 2>"$work/relay-$r.log" &
    pids+=($!); relay_pids+=($!)
done
for r in a b c; do
    for _ in $(seq 200); do
        grep -q '^listening tcp=' "$work/relay-$r.out" && break
        sleep 0.1
    done
    line=$(grep -m1 '^listening tcp=' "$work/relay-$r.out") || {
        echo "cluster-bench: relay $r did not start:" >&2; tail -5 "$work/relay-$r.log" >&2; exit 1
    }
    a=${line#listening tcp=}; addrs+=("${a%% *}")
done
# JetStream elects its leaders in the first seconds of a cluster.
[ "$nodes" = 3 ] && sleep 3
relay_list=$(IFS=,; echo "${addrs[*]}")
pid_list=$(IFS=,; echo "${relay_pids[*]}")
nats_list=$(IFS=,; echo "${nats_pids[*]}")
kill_args=()
if [ -n "${KILL_AFTER:-}" ]; then
    victim=${relay_pids[0]}
    [ "${KILL:-relay}" = nats ] && victim=${nats_pids[0]}
    kill_args=(--kill-pid "$victim" --kill-after "$KILL_AFTER")
fi
# A relay makes its stream and bucket on first use, a cluster's leaders are elected on the
# first writes: one session with a viewer on each relay first, its figures not kept (a
# publisher of the measured run that does not reconnect would fail on a store not ready).
for _ in 1 2 3; do
    "$bin/bsor-stream-load" --relay "$relay_list" --token "$token" --scenario many \
        --sessions 1 --session-viewers 3 --seconds 2 --speed 4 >"$work/warmup.txt" 2>&1 && break
    sleep 2
done

echo "== three relays ($relay_list, pids $pid_list) and $nodes NATS node(s) ($urls, pids $nats_list): bsor-stream-load $* ${kill_args[*]}"
stamp
status=0
"$bin/bsor-stream-load" --relay "$relay_list" --relay-pid "$pid_list" --nats-pid "$nats_list" \
    --token "$token" "${kill_args[@]}" "$@" || status=$?
stamp
exit $status
