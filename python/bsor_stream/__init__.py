"""Beat Saber replays as NumPy arrays.

Reads BSOR (BeatLeader's replay format), ``.bsors`` (bsor-stream's stream format, any
profile) and, where built with it, XROR (the BOXRR-23 data set's format) in Rust, with the
GIL released, into NumPy arrays that wrap the buffers Rust filled: no Python object per
frame or event. Writes BSOR and ``.bsors`` back from the arrays.

    >>> import bsor_stream
    >>> r = bsor_stream.load("replay.bsor")          # doctest: +SKIP
    >>> r.frames["poses"].shape                      # doctest: +SKIP
    (27931, 3, 7)

Conventions (python/README.md has them in full): Unity's left-handed coordinates (x right,
y up, z forward), metres, seconds of song time, quaternions in the order x, y, z, w;
``poses[:, 0]`` is the head, ``[:, 1]`` the left hand, ``[:, 2]`` the right hand.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, Union

import numpy as np

from . import _native
from ._errors import ReplayError

__all__ = [
    "Replay",
    "ReplayError",
    "load",
    "load_events",
    "load_many",
    "encode",
    "to_parquet",
    "reuse_freed_memory",
    "REPLAY_SUFFIXES",
]

#: File name endings that load_many takes from a directory or a tar archive.
REPLAY_SUFFIXES = (".bsor", ".bsors", ".xror")

# The dtype of each column, for writing back whatever a user put in the tables.
_NOTE_DTYPES = {
    "note_id": np.int32,
    "event_time": np.float32,
    "spawn_time": np.float32,
    "event_type": np.int32,
    "scoring_type": np.int32,
    "line": np.int32,
    "layer": np.int32,
    "color": np.int32,
    "cut_direction": np.int32,
    "speed_ok": np.uint8,
    "direction_ok": np.uint8,
    "saber_type_ok": np.uint8,
    "was_cut_too_soon": np.uint8,
    "saber_speed": np.float32,
    "saber_dir_x": np.float32,
    "saber_dir_y": np.float32,
    "saber_dir_z": np.float32,
    "saber_type": np.int32,
    "time_deviation": np.float32,
    "cut_dir_deviation": np.float32,
    "cut_point_x": np.float32,
    "cut_point_y": np.float32,
    "cut_point_z": np.float32,
    "cut_normal_x": np.float32,
    "cut_normal_y": np.float32,
    "cut_normal_z": np.float32,
    "cut_distance_to_center": np.float32,
    "cut_angle": np.float32,
    "before_cut_rating": np.float32,
    "after_cut_rating": np.float32,
}
_DTYPES = {
    "frames": {"time": np.float32, "fps": np.int32, "poses": np.float32},
    "notes": _NOTE_DTYPES,
    "walls": {
        "wall_id": np.int32,
        "line": np.int32,
        "obstacle_type": np.int32,
        "width": np.int32,
        "energy": np.float32,
        "time": np.float32,
        "spawn_time": np.float32,
    },
    "heights": {"height": np.float32, "time": np.float32},
    "pauses": {"duration": np.int64, "time": np.float32},
}

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class Replay:
    """One replay as NumPy arrays.

    Attributes:
        info: dict of the info block with BSOR's names (``playerID``, ``songName``,
            ``jumpDistance``...); strings are ``str`` (``bytes`` where not UTF-8).
        frames: dict with ``time`` float32 (N,), ``fps`` int32 (N,) and ``poses`` float32
            (N, 3, 7): head, left hand, right hand × x, y, z, qx, qy, qz, qw. None for a
            replay read with :func:`load_events`.
        notes: dict of equal-length columns, one row per note event: ``note_id``,
            ``event_time``, ``spawn_time``, ``event_type`` (0 good cut, 1 bad cut, 2 miss,
            3 bomb), the parts of the note ID (``scoring_type``, ``line``, ``layer``,
            ``color`` -1 bomb / 0 red / 1 blue, ``cut_direction``), and the cut fields
            (NaN, 0 or -1 for events without a cut).
        walls: ``wall_id`` and its parts (``line``, ``obstacle_type`` 0 full height / 1
            crouch, ``width``), ``energy``, ``time``, ``spawn_time``.
        heights: ``height``, ``time``.
        pauses: ``duration`` int64 (seconds), ``time``.
        controller_offsets: float32 (2, 7) (left, right × x, y, z, qx, qy, qz, qw) or None.
        user_data: bytes or None (None: no section; b"": an empty one).
        format: ``"bsor"``, ``"bsors"`` or ``"xror"``: what it was read from.
        profile: the ``.bsors`` profile (``lossless``, ``fine``, ``compact``...) or None.
        complete: False when a ``.bsors`` had damage or ended early (see ``damage``).
        damage: list of (byte offset, what) stepped over in a ``.bsors``.
        frame_count: frames in the replay (also for :func:`load_events`).
    """

    __slots__ = (
        "info",
        "frames",
        "notes",
        "walls",
        "heights",
        "pauses",
        "controller_offsets",
        "user_data",
        "trailing",
        "format",
        "profile",
        "complete",
        "damage",
        "frame_count",
        "_length_fields",
        "_note_id_read",
        "_wall_id_read",
    )

    def __init__(self, d: Dict[str, Any]):
        self.info = d["info"]
        self.frames = d["frames"]
        self.notes = d["notes"]
        self.walls = d["walls"]
        self.heights = d["heights"]
        self.pauses = d["pauses"]
        self.controller_offsets = d["controller_offsets"]
        self.user_data = d["user_data"]
        self.trailing = d.get("trailing", b"")
        self.format = d.get("format", "bsor")
        self.profile = d.get("profile")
        self.complete = d.get("complete", True)
        self.damage = d.get("damage", [])
        self.frame_count = d.get("frame_count", 0)
        self._length_fields = d.get("length_fields", {})
        # The IDs as read, to tell an edited ID from edited parts when writing.
        self._note_id_read = np.array(self.notes["note_id"], dtype=np.int32)
        self._wall_id_read = np.array(self.walls["wall_id"], dtype=np.int32)

    def __repr__(self) -> str:
        return (
            f"<bsor_stream.Replay {self.format} {self.info.get('playerName')!r} "
            f"{self.info.get('songName')!r}: {self.frame_count} frames, "
            f"{len(self.notes['note_id'])} notes, {len(self.walls['wall_id'])} walls>"
        )

    def _as_dict(self) -> Dict[str, Any]:
        def table(name, cols):
            if cols is None:
                return None
            dtypes = _DTYPES[name]
            return {
                k: np.ascontiguousarray(cols[k], dtype=dtypes[k]) for k in dtypes
            }

        offsets = self.controller_offsets
        if offsets is not None:
            offsets = np.ascontiguousarray(offsets, dtype=np.float32)
        return {
            "info": self.info,
            "length_fields": self._length_fields,
            "note_id_read": self._note_id_read,
            "wall_id_read": self._wall_id_read,
            "frames": table("frames", self.frames),
            "notes": table("notes", self.notes),
            "walls": table("walls", self.walls),
            "heights": table("heights", self.heights),
            "pauses": table("pauses", self.pauses),
            "controller_offsets": offsets,
            "user_data": None if self.user_data is None else bytes(self.user_data),
            "trailing": bytes(self.trailing or b""),
        }

    def to_bsor(self) -> bytes:
        """BSOR bytes written from the arrays as they are now.

        A replay read from BSOR and left unchanged gives back the same bytes; a value
        changed in any array or in ``info`` is written as changed. A note ID is written
        from ``note_id`` if that was changed, else from its parts (``scoring_type``,
        ``line``, ``layer``, ``color``, ``cut_direction``) if one of them was.
        """
        return _native.to_bsor(self._as_dict())

    def to_pandas(self) -> Dict[str, "Any"]:
        """A dict of pandas DataFrames: ``frames`` (time, fps and 21 pose columns named
        ``head_x``... ``right_qw``), ``notes``, ``walls``, ``heights``, ``pauses``.
        Needs pandas."""
        import pandas as pd

        return {k: pd.DataFrame(v) for k, v in self._tables().items()}

    def to_arrow(self) -> Dict[str, "Any"]:
        """A dict of pyarrow Tables (as :meth:`to_pandas`). Needs pyarrow."""
        import pyarrow as pa

        return {k: pa.table(v) for k, v in self._tables().items()}

    def _tables(self) -> Dict[str, Dict[str, np.ndarray]]:
        out = {}
        if self.frames is not None:
            f = {"time": self.frames["time"], "fps": self.frames["fps"]}
            poses = self.frames["poses"]
            for d, dev in enumerate(("head", "left", "right")):
                for a, axis in enumerate(("x", "y", "z", "qx", "qy", "qz", "qw")):
                    f[f"{dev}_{axis}"] = poses[:, d, a]
            out["frames"] = f
        for name in ("notes", "walls", "heights", "pauses"):
            out[name] = dict(getattr(self, name))
        return out


def _source(src: Source):
    if isinstance(src, (bytearray, memoryview)):
        return bytes(src)
    if isinstance(src, bytes):
        return src
    return os.fspath(src)


def load(src: Source) -> Replay:
    """Reads a BSOR, ``.bsors`` or XROR replay from a path or from bytes.

    Raises ReplayError (with ``.section`` and ``.offset``) for a file that cannot be read.
    """
    return Replay(_native.load(_source(src)))


def load_events(src: Source) -> Replay:
    """Reads a replay's info and events without decoding any pose: a ``.bsors`` reads only
    its event chunks, a BSOR steps over its frame section. ``frames`` is None."""
    return Replay(_native.load_events(_source(src)))


def _files(src) -> Iterator[Tuple[str, Any]]:
    """(name, path or bytes) for each replay in a list, a directory or a tar archive."""
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if os.path.isdir(path):
            for root, _, names in sorted(os.walk(path)):
                for n in sorted(names):
                    if n.lower().endswith(REPLAY_SUFFIXES):
                        p = os.path.join(root, n)
                        yield p, p
            return
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                for m in tar:
                    if m.isfile() and m.name.lower().endswith(REPLAY_SUFFIXES):
                        f = tar.extractfile(m)
                        if f is not None:
                            yield m.name, f.read()
            return
        yield path, path
        return
    for p in src:
        yield os.fspath(p) if not isinstance(p, bytes) else "<bytes>", p


def load_many(
    src: Union[Source, Iterable[Source]],
    threads: Optional[int] = None,
    events_only: bool = False,
    batch: Optional[int] = None,
) -> Iterator[Tuple[str, Union[Replay, ReplayError]]]:
    """Loads many replays in parallel (Rust threads, GIL released), yielding
    ``(name, Replay or ReplayError)`` in order: a bad file is its own error, never the
    batch's end.

    ``src`` is a list of paths, a directory (its ``.bsor``, ``.bsors`` and ``.xror`` files,
    recursively, sorted) or a tar archive (its members with those endings, possibly
    compressed). ``threads``: how many (default: every core). Files are read ``batch`` at a
    time (default 8 per thread), so memory holds one batch beyond what the caller keeps.
    """
    threads = threads or os.cpu_count() or 1
    batch = batch or 8 * threads
    pending = []

    def flush():
        paths = [s for _, s in pending if not isinstance(s, bytes)]
        results = iter(_native.load_many(paths, threads, events_only)) if paths else iter(())
        out = []
        for name, s in pending:
            if isinstance(s, bytes):
                try:
                    d = (_native.load_events if events_only else _native.load)(s)
                    out.append((name, Replay(d)))
                except ReplayError as e:
                    out.append((name, e))
            else:
                r = next(results)
                out.append((name, r if isinstance(r, ReplayError) else Replay(r)))
        pending.clear()
        return out

    for item in _files(src):
        pending.append(item)
        if len(pending) >= batch:
            yield from flush()
    if pending:
        yield from flush()


def reuse_freed_memory(trim_threshold: int = 256 << 20) -> bool:
    """Makes this process's C allocator (glibc's malloc) keep the memory that freed arrays
    give back, for the next loads, rather than returning it to the system. Returns whether
    it could (False where the C library is not glibc). Process-wide, for the rest of the
    process: an opt-in for batch jobs that load many replays.

    Why: a replay's arrays are a few large allocations (``poses`` alone is 84 bytes a
    frame, 2.3 MB for a 5-minute play). glibc maps each of them fresh from the system and
    unmaps it when freed, or trims its heap once more than a few MB are free, so the next
    load touches new pages, and the system's page faults cost more than the parsing: the
    corpus's four BSORs loaded and kept take 9 to 11 ms with glibc's defaults, 2.0 ms
    after this call (docs/benchmarks.md, "The Python package"). With it, allocations up to
    32 MB come from malloc's heap and up to ``trim_threshold`` bytes of free heap are kept:
    the process's resident size stays at its high-water mark instead of falling back
    between batches. Setting the environment variables ``MALLOC_MMAP_THRESHOLD_=33554432``
    and ``MALLOC_TRIM_THRESHOLD_=268435456`` before Python starts does the same.
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # glibc's <malloc.h>: M_TRIM_THRESHOLD is -1, M_MMAP_THRESHOLD -3; mallopt returns 1
    # on success. 32 MB is glibc's own ceiling for the threshold it adjusts (64-bit).
    ok = mallopt(-3, 32 << 20) == 1
    return mallopt(-1, int(trim_threshold)) == 1 and ok


def encode(replay: Replay, profile: str = "lossless", archive: bool = True) -> bytes:
    """``.bsors`` bytes written from the replay's arrays.

    ``profile``: ``lossless`` (every bit kept), ``fine`` (positions within 0.1 mm,
    rotations within 0.02°) or ``compact`` (1 mm, 0.2°). ``archive``: a keyframe every
    10 s (what a leaderboard stores); False: every second with a chunk every 100 ms (what a
    live viewer needs).
    """
    return _native.encode(replay._as_dict(), profile, archive)


def to_parquet(src, out: str, threads: Optional[int] = None) -> Dict[str, int]:
    """Writes the frames and notes of many replays (as :func:`load_many` takes them) to
    two Parquet files, ``{out}/frames.parquet`` and ``{out}/notes.parquet``, each row with
    a ``replay`` column (the file's name). Files that cannot be read are skipped and
    counted. Needs pyarrow. Returns the counts of replays, frames, notes and errors.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    writers: Dict[str, Any] = {}
    counts = {"replays": 0, "frames": 0, "notes": 0, "errors": 0}
    try:
        for name, r in load_many(src, threads=threads):
            if isinstance(r, ReplayError):
                counts["errors"] += 1
                continue
            counts["replays"] += 1
            tables = r._tables()
            for key in ("frames", "notes"):
                cols = tables[key]
                n = len(next(iter(cols.values())))
                counts[key] += n
                t = pa.table({"replay": pa.array([name] * n, pa.string()), **cols})
                if key not in writers:
                    writers[key] = pq.ParquetWriter(os.path.join(out, f"{key}.parquet"), t.schema)
                writers[key].write_table(t)
    finally:
        for w in writers.values():
            w.close()
    return counts
