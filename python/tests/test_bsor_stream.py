"""bsor_stream against py-bsor 1.3.6 (an independent reader) on the corpus and on synthetic
replays, round trips through BSOR and .bsors, and errors."""

import io
import os
import tarfile

import numpy as np
import pytest

import bsor_stream
from bsor_stream import _native

from conftest import CORPUS, corpus_files

CORPUS_BSOR = corpus_files("*.bsor")
pybsor = pytest.importorskip("bsor.Bsor", reason="py-bsor is not installed")


def synth(seed=3, seconds=30.0, fps=60):
    """A synthetic BSOR: walls, bombs, misses, bad cuts, heights, a pause, offsets and
    user data."""
    return _native.synth_bsor(seed, seconds, fps)


def f32(values):
    return np.array(values, dtype=np.float32)


def same(a, b):
    """Equal as float32 bits (NaN payloads and negative zeros included)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check_against_pybsor(data: bytes, r: bsor_stream.Replay):
    m = pybsor.make_bsor(io.BytesIO(data))
    i = r.info
    names = {
        "version": "version",
        "gameVersion": "gameVersion",
        "timestamp": "timestamp",
        "playerID": "playerId",
        "playerName": "playerName",
        "platform": "platform",
        "trackingSystem": "trackingSystem",
        "hmd": "hmd",
        "controller": "controller",
        "hash": "songHash",
        "songName": "songName",
        "mapper": "mapper",
        "difficulty": "difficulty",
        "score": "score",
        "mode": "mode",
        "environment": "environment",
        "modifiers": "modifiers",
        "leftHanded": "leftHanded",
    }
    for ours, theirs in names.items():
        assert i[ours] == getattr(m.info, theirs), ours
    for k in ("jumpDistance", "height", "startTime", "failTime", "speed"):
        assert same(i[k], getattr(m.info, k)), k

    fr = r.frames
    assert len(fr["time"]) == len(m.frames) == r.frame_count
    assert same(fr["time"], [x.time for x in m.frames])
    assert np.array_equal(fr["fps"], np.array([x.fps for x in m.frames], dtype=np.int32))
    axes = ("x", "y", "z", "x_rot", "y_rot", "z_rot", "w_rot")
    theirs = f32(
        [
            [[getattr(getattr(x, d), a) for a in axes] for d in ("head", "left_hand", "right_hand")]
            for x in m.frames
        ]
    ).reshape(-1, 3, 7)
    assert same(fr["poses"], theirs)

    n = r.notes
    assert len(n["note_id"]) == len(m.notes)
    assert list(n["note_id"]) == [x.note_id for x in m.notes]
    assert same(n["event_time"], [x.event_time for x in m.notes])
    assert same(n["spawn_time"], [x.spawn_time for x in m.notes])
    assert list(n["event_type"]) == [x.event_type for x in m.notes]
    for k, x in enumerate(m.notes):
        if n["color"][k] != -1:  # py-bsor splits a bomb's id as if colorType were a digit
            assert (
                n["scoring_type"][k],
                n["line"][k],
                n["layer"][k],
                n["color"][k],
                n["cut_direction"][k],
            ) == (x.scoringType, x.lineIndex, x.noteLineLayer, x.colorType, x.cutDirection)
        c = x.cut
        if c is None:
            assert np.isnan(n["saber_speed"][k]) and n["saber_type"][k] == -1
            continue
        assert bool(n["speed_ok"][k]) == c.speedOK
        assert bool(n["direction_ok"][k]) == c.directionOk
        assert bool(n["saber_type_ok"][k]) == c.saberTypeOk
        assert bool(n["was_cut_too_soon"][k]) == c.wasCutTooSoon
        assert n["saber_type"][k] == c.saberType
        ours = [
            n[f][k]
            for f in (
                "saber_speed",
                "saber_dir_x",
                "saber_dir_y",
                "saber_dir_z",
                "time_deviation",
                "cut_dir_deviation",
                "cut_point_x",
                "cut_point_y",
                "cut_point_z",
                "cut_normal_x",
                "cut_normal_y",
                "cut_normal_z",
                "cut_distance_to_center",
                "cut_angle",
                "before_cut_rating",
                "after_cut_rating",
            )
        ]
        theirs = [
            c.saberSpeed,
            *c.saberDirection,
            c.timeDeviation,
            c.cutDeviation,
            *c.cutPoint,
            *c.cutNormal,
            c.cutDistanceToCenter,
            c.cutAngle,
            c.beforeCutRating,
            c.afterCutRating,
        ]
        assert same(ours, theirs), k

    w = r.walls
    assert list(w["wall_id"]) == [x.id for x in m.walls]
    assert np.array_equal(w["wall_id"], w["line"] * 100 + w["obstacle_type"] * 10 + w["width"])
    for ours, theirs in (("energy", "energy"), ("time", "time"), ("spawn_time", "spawnTime")):
        assert same(w[ours], [getattr(x, theirs) for x in m.walls])
    assert same(r.heights["height"], [x.height for x in m.heights])
    assert same(r.heights["time"], [x.time for x in m.heights])
    assert list(r.pauses["duration"]) == [x.duration for x in m.pauses]
    assert same(r.pauses["time"], [x.time for x in m.pauses])
    if m.controller_offsets:
        o = m.controller_offsets
        theirs = [[getattr(getattr(o, d), a) for a in axes] for d in ("left", "right")]
        assert same(r.controller_offsets, theirs)
    else:
        assert r.controller_offsets is None
    return m


@pytest.mark.parametrize("path", CORPUS_BSOR, ids=lambda p: p.name)
def test_corpus_equals_pybsor_and_round_trips(path):
    data = path.read_bytes()
    r = bsor_stream.load(path)
    check_against_pybsor(data, r)
    assert r.format == "bsor" and r.complete
    assert r.to_bsor() == data  # written from the arrays, byte for byte
    assert bsor_stream.load(data).to_bsor() == data  # from bytes too


def test_corpus_present_or_notice(corpus):
    assert len(CORPUS_BSOR) >= 4, f"expected the corpus's 4 BSORs in {corpus}"


def test_synthetic_equals_pybsor():
    data = synth()
    r = bsor_stream.load(data)
    assert len(r.walls["wall_id"]) > 0
    assert (r.notes["event_type"] == 3).any() and (r.notes["color"] == -1).any()
    assert len(r.pauses["duration"]) > 0 and len(r.heights["height"]) > 0
    assert r.controller_offsets is not None
    assert r.user_data == b'{"source":"bsor-stream synth"}'
    assert r.to_bsor() == data
    # py-bsor reads user data as key/value entries after a count where BSOR has a byte
    # length, so it reads only an empty section: compare the rest with one.
    r.user_data = b""
    check_against_pybsor(r.to_bsor(), r)


def test_bomb_ids_follow_the_note_id_rules():
    r = bsor_stream.load(synth())
    bombs = r.notes["event_type"] == 3
    assert (r.notes["color"][bombs] == -1).all()
    assert (r.notes["cut_direction"][bombs] == 9).all()
    ids = r.notes["note_id"]
    joined = (
        r.notes["scoring_type"] * 10000
        + r.notes["line"] * 1000
        + r.notes["layer"] * 100
        + r.notes["color"] * 10
        + r.notes["cut_direction"]
    )
    assert np.array_equal(ids, joined)


def test_edits_are_written_back():
    data = synth(seed=3)
    r = bsor_stream.load(data)
    r.frames["poses"][10, 1, 0] = 1.25  # left hand x of frame 10
    r.frames["time"][11] = 123.5
    r.notes["saber_speed"][0] = 42.0
    r.notes["line"][1] = 3  # a part of the note ID: the ID follows
    r.walls["energy"][0] = 0.5
    r.walls["width"][1] = (r.walls["width"][1] % 3) + 1
    r.pauses["duration"][0] = 77
    r.info["playerName"] = "Zoë 🎵"
    r.user_data = b"new"
    out = r.to_bsor()
    assert out != data
    b = bsor_stream.load(out)
    assert b.frames["poses"][10, 1, 0] == np.float32(1.25)
    assert b.frames["time"][11] == np.float32(123.5)
    assert b.notes["saber_speed"][0] == np.float32(42.0)
    assert b.notes["line"][1] == 3
    old = bsor_stream.load(data).notes
    assert b.notes["note_id"][1] == old["note_id"][1] + (3 - old["line"][1]) * 1000
    assert b.walls["energy"][0] == np.float32(0.5)
    assert b.walls["width"][1] == r.walls["width"][1]
    assert b.walls["wall_id"][1] == (
        r.walls["line"][1] * 100 + r.walls["obstacle_type"][1] * 10 + r.walls["width"][1]
    )
    assert b.pauses["duration"][0] == 77
    assert b.info["playerName"] == "Zoë 🎵"
    assert b.user_data == b"new"
    # Everything else is as it was.
    a = bsor_stream.load(data)
    assert same(b.frames["poses"][20:], a.frames["poses"][20:])
    assert np.array_equal(b.notes["note_id"][2:], a.notes["note_id"][2:])
    # Plain Python values and other dtypes are accepted and converted.
    r.pauses["duration"] = [5] * len(r.pauses["duration"])
    assert list(bsor_stream.load(r.to_bsor()).pauses["duration"]) == r.pauses["duration"]


def test_note_id_follows_its_parts():
    r = bsor_stream.load(synth(seed=6))
    k = int(np.argmax(r.notes["event_type"] == 0))
    old = int(r.notes["note_id"][k])
    r.notes["layer"][k] = (r.notes["layer"][k] + 1) % 3
    b = bsor_stream.load(r.to_bsor())
    assert b.notes["layer"][k] == r.notes["layer"][k]
    assert b.notes["note_id"][k] != old
    # Changing the ID itself works too.
    r = bsor_stream.load(synth(seed=6))
    r.notes["note_id"][k] = 31234
    b = bsor_stream.load(r.to_bsor())
    assert (b.notes["line"][k], b.notes["layer"][k], b.notes["color"][k]) == (1, 2, 3)


@pytest.mark.parametrize("profile,pos_m,rot_deg", [("lossless", 0, 0), ("fine", 1e-4, 0.02), ("compact", 1e-3, 0.2)])
@pytest.mark.parametrize("archive", [True, False])
def test_encode_profiles(profile, pos_m, rot_deg, archive):
    data = synth(seed=7)
    r = bsor_stream.load(data)
    s = bsor_stream.encode(r, profile=profile, archive=archive)
    assert s[:4] == b"BSRS"
    b = bsor_stream.load(s)
    assert b.format == "bsors" and b.profile == profile and b.complete
    assert np.array_equal(b.notes["note_id"], r.notes["note_id"])
    assert same(b.frames["time"], r.frames["time"])
    if profile == "lossless":
        assert b.to_bsor() == data
        return
    p, q = b.frames["poses"], r.frames["poses"]
    assert np.abs(p[:, :, :3] - q[:, :, :3]).max() <= pos_m * 1.0001
    # Rotation angle between unit quaternions from their chord (precise for small
    # angles): the sign of a quaternion does not matter.
    a = p[:, :, 3:].astype(np.float64)
    b = q[:, :, 3:].astype(np.float64)
    ok = (np.linalg.norm(a, axis=2) > 0.5) & (np.linalg.norm(b, axis=2) > 0.5)
    a, b = a[ok], b[ok]
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    b *= np.where(np.sum(a * b, axis=1) < 0, -1.0, 1.0)[:, None]
    angle = np.degrees(4 * np.arcsin(np.linalg.norm(a - b, axis=1) / 2))
    assert angle.max() <= rot_deg * 1.05


@pytest.mark.parametrize("path", CORPUS_BSOR[:2], ids=lambda p: p.name)
def test_corpus_through_bsors(path):
    data = path.read_bytes()
    r = bsor_stream.load(data)
    s = bsor_stream.encode(r)
    assert bsor_stream.load(s).to_bsor() == data


@pytest.mark.parametrize("seconds,fps", [(0.2, 10), (11.0, 60), (30.0, 90), (75.0, 120)])
def test_path_load_equals_bytes_load(tmp_path, seconds, fps):
    # A path is read a 64 KiB buffer at a time (a record cut across reads carried over):
    # frame sections from a few records to 13 buffers' worth (828 KB) give the same arrays
    # and the same bytes back as a load of the bytes.
    data = synth(seed=5, seconds=seconds, fps=fps)
    p = tmp_path / "r.bsor"
    p.write_bytes(data)
    a, b = bsor_stream.load(p), bsor_stream.load(data)
    assert len(a.frames["time"]) == len(b.frames["time"]) > 0
    for k in ("time", "fps", "poses"):
        assert a.frames[k].tobytes() == b.frames[k].tobytes(), k
    assert a.to_bsor() == data


def test_reuse_freed_memory(tmp_path):
    # Run in a child: the setting is process-wide. Where the C library is glibc it applies
    # (mallopt accepts both values), and loads after it give the same arrays.
    import platform
    import subprocess
    import sys

    data = synth(seed=6, seconds=20.0)
    p = tmp_path / "r.bsor"
    p.write_bytes(data)
    code = (
        "import sys, bsor_stream\n"
        "ok = bsor_stream.reuse_freed_memory()\n"
        "rs = [bsor_stream.load(sys.argv[1]) for _ in range(3)]\n"
        "assert all(r.to_bsor() == open(sys.argv[1], 'rb').read() for r in rs)\n"
        "print(ok)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(platform.libc_ver()[0] == "glibc")


def test_load_events_skips_frames(tmp_path):
    data = synth(seed=8)
    full = bsor_stream.load(data)
    path = tmp_path / "r.bsor"
    path.write_bytes(data)
    # A BSOR file is read in pieces (its frames a megabyte at a time): the same replay.
    from_file = bsor_stream.load(path)
    assert from_file.to_bsor() == data and same(from_file.frames["poses"], full.frames["poses"])
    for src in (data, path, bsor_stream.encode(full), bsor_stream.encode(full, "compact", False)):
        e = bsor_stream.load_events(src)
        assert e.frames is None
        assert e.frame_count == full.frame_count
        for t in ("notes", "walls", "heights", "pauses"):
            for k, v in getattr(full, t).items():
                assert same(getattr(e, t)[k], v) if v.dtype == np.float32 else np.array_equal(getattr(e, t)[k], v), (t, k)
        assert e.info == full.info
        with pytest.raises(ValueError):
            e.to_bsor()


def test_arrays_wrap_rust_buffers():
    r = bsor_stream.load(synth())
    for a in (r.frames["time"], r.frames["poses"], r.notes["note_id"]):
        assert not a.flags["OWNDATA"]  # memory owned by the Rust vector NumPy holds
        assert a.flags["C_CONTIGUOUS"] and a.flags["WRITEABLE"]


@pytest.mark.parametrize(
    "mangle,section",
    [
        (lambda d: d[:5000], "frames"),
        (lambda d: d[:3], "header"),
        (lambda d: b"", "header"),
        (lambda d: b"hello world, not a replay", "header"),
        (lambda d: d[:4] + b"\x02" + d[5:], "header"),
    ],
)
def test_damaged_files_raise_replay_error(mangle, section):
    data = mangle(synth())
    with pytest.raises(bsor_stream.ReplayError) as e:
        bsor_stream.load(data)
    assert e.value.section == section
    assert isinstance(e.value.offset, int)
    assert isinstance(e.value, ValueError)
    with pytest.raises(bsor_stream.ReplayError):
        bsor_stream.load_events(data)


def test_error_names_the_file(tmp_path):
    p = tmp_path / "cut.bsor"
    p.write_bytes(synth()[:2000])
    with pytest.raises(bsor_stream.ReplayError) as e:
        bsor_stream.load(p)
    assert str(p) in str(e.value) and e.value.path == str(p)
    with pytest.raises(bsor_stream.ReplayError):
        bsor_stream.load(tmp_path / "missing.bsor")


def test_every_truncation_raises_never_crashes():
    data = synth(seconds=2.0, fps=30)
    for n in range(0, len(data), 97):
        with pytest.raises(bsor_stream.ReplayError):
            bsor_stream.load(data[:n])


def test_damaged_stream_is_read_around():
    r = bsor_stream.load(synth(seed=9))
    s = bytearray(bsor_stream.encode(r, "fine", archive=False))
    s[len(s) // 2] ^= 0xFF
    b = bsor_stream.load(bytes(s))
    assert not b.complete and b.damage
    assert 0 < len(b.frames["time"]) < len(r.frames["time"]) + 1


def _write_set(tmp_path):
    d = tmp_path / "set"
    (d / "sub").mkdir(parents=True)
    (d / "a.bsor").write_bytes(synth(seed=1, seconds=5.0))
    (d / "sub" / "b.bsors").write_bytes(bsor_stream.encode(bsor_stream.load(synth(seed=2, seconds=5.0))))
    (d / "c.bsor").write_bytes(b"broken")
    (d / "notes.txt").write_text("not a replay")
    return d


@pytest.mark.parametrize("threads", [1, 2])
def test_load_many_directory_and_list(tmp_path, threads):
    d = _write_set(tmp_path)
    got = list(bsor_stream.load_many(d, threads=threads))
    names = [os.path.relpath(n, d) for n, _ in got]
    assert names == ["a.bsor", "c.bsor", os.path.join("sub", "b.bsors")]
    assert isinstance(got[0][1], bsor_stream.Replay)
    assert isinstance(got[1][1], bsor_stream.ReplayError)
    assert got[2][1].format == "bsors"
    paths = [d / "a.bsor", d / "missing.bsor", d / "c.bsor"]
    got = list(bsor_stream.load_many(paths, threads=threads, batch=2))
    assert [type(r).__name__ for _, r in got] == ["Replay", "ReplayError", "ReplayError"]
    ev = list(bsor_stream.load_many([d / "a.bsor"], events_only=True))
    assert ev[0][1].frames is None


def test_load_many_tar(tmp_path):
    d = _write_set(tmp_path)
    tar = tmp_path / "set.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(d, arcname="set")
    got = dict(bsor_stream.load_many(tar, threads=2))
    assert sorted(got) == ["set/a.bsor", "set/c.bsor", "set/sub/b.bsors"]
    assert isinstance(got["set/c.bsor"], bsor_stream.ReplayError)
    assert got["set/a.bsor"].to_bsor() == synth(seed=1, seconds=5.0)


def test_pandas():
    pd = pytest.importorskip("pandas")
    t = bsor_stream.load(synth()).to_pandas()
    assert isinstance(t["frames"], pd.DataFrame)
    assert list(t["frames"].columns[:4]) == ["time", "fps", "head_x", "head_y"]
    assert len(t["notes"]) == len(bsor_stream.load(synth()).notes["note_id"])


def test_arrow_and_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    r = bsor_stream.load(synth())
    t = r.to_arrow()
    assert t["frames"].num_rows == r.frame_count
    d = _write_set(tmp_path)
    counts = bsor_stream.to_parquet(d, str(tmp_path / "out"))
    assert counts["replays"] == 2 and counts["errors"] == 1
    frames = pq.read_table(tmp_path / "out" / "frames.parquet")
    assert frames.num_rows == counts["frames"]
    assert set(frames.column("replay").to_pylist()) == {str(d / "a.bsor"), str(d / "sub" / "b.bsors")}


def test_xror_is_the_same_play_as_bsor(corpus):
    x = corpus / "sample1.xror"
    if not x.is_file():
        pytest.skip(f"no sample1.xror in {corpus}")
    b = (corpus / "sample1.bsor").read_bytes()
    r = bsor_stream.load(x)
    assert r.format == "xror"
    ref = bsor_stream.load(b)
    assert r.info == ref.info
    for k in ("time", "fps", "poses"):
        assert same(r.frames[k], ref.frames[k]) if k != "fps" else np.array_equal(r.frames[k], ref.frames[k])
    for k, v in ref.notes.items():
        assert same(r.notes[k], v) if v.dtype == np.float32 else np.array_equal(r.notes[k], v), k
    # Nothing sample1.bsor holds is missing from its XROR: the BSOR comes back whole.
    assert r.to_bsor() == b
    e = bsor_stream.load_events(x)
    assert e.frames is None and e.frame_count == ref.frame_count
    s = bsor_stream.encode(r, "compact")
    assert bsor_stream.load(s).frame_count == ref.frame_count


def test_damaged_xror_raises(corpus):
    x = corpus / "sample1.xror"
    if not x.is_file():
        pytest.skip(f"no sample1.xror in {corpus}")
    data = bytearray(x.read_bytes())
    with pytest.raises(bsor_stream.ReplayError) as e:
        bsor_stream.load(bytes(data[:-10]))
    # A cut document is not BSON any more: the reader says it is none of the formats.
    assert e.value.section == "header"
    # Damage inside the frames' fpzip data: the frames field, with an offset in the file.
    at = data.find(b"frames\x00") + 20
    for k in range(at, at + 400, 37):
        data[k] ^= 0x5A
    try:
        bsor_stream.load(bytes(data))
    except bsor_stream.ReplayError as err:
        assert err.section in ("frames", "document", "events", "info"), err


def test_mutated_files_raise_or_load_never_crash():
    """Random byte flips in BSOR and .bsors: a Replay or a ReplayError, nothing else."""
    rng = np.random.default_rng(11)
    data = synth(seed=12, seconds=4.0, fps=30)
    stream = bsor_stream.encode(bsor_stream.load(data), "fine", archive=False)
    for src in (data, stream):
        for _ in range(150):
            m = bytearray(src)
            for at in rng.integers(0, len(m), size=rng.integers(1, 4)):
                m[at] ^= int(rng.integers(1, 256))
            for f in (bsor_stream.load, bsor_stream.load_events):
                try:
                    r = f(bytes(m))
                except bsor_stream.ReplayError:
                    continue
                assert isinstance(r, bsor_stream.Replay)
