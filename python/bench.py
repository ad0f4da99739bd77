#!/usr/bin/env python3
"""Benchmark of the Python package on the corpus (not a test): load of BSOR into arrays
against py-bsor 1.3.6, load of lossless .bsors against the Rust decoder alone,
load_events, load_many with 1 and 2 threads, and peak memory per replay against
its arrays' size. Figures go to docs/benchmarks.md ("The Python package").

    python3 python/bench.py [CORPUS]
"""

import argparse
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

# The installed package, not its sources beside this script (which lack the extension).
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
import bsor_stream  # noqa: E402


def best(f, repeat=7):
    """Best wall time of `repeat` runs (the least disturbed by the other core's work)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def arrays_size(r):
    n = 0
    for table in (r.frames or {}, r.notes, r.walls, r.heights, r.pauses):
        n += sum(a.nbytes for a in table.values())
    return n


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", default=os.environ.get("BSOR_CORPUS") or here.parent.parent / "shared" / "corpus")
    args = ap.parse_args()
    corpus = pathlib.Path(args.corpus)
    files = sorted(corpus.glob("*.bsor"))
    if not files:
        sys.exit(f"no .bsor files in {corpus}")
    datas = [f.read_bytes() for f in files]
    total = sum(len(d) for d in datas)
    print(f"corpus: {len(files)} BSOR files, {total / 1e6:.2f} MB")

    # 1. BSOR bytes to arrays, one core.
    t = best(lambda: [bsor_stream.load(d) for d in datas])
    print(f"load BSOR -> arrays: {t * 1e3:.2f} ms, {total / t / 1e9:.2f} GB/s")
    # Per file, best of 15 (less disturbed by other work on the machine), summed.
    t1 = sum(best(lambda d=d: bsor_stream.load(d), repeat=15) for d in datas)
    print(f"load BSOR -> arrays, per file: {t1 * 1e3:.2f} ms, {total / t1 / 1e9:.2f} GB/s")
    tf = sum(best(lambda f=f: bsor_stream.load(f), repeat=15) for f in files)
    print(f"load BSOR from paths, per file: {tf * 1e3:.2f} ms, {total / tf / 1e9:.2f} GB/s")
    te = best(lambda: [bsor_stream.load_events(d) for d in datas])
    print(f"load_events BSOR: {te * 1e3:.2f} ms, {total / te / 1e9:.2f} GB/s")

    try:
        from bsor.Bsor import make_bsor

        tp = best(lambda: [make_bsor(io.BytesIO(d)) for d in datas], repeat=2)
        print(f"py-bsor 1.3.6 make_bsor: {tp * 1e3:.0f} ms, {total / tp / 1e6:.2f} MB/s; "
              f"bsor_stream is {tp / t1:.0f}x faster per file ({tp / t:.0f}x all at once)")
    except ImportError:
        print("py-bsor is not installed: no comparison")

    # 2. Lossless .bsors to arrays, against the Rust decoder alone.
    streams = [bsor_stream.encode(bsor_stream.load(d), "lossless") for d in datas]
    stotal = sum(len(s) for s in streams)
    ts = sum(best(lambda s=s: bsor_stream.load(s), repeat=15) for s in streams)
    print(f"load lossless .bsors -> arrays: {ts * 1e3:.2f} ms ({stotal / 1e6:.2f} MB of stream)")
    tse = best(lambda: [bsor_stream.load_events(s) for s in streams])
    print(f"load_events lossless .bsors: {tse * 1e3:.2f} ms")
    for prof in ("fine", "compact"):
        ss = [bsor_stream.encode(bsor_stream.load(d), prof) for d in datas]
        tp_ = best(lambda: [bsor_stream.load(s) for s in ss])
        print(f"load {prof} .bsors -> arrays: {tp_ * 1e3:.2f} ms")
    # The Rust stream decoder alone, in this process (bsor_stream._native: decode into the
    # core's Replay, GIL released, no arrays).
    tr = sum(best(lambda s=s: bsor_stream._native._decode_stream_only(s), repeat=15) for s in streams)
    print(f"Rust decoder alone on the same lossless .bsors: {tr * 1e3:.2f} ms; "
          f"load takes {(ts / tr - 1) * 100:+.0f}% of its time")

    # 3. load_many over many copies of the corpus, 1 and 2 threads.
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        copies = 8
        for c in range(copies):
            for f, d in zip(files, datas):
                (tmp / f"{c}-{f.name}").write_bytes(d)
        n = copies * len(files)
        for threads in (1, 2):
            def run():
                for _, r in bsor_stream.load_many(tmp, threads=threads):
                    assert not isinstance(r, bsor_stream.ReplayError)
            tm = best(run, repeat=3)
            print(f"load_many {n} files ({copies * total / 1e6:.1f} MB), {threads} thread(s): "
                  f"{tm * 1e3:.1f} ms, {copies * total / tm / 1e9:.2f} GB/s")
    finally:
        shutil.rmtree(tmp)

    # 4. Peak memory of one load from a path against its arrays' size: the growth of the
    # process's peak resident size (VmHWM, reset just before) in a fresh process.
    biggest = max(files, key=lambda f: f.stat().st_size)
    code = (
        "import sys, bsor_stream\n"
        "def kb(k):\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith(k): return int(line.split()[1]) * 1024\n"
        "open('/proc/self/clear_refs', 'w').write('5')  # resets the peak (VmHWM) to now\n"
        "before = kb('VmRSS')\n"
        "r = bsor_stream.load(sys.argv[1])\n"
        "peak = kb('VmHWM')\n"
        "n = sum(a.nbytes for t in (r.frames, r.notes, r.walls, r.heights, r.pauses) for a in t.values())\n"
        "print(peak - before, n)\n"
    )
    # Warm the page cache and the import, then measure.
    run = [sys.executable, "-c", code, str(biggest)]
    subprocess.run(run, capture_output=True, cwd="/")
    out = subprocess.run(run, capture_output=True, text=True, check=True, cwd="/")
    grown, arrays = map(int, out.stdout.split())
    print(f"peak RSS growth loading {biggest.name} ({biggest.stat().st_size / 1e6:.2f} MB): "
          f"{grown / 1e6:.2f} MB for {arrays / 1e6:.2f} MB of arrays ({grown / arrays:.2f}x)")


if __name__ == "__main__":
    main()
