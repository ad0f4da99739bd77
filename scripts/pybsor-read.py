#!/usr/bin/env python3
"""Reads a BSOR with py-bsor (PyPI `py-bsor`, module `bsor`), an independent reader, and
prints what it read as JSON: the section counts and the user-data entries (key, value
length). Used by tests/it/signed_bsor.rs to show that a signed BSOR stays readable by other
readers. Exits 3 when the package cannot be imported (the test then skips)."""
import json
import sys

try:
    from bsor.Bsor import make_bsor
except ImportError:
    sys.exit(3)

with open(sys.argv[1], "rb") as f:
    m = make_bsor(f)
    rest = len(f.read())

print(json.dumps({
    "playerId": m.info.playerId,
    "frames": len(m.frames),
    "notes": len(m.notes),
    "walls": len(m.walls),
    "heights": len(m.heights),
    "pauses": len(m.pauses),
    "offsets": bool(m.controller_offsets),
    "userData": [[u.key, len(u.bytes)] for u in m.user_data],
    "unread": rest,
}))
