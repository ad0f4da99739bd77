#!/usr/bin/env bash
# Builds the seed corpora fuzz/corpus/parse_whole and fuzz/corpus/parse_push from the real
# replays in $BSOR_CORPUS (default: ../shared/corpus beside the repository's root).
#
# The real files are 1 to 3 MB: too big to mutate quickly, and over the -max_len the
# targets are run with. So the seeds are small files cut from them:
# - valid mini replays: the real info block, the first few records of every section, and
#   the real optional sections (controller offsets, user data) when the file has them;
# - the same with edits the real files lack: a wall, a bomb, a note of unknown type,
#   non-empty user data, trailing bytes, and (for test.bsor's non-ASCII player name) a
#   length field that counts UTF-16 units, as older mods wrote;
# - truncated prefixes (300, 2000 and 8000 bytes) and a mini replay cut short.
# parse_push seeds are the same bytes after one control byte (it picks the piece sizes).
#
# The corpora are git-ignored: the replays must never enter the project's history.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
src="${BSOR_CORPUS:-$root/../shared/corpus}"
[ -d "$src" ] || { echo "no corpus at $src (set BSOR_CORPUS)" >&2; exit 1; }
mkdir -p "$here/corpus/parse_whole" "$here/corpus/parse_push"

python3 - "$src" "$here/corpus" <<'PY'
import glob, hashlib, os, struct, sys

src, out = sys.argv[1], sys.argv[2]

def split(b):
    """The byte ranges of a well-formed BSOR v1 file's parts."""
    p = 0
    def i32():
        nonlocal p
        v = struct.unpack_from('<i', b, p)[0]; p += 4; return v
    assert b[:5] == b'\x69\x3d\x2d\x44\x01' and b[5] == 0, 'not BSOR v1'
    p = 6
    strings = []
    for n in range(16):
        if n == 13:
            p += 4  # score
        start = p; ln = i32(); p += ln; strings.append((start, p))
    p += 21
    parts = {'head': b[:p], 'strings': strings}
    sizes = {1: lambda q: 92, 2: None, 3: lambda q: 16, 4: lambda q: 8, 5: lambda q: 12}
    for marker in range(1, 6):
        assert b[p] == marker; p += 1
        count = i32(); recs = []
        for _ in range(count):
            if marker == 2:
                t = struct.unpack_from('<i', b, p + 12)[0]
                n = 16 + (72 if t in (0, 1) else 0)
            else:
                n = sizes[marker](p)
            recs.append(b[p:p + n]); p += n
        parts[marker] = recs
    parts['tail'] = b[p:]  # optional sections and trailing bytes
    return parts

def section(marker, recs):
    return bytes([marker]) + struct.pack('<i', len(recs)) + b''.join(recs)

def build(parts, k, extra=None, tail=None):
    extra = extra or {}
    body = parts['head']
    for m in range(1, 6):
        recs = extra.get(m, parts[m][:k])
        body += section(m, recs)
    return body + (parts['tail'] if tail is None else tail)

seeds = {}
def add(name, data):
    seeds[name] = data

wall = struct.pack('<ifff', 1234, -0.25, 12.5, 11.0)
bomb = struct.pack('<iffi', 99999, 3.0, 2.5, 3)   # eventType 3: bomb, no cut info
unknown = struct.pack('<ifff', 40000, 4.0, 3.5, 0) [:12] + struct.pack('<i', 9)
user = bytes([7]) + struct.pack('<i', 5) + b'hello'
offsets = bytes([6]) + b''.join(struct.pack('<f', v) for v in range(14))

for path in sorted(glob.glob(os.path.join(src, '*.bsor'))):
    name = os.path.basename(path)[:-5]
    b = open(path, 'rb').read()
    parts = split(b)
    for n in (300, 2000, 8000):
        add(f'{name}-prefix{n}', b[:n])
    add(f'{name}-empty-sections', build(parts, 0))
    for k in (1, 3, 8):
        add(f'{name}-mini{k}', build(parts, k))
    mini = build(parts, 3)
    add(f'{name}-mini3-cut', mini[:len(mini) - 7])
    add(f'{name}-walls-bombs', build(parts, 2, {
        2: parts[2][:2] + [bomb, unknown], 3: [wall, wall]}))
    add(f'{name}-offsets-userdata-trailing', build(parts, 1, tail=offsets + user + b'\x00junk'))
    add(f'{name}-userdata-only', build(parts, 1, tail=user))
    # A UTF-16 length for any non-ASCII string followed by another string (legacy mods).
    head = parts['head']
    for i, (s, e) in enumerate(parts['strings'][:12]):
        text = head[s + 4:e]
        try:
            units = len(text.decode('utf-8').encode('utf-16-le')) // 2
        except UnicodeDecodeError:
            continue
        if units != len(text):
            legacy = head[:s] + struct.pack('<i', units) + head[s + 4:]
            add(f'{name}-legacy-string{i}', build(dict(parts, head=legacy), 2))
    # The same for the mode (after the score, before the environment): "Ståndard", 8 units.
    s, e = parts['strings'][13]
    legacy = head[:s] + struct.pack('<i', 8) + 'Ståndard'.encode() + head[e:]
    add(f'{name}-legacy-mode', build(dict(parts, head=legacy), 2))

for name, data in seeds.items():
    open(os.path.join(out, 'parse_whole', name), 'wb').write(data)
    for ctl in (0, 1, 200):
        open(os.path.join(out, 'parse_push', f'{name}-ctl{ctl}'), 'wb').write(bytes([ctl]) + data)
print(f'{len(seeds)} seeds each for parse_whole, {3 * len(seeds)} for parse_push, '
      f'{max(map(len, seeds.values()))} bytes at most', file=sys.stderr)
PY
