#!/usr/bin/env bash
# Builds the seed corpora fuzz/corpus/wire_frame and fuzz/corpus/relay_session (git-ignored,
# like the other corpora). Nothing here needs the replay corpus.
#
# wire_frame: one control byte (the frame limit and piece sizes; 0, 1, 2, 3 and 0x57) then
# frames as proto-spec/wire.md lays them out: every message type alone, a publisher's and
# a viewer's conversation with real chunks (sync marker, varints, both CRCs), and broken
# ones: a length over each limit, a zero length, an unknown type, a bad chunk CRC, bytes
# after the last field, a conversation cut short.
#
# relay_session: scripts in the target's own operation encoding (see `Harness::step`: one
# byte per choice, read by arbitrary's Unstructured), each after the nine bytes that pick
# the relay's limits (the target's `config`): a publisher and fast and slow viewers through
# a whole song, a viewer waiting for a session that starts later, a publisher that drops
# and resumes, a late and a complete-mode joiner, pings from a viewer that never reads,
# refused publishers, a silent publisher that never reads the relay's pings, and a flood.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$here/corpus/wire_frame" "$here/corpus/relay_session"

python3 - "$here/corpus" <<'PY'
import os, struct, sys, zlib

out = sys.argv[1]

def varint(v):
    b = bytearray()
    while v >= 0x80:
        b.append((v & 0x7F) | 0x80); v >>= 7
    b.append(v)
    return bytes(b)

def chunk(seq, keyframe, payload=b'frames', crc_ok=True):
    h = b'\xb5' + bytes([1 if keyframe else 2]) + varint(seq) + varint(seq * 9) + varint(9)
    h += struct.pack('<f', seq * 0.1) + varint(len(payload))
    h += struct.pack('<I', zlib.crc32(payload) ^ (0 if crc_ok else 1))
    return h + struct.pack('<I', zlib.crc32(h)) + payload

def s(text):
    b = text.encode()
    return struct.pack('<H', len(b)) + b

def frame(kind, body):
    return struct.pack('<I', 1 + len(body)) + bytes([kind]) + body

hello = lambda role: frame(1, struct.pack('<HHB', 1, 1, role) + s('seed'))
messages = {
    'hello': hello(1),
    'publish': frame(2, s('song-1') + s('token') + b'\x00' + bytes(range(16))),
    'subscribe': frame(3, s('song-1') + b'\x01' + struct.pack('<I', 30000)),
    'header': frame(4, b'BSRS\x01header bytes'),
    'chunk': frame(5, chunk(3, True)),
    'ack': frame(6, struct.pack('<I', 41)),
    'resume': frame(7, struct.pack('<I', 42)),
    'end': frame(8, b'\x01'),
    'error': frame(9, struct.pack('<H', 8) + s('taken')),
    'ping': frame(10, struct.pack('<Q', 7)),
    'pong': frame(11, struct.pack('<Q', 7)),
    'skipped': frame(12, struct.pack('<IQ', 12, 3456)),
}
publisher = hello(1) + messages['publish'] + messages['header'] + b''.join(
    frame(5, chunk(i, i % 4 == 0)) for i in range(8)) + messages['end']
viewer = hello(0) + messages['resume'] + messages['header'] + frame(5, chunk(0, True)) + \
    messages['skipped'] + frame(5, chunk(9, True)) + messages['ping'] + messages['end']
broken = {
    'over-limit': struct.pack('<I', 70000) + b'\x05',
    'huge-length': b'\xff\xff\xff\xff\x05' + b'x' * 8,
    'zero-length': messages['ping'] + b'\x00\x00\x00\x00',
    'unknown-type': frame(0x77, b'') + messages['ping'],
    'bad-chunk-crc': frame(5, chunk(1, False, crc_ok=False)),
    'trailing-bytes': frame(6, b'\x01\x02\x03\x04\x05'),
    'bad-session': frame(3, s('no spaces!') + b'\x00' + struct.pack('<I', 0)),
    'cut-short': publisher[:len(publisher) - 5],
}
seeds = dict(messages, publisher=publisher, viewer=viewer, **broken)
for name, data in seeds.items():
    for ctl in (0, 1, 2, 3, 0x57):
        with open(os.path.join(out, 'wire_frame', f'{name}-ctl{ctl}'), 'wb') as f:
            f.write(bytes([ctl]) + data)

class Script:
    """Operations in relay_session's encoding (Harness::step)."""
    def __init__(self, msgs=3, qbytes=2, backlog=3, pt=1, hs=1, idle=1, ping=1, rate=2,
                 burst=2):
        # Indices into the target's lists of limits, in the order `config` reads them
        # (by default: idle timeout 60 s, pings every 15 s, no flood limit to speak of).
        self.b = bytearray([msgs, qbytes, backlog, pt, hs, idle, ping, rate, burst])
        self.conns = 0
    def op(self, code, *args):
        self.b += bytes([0, code]) + bytes(args)
        return self
    def pick(self, c):
        # `choose` among one connection reads no byte (arbitrary's int_in_range(0..=0)).
        return (c,) if self.conns > 1 else ()
    def connect(self, fast=True):
        self.op(0, 1 if fast else 0); self.conns += 1; return self.conns - 1
    def hello(self, c, role):  # role: 1 publisher, 2 viewer
        return self.op(1, *self.pick(c), role, 0)
    def publish(self, c, session=0, token=0, resume=0, key=0):
        return self.op(2, *self.pick(c), session, token, resume, key)
    def subscribe(self, c, session=0, live=True, wait=2):
        return self.op(3, *self.pick(c), session, 1 if live else 0, wait)
    def header(self, c):
        return self.op(4, *self.pick(c), 0)
    def chunk(self, c, keyframe, filler=40):
        # ratio(7, 8) with byte 0: the publisher's next sequence number.
        return self.op(5, *self.pick(c), 0, 0 if keyframe else 1, filler)
    def end(self, c):
        return self.op(6, *self.pick(c), 1)
    def ping(self, c):
        return self.op(7, *self.pick(c), *range(8))
    def drain(self, c, n=8):
        return self.op(9, *self.pick(c), n)
    def drain_all(self):
        return self.op(10)
    def disconnect(self, c):
        return self.op(11, *self.pick(c))
    def tick(self, ms):
        return self.op(12, ms >> 8, ms & 0xFF)

def song(sc, p, chunks, every=5, start=0):
    for i in range(start, start + chunks):
        sc.chunk(p, i % every == 0)

scripts = {}
# A whole song: a publisher, a fast and a slow viewer.
sc = Script()
p = sc.connect(); sc.hello(p, 1).publish(p)
fast = sc.connect(); sc.hello(fast, 2).subscribe(fast)
slow = sc.connect(False); sc.hello(slow, 2).subscribe(slow)
sc.header(p); song(sc, p, 24); sc.drain(slow, 3); song(sc, p, 6, start=24)
sc.end(p).drain_all().tick(100)
scripts['song-fast-and-slow'] = sc
# A viewer waits for a session that starts later; a complete-mode viewer; a late joiner.
sc = Script(msgs=2)
v = sc.connect(); sc.hello(v, 2).subscribe(v, session=1)
p = sc.connect(); sc.hello(p, 1).publish(p, session=1, token=1).header(p)
c = sc.connect(False); sc.hello(c, 2).subscribe(c, session=1, live=False)
song(sc, p, 12, every=4)
late = sc.connect(); sc.hello(late, 2).subscribe(late, session=1)
song(sc, p, 8, every=4, start=12); sc.drain(c, 5); sc.end(p); sc.drain_all().drain_all()
scripts['wait-complete-late'] = sc
# A publisher that drops and resumes with its key; another that is refused.
sc = Script(pt=0)
v = sc.connect(); sc.hello(v, 2).subscribe(v)
p = sc.connect(); sc.hello(p, 1).publish(p, key=1).header(p); song(sc, p, 7)
sc.disconnect(p).tick(20)
p2 = sc.connect(); sc.hello(p2, 1).publish(p2, resume=1, key=1).drain(p2).header(p2)
busy = sc.connect(); sc.hello(busy, 1).publish(busy, key=0)
song(sc, p2, 5, start=7); sc.disconnect(p2).tick(2000).tick(2000)
scripts['drop-and-resume'] = sc
# A ping flood from a viewer that never reads, a wrong token, a viewer that publishes.
sc = Script(msgs=0)
p = sc.connect(); sc.hello(p, 1).publish(p, session=2, token=2)
q = sc.connect(); sc.hello(q, 2).publish(q)
f = sc.connect(False); sc.hello(f, 2)
for _ in range(40):
    sc.ping(f)
sc.tick(6000)
scripts['flood-and-refusals'] = sc
# A publisher that says nothing after its header and reads nothing, pinged every 50 ms by
# the relay until its idle timeout (what relay_session found after the timeouts' merge),
# beside a viewer that reads.
sc = Script(msgs=2, ping=0)
p = sc.connect(False); sc.hello(p, 1).publish(p).header(p)
v = sc.connect(); sc.hello(v, 2).subscribe(v)
for _ in range(12):
    sc.tick(60)
sc.drain(p, 2).tick(60).tick(60)
scripts['silent-publisher-pinged'] = sc
# A viewer over the flood allowance (1 a second, a burst of 1), and the relay's idle timeout.
sc = Script(idle=0, ping=0, rate=0, burst=0)
p = sc.connect(); sc.hello(p, 1)
f = sc.connect(); sc.hello(f, 2).subscribe(f).ping(f).ping(f)
sc.tick(300)
scripts['flood-and-idle'] = sc
for name, sc in scripts.items():
    with open(os.path.join(out, 'relay_session', name), 'wb') as f:
        f.write(bytes(sc.b))
print(f'{5 * len(seeds)} wire_frame seeds, {len(scripts)} relay_session seeds', file=sys.stderr)
PY
