#!/usr/bin/env bash
# Durability of an acknowledged upload (proto-spec/http.md §8.3), shown on the real server:
# `bsor-stream serve --store DIR` runs under strace while a replay is uploaded, and the
# system calls must come in this order: the blob's file synced (fsync), renamed into place,
# its folder synced, and only then the SQLite commit that names it synced; the 201 after
# all of them. A power cut cannot be simulated here: the order is what makes a row never
# name a blob the disk does not hold.
#
#   scripts/durability.sh [BINARY]    (default target/release/bsor-stream; installs strace)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-target/release/bsor-stream}"
if ! command -v strace >/dev/null; then
    apt-get update -qq >/dev/null && apt-get install -y -qq strace >/dev/null
fi
work="$(mktemp -d)"
pid=""
# Under `set -e` a failing command in the trap would become the script's exit status: by the
# time it runs the server has usually gone, so neither kill may fail the run.
trap 'pkill -KILL -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" synth --seconds 5 -o "$work/play.bsor" >/dev/null
# The synthetic replay names player 76561190000000000: upload it as that player.
printf 'player:76561190000000000:tok1\n' > "$work/tokens"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
strace -f -y -qq -e trace=fsync,fdatasync,rename,renameat,renameat2,sendto,write,writev \
    -o "$work/trace" "$bin" serve --tcp 127.0.0.1:0 --ws "127.0.0.1:$port" \
    --token-file "$work/tokens" --store "$work/store" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    grep -q listening "$work/serve.log" 2>/dev/null && break
    sleep 0.1
done
status=$(curl -s -o "$work/reply" -w '%{http_code}' -H 'Authorization: Bearer tok1' \
    --data-binary @"$work/play.bsor" "http://127.0.0.1:$port/replays")
[ "$status" = 201 ] || { echo "durability: upload answered $status: $(cat "$work/reply")" >&2; exit 1; }
# The server (strace's child) stops on SIGTERM; strace then exits with it.
pkill -TERM -P "$pid" || true
wait "$pid" 2>/dev/null || true
python3 - "$work/trace" "$work/store" <<'PY'
import re, sys
trace, store = sys.argv[1], sys.argv[2]
lines = open(trace).read().splitlines()
def first(pred, after=-1, what=""):
    for i, l in enumerate(lines):
        if i > after and pred(l):
            return i
    sys.exit(f"durability: no {what} after line {after + 1} of the trace")
blob = re.compile(r'/replays/[0-9a-f]{32}\.[0-9a-f]{16}\.bsors')
synced = first(lambda l: re.search(r'\bfsync\(\d+<[^>]*' + blob.pattern, l) is not None, what="fsync of the blob")
renamed = first(lambda l: 'rename' in l and blob.search(l) is not None, what="rename of the blob")
dir_synced = first(lambda l: re.search(r'\bfsync\(\d+<[^>]*/replays>', l) is not None, renamed, "fsync of the blob's folder")
commit = first(lambda l: re.search(r'\b(fsync|fdatasync)\(\d+<[^>]*index\.sqlite(-wal)?>', l) is not None, dir_synced, "SQLite commit synced after the blob")
reply = first(lambda l: 'HTTP/1.1 201' in l, commit, "201 reply after the commit")
print(f"durability: blob fsync (trace line {synced + 1}) < rename ({renamed + 1}) < folder fsync "
      f"({dir_synced + 1}) < index commit fsync ({commit + 1}) < 201 ({reply + 1})")
if not synced < renamed:
    sys.exit("durability: the blob was renamed into place before it was synced")
PY
