#!/usr/bin/env bash
# Builds the seed corpus fuzz/corpus/stream_decode from streams the project's own CLI
# writes (git-ignored, like the other corpora):
# - the replays: synthetic ones (`bsor-stream synth`, 3 s at 30 fps, a few seeds) and short
#   cuts of the real replays in $BSOR_CORPUS (default ../shared/corpus): the real info
#   block and the first 90 frames, 20 notes, 6 walls, 4 heights and 2 pauses (fewer when
#   the file has fewer), made whole again;
# - each encoded with `bsor-stream encode` in every profile, with live and archive settings;
# - from each stream: the whole stream, truncated copies (a third, two thirds, one byte
#   short, without the footer, the header alone), and copies with one byte flipped (in the
#   stream header, in the first chunk header, in a payload, in the footer).
# Every seed is one control byte (the target's piece sizes; 200 has the high bit set, for
# the target to recompute the CRCs) and then the stream bytes.
#
# The CLI is $BSOR_STREAM (default: target/release/bsor-stream beside this directory, built
# with `cargo build --release` if missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
src="${BSOR_CORPUS:-$root/../shared/corpus}"
cli="${BSOR_STREAM:-$root/target/release/bsor-stream}"
if [ ! -x "$cli" ]; then
    (cd "$root" && cargo build --release)
fi
out="$here/corpus/stream_decode"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The replays.
for seed in 1 2 3 7; do
    "$cli" synth -o "$work/synth$seed.bsor" --seconds 3 --fps 30 --seed "$seed" >/dev/null
done
if [ -d "$src" ]; then
    python3 - "$src" "$work" <<'PY'
import glob, os, struct, sys

src, work = sys.argv[1], sys.argv[2]
# Records kept per section (frames, notes, walls, heights, pauses).
keep = {1: 90, 2: 20, 3: 6, 4: 4, 5: 2}
for path in sorted(glob.glob(os.path.join(src, '*.bsor'))):
    b = open(path, 'rb').read()
    if b[:5] != b'\x69\x3d\x2d\x44\x01' or b[5] != 0:
        continue
    p = 6
    for n in range(16):
        if n == 13:
            p += 4  # score
        (ln,) = struct.unpack_from('<i', b, p); p += 4 + ln
    p += 21
    out = bytearray(b[:p])
    for marker in range(1, 6):
        assert b[p] == marker; p += 1
        (count,) = struct.unpack_from('<i', b, p); p += 4
        recs = []
        for _ in range(count):
            if marker == 2:
                t = struct.unpack_from('<i', b, p + 12)[0]
                n = 16 + (72 if t in (0, 1) else 0)
            else:
                n = {1: 92, 3: 16, 4: 8, 5: 12}[marker]
            recs.append(b[p:p + n]); p += n
        recs = recs[:keep[marker]]
        out += bytes([marker]) + struct.pack('<i', len(recs)) + b''.join(recs)
    out += b[p:]  # controller offsets, user data, trailing bytes
    name = os.path.basename(path)[:-5]
    open(os.path.join(work, f'cut-{name}.bsor'), 'wb').write(out)
PY
else
    echo "no corpus at $src (set BSOR_CORPUS): synthetic replays only" >&2
fi

# The streams.
for bsor in "$work"/*.bsor; do
    base="$(basename "$bsor" .bsor)"
    for profile in lossless fine compact; do
        "$cli" encode "$bsor" -o "$work/$base-$profile-live.bsors" --profile "$profile" >/dev/null
        "$cli" encode "$bsor" -o "$work/$base-$profile-archive.bsors" --profile "$profile" \
            --archive >/dev/null
    done
done

# The seeds.
python3 - "$work" "$out" <<'PY'
import glob, os, sys

work, out = sys.argv[1], sys.argv[2]
def varint(b, p):
    v, i = 0, 0
    while p < len(b) and i < 10:
        v |= (b[p] & 0x7f) << (7 * i); p += 1; i += 1
        if b[p - 1] < 0x80:
            break
    return v, p

def header_len(b):
    """Bytes of the stream header (format.md section 3): where the first chunk starts."""
    _, p = varint(b, 10)            # magic, version, profile, step; rotation steps
    _, p = varint(b, p + 4)         # keyframe seconds; keyframe frames
    info, p = varint(b, p + 4)      # flush seconds; info length
    return p + info + 4             # the info block, the header CRC

seeds = {}
for path in sorted(glob.glob(os.path.join(work, '*.bsors'))):
    s = open(path, 'rb').read()
    name = os.path.basename(path)[:-6]
    first = header_len(s)           # the first chunk (its one-byte sync marker is B5)
    assert s[first] == 0xb5, path
    payload = first + 24 if first > 0 else len(s) // 2
    seeds[f'{name}'] = (s, (0, 1, 200))
    for label, cut in [('third', len(s) // 3), ('two-thirds', 2 * len(s) // 3),
                       ('short1', len(s) - 1), ('nofooter', len(s) - 16),
                       ('header', first)]:
        if 0 < cut < len(s):
            seeds[f'{name}-cut-{label}'] = (s[:cut], (1,))
    for label, at in [('header', 10), ('chunkhead', first + 5), ('payload', payload),
                      ('mid', len(s) // 2), ('footer', len(s) - 9)]:
        if 0 <= at < len(s):
            b = bytearray(s); b[at] ^= 0x41
            seeds[f'{name}-flip-{label}'] = (bytes(b), (1, 200))
for name, (data, ctls) in seeds.items():
    for ctl in ctls:
        open(os.path.join(out, f'{name}-ctl{ctl}'), 'wb').write(bytes([ctl]) + data)
sizes = sorted(len(d) for d, _ in seeds.values())
streams = len(glob.glob(os.path.join(work, '*.bsors')))
print(f'{sum(len(c) for _, c in seeds.values())} seeds in {out} ({len(seeds)} variants of '
      f'{streams} streams): {sizes[len(sizes) // 2]} bytes median, {sizes[-1]} at most, '
      f'{sum(n > 20000 for n in sizes)} over 20 KB', file=sys.stderr)
PY
