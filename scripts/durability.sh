#!/usr/bin/env bash
# Durability of an acknowledged upload (proto-spec/http.md §8.3), shown on the real server:
# first the order of its system calls, then a kill -9 among uploads in flight.
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

# A kill -9 during uploads: every upload acknowledged (201) before the kill is served back
# byte for byte by the restarted server, and no spooled body is left behind.
for i in $(seq 1 40); do
    "$bin" synth --seconds 20 --seed "$((100 + i))" -o "$work/up$i.bsor" >/dev/null
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
serve_killable() {
    "$bin" serve --tcp 127.0.0.1:0 --ws "127.0.0.1:$port" --token-file "$work/tokens" \
        --store "$work/store2" >"$work/serve2.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        grep -q listening "$work/serve2.log" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "durability: the server did not start" >&2
    exit 1
}
serve_killable
python3 - "$port" "$work" "$pid" <<'PY'
import http.client, os, signal, sys, threading, time
port, work, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
acked = []
def upload(i):
    body = open(f"{work}/up{i}.bsor", "rb").read()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/replays", body, {"Authorization": "Bearer tok1"})
        r = c.getresponse()
        data = r.read()
        if r.status == 201:
            import json
            acked.append((json.loads(data)["id"], i))
    except Exception:
        pass
threads = [threading.Thread(target=upload, args=(i,)) for i in range(1, 41)]
for t in threads:
    t.start()
# Killed while uploads are in flight: once a few were acknowledged.
deadline = time.time() + 10
while len(acked) < 3 and time.time() < deadline:
    time.sleep(0.005)
os.kill(pid, signal.SIGKILL)
for t in threads:
    t.join()
open(f"{work}/acked", "w").write("\n".join(f"{a} {i}" for a, i in acked))
print(f"durability: {len(acked)} of 40 uploads acknowledged before the kill -9")
if not acked:
    sys.exit("durability: no upload was acknowledged before the kill: nothing was checked")
PY
wait "$pid" 2>/dev/null || true
serve_killable
python3 - "$port" "$work" <<'PY'
import http.client, os, sys
port, work = int(sys.argv[1]), sys.argv[2]
lines = [l.split() for l in open(f"{work}/acked").read().splitlines() if l]
bad = []
for rid, i in lines:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", f"/replays/{rid}")
    r = c.getresponse()
    if r.status != 200 or r.read() != open(f"{work}/up{i}.bsor", "rb").read():
        bad.append(rid)
left = [f for f in os.listdir(f"{work}/store2/spool") if f.startswith("bsrs-upload-")]
print(f"durability: after the restart {len(lines) - len(bad)} of {len(lines)} acknowledged uploads "
      f"served back byte for byte; {len(left)} spooled bodies left")
if bad or left:
    sys.exit(1)
PY
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
