#!/usr/bin/env python3
"""Benchmark of the Python package on the corpus (not a test): load of BSOR into arrays
against py-bsor 1.3.6, load of XROR against MetaGuard's `xror` library (when installed),
load of lossless .bsors against the Rust decoder alone, load_events, load_many with 1
and 2 threads, and peak memory per replay against its arrays' size. Figures go to
docs/benchmarks.md ("The Python package").

Every figure is the median of several runs (with the fastest and slowest beside it where
they matter), and every section prints the load average: on a shared machine a single run
can be off by 3x.

    python3 python/bench.py [CORPUS] [--runs N] [--copies N]
"""

import argparse
import io
import os
import pathlib
import resource
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

# The installed package, not its sources beside this script (which lack the extension).
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
import bsor_stream  # noqa: E402


def runs(f, repeat):
    """Wall times of `repeat` runs."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return times


def med(f, repeat=7):
    """Median wall time of `repeat` runs."""
    return statistics.median(runs(f, repeat))


def load_avg():
    return "load %.2f %.2f %.2f" % os.getloadavg()


def arrays_size(r):
    n = 0
    for table in (r.frames or {}, r.notes, r.walls, r.heights, r.pauses):
        n += sum(a.nbytes for a in table.values())
    return n


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", default=os.environ.get("BSOR_CORPUS") or here.parent.parent / "shared" / "corpus")
    ap.add_argument("--runs", type=int, default=7, help="runs whose median each figure is")
    ap.add_argument("--pybsor-runs", type=int, default=3, help="runs of py-bsor (slow) per median")
    ap.add_argument("--copies", type=int, default=32, help="copies of the corpus for load_many")
    ap.add_argument("--load-many-only", action="store_true", help="only the load_many section")
    ap.add_argument("--reuse-freed-memory", action="store_true",
                    help="call bsor_stream.reuse_freed_memory() first (glibc keeps freed arrays' memory)")
    args = ap.parse_args()
    if args.reuse_freed_memory:
        print(f"reuse_freed_memory: {bsor_stream.reuse_freed_memory()}")
    corpus = pathlib.Path(args.corpus)
    files = sorted(corpus.glob("*.bsor"))
    if not files:
        sys.exit(f"no .bsor files in {corpus}")
    datas = [f.read_bytes() for f in files]
    total = sum(len(d) for d in datas)
    print(f"corpus: {len(files)} BSOR files, {total / 1e6:.2f} MB")

    if args.load_many_only:
        load_many_section(args, files, datas, total)
        return

    # 1. BSOR bytes to arrays, one core: all files one after another (each run's arrays
    # kept until the run ends, so fresh memory), and each file alone (summed medians).
    print(f"[{load_avg()}]")
    all_runs = runs(lambda: [bsor_stream.load(d) for d in datas], args.runs)
    t = statistics.median(all_runs)
    print(f"load BSOR -> arrays, all files, median of {args.runs}: {t * 1e3:.2f} ms, {total / t / 1e9:.2f} GB/s "
          f"(runs {min(all_runs) * 1e3:.2f} to {max(all_runs) * 1e3:.2f} ms)")
    t1 = sum(med(lambda d=d: bsor_stream.load(d), repeat=15) for d in datas)
    print(f"load BSOR -> arrays, per file, medians of 15 summed: {t1 * 1e3:.2f} ms, {total / t1 / 1e9:.2f} GB/s")
    tf = sum(med(lambda f=f: bsor_stream.load(f), repeat=15) for f in files)
    print(f"load BSOR from paths, per file, medians of 15 summed: {tf * 1e3:.2f} ms, {total / tf / 1e9:.2f} GB/s")
    te = med(lambda: [bsor_stream.load_events(d) for d in datas])
    print(f"load_events BSOR, all files, median of 7: {te * 1e3:.2f} ms, {total / te / 1e9:.2f} GB/s")

    try:
        from bsor.Bsor import make_bsor

        print(f"[{load_avg()}]")
        # py-bsor all files at once and each file alone, medians of `--pybsor-runs`.
        pr = args.pybsor_runs
        tp_runs = runs(lambda: [make_bsor(io.BytesIO(d)) for d in datas], pr)
        tp = statistics.median(tp_runs)
        tp1 = sum(med(lambda d=d: make_bsor(io.BytesIO(d)), repeat=pr) for d in datas)
        print(f"py-bsor 1.3.6 make_bsor, all files, median of {pr}: {tp * 1e3:.0f} ms, {total / tp / 1e6:.2f} MB/s "
              f"(runs {min(tp_runs) * 1e3:.0f} to {max(tp_runs) * 1e3:.0f} ms); per file, medians summed: {tp1 * 1e3:.0f} ms")
        print(f"bsor_stream is {tp1 / t1:.0f}x faster per file, {tp / t:.0f}x all files at once "
              f"(medians; the least of the all-at-once ratios over runs, slowest load against fastest "
              f"py-bsor: {min(tp_runs) / max(all_runs):.0f}x) [{load_avg()}]")
    except ImportError:
        print("py-bsor is not installed: no comparison")

    xror_compare(corpus, args.runs)

    # 2. Lossless .bsors to arrays, against the Rust decoder alone.
    streams = [bsor_stream.encode(bsor_stream.load(d), "lossless") for d in datas]
    stotal = sum(len(s) for s in streams)
    ts = sum(med(lambda s=s: bsor_stream.load(s), repeat=15) for s in streams)
    print(f"load lossless .bsors -> arrays: {ts * 1e3:.2f} ms ({stotal / 1e6:.2f} MB of stream)")
    tse = med(lambda: [bsor_stream.load_events(s) for s in streams])
    print(f"load_events lossless .bsors: {tse * 1e3:.2f} ms")
    for prof in ("fine", "compact"):
        ss = [bsor_stream.encode(bsor_stream.load(d), prof) for d in datas]
        tp_ = med(lambda: [bsor_stream.load(s) for s in ss])
        print(f"load {prof} .bsors -> arrays: {tp_ * 1e3:.2f} ms")
    # The Rust stream decoder alone, in this process (bsor_stream._native: decode into the
    # core's Replay, GIL released, no arrays).
    tr = sum(med(lambda s=s: bsor_stream._native._decode_stream_only(s), repeat=15) for s in streams)
    print(f"Rust decoder alone on the same lossless .bsors: {tr * 1e3:.2f} ms; "
          f"load takes {(ts / tr - 1) * 100:+.0f}% of its time")

    load_many_section(args, files, datas, total)

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


def load_many_section(args, files, datas, total):
    """The load_many section (see below)."""
    # load_many over many copies of the corpus, 1 and 2 threads: the median wall time
    # of `--runs` runs, the process's CPU time (user + system, all threads) and its minor
    # page faults per file (memory touched for the first time) over the same runs. CPU
    # time above wall time is what the second thread added; CPU time that grows with the
    # threads is contention.
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        copies = args.copies
        for c in range(copies):
            for f, d in zip(files, datas):
                (tmp / f"{c}-{f.name}").write_bytes(d)
        n = copies * len(files)

        def run(threads):
            for _, r in bsor_stream.load_many(tmp, threads=threads):
                assert not isinstance(r, bsor_stream.ReplayError)

        # A CPU-bound job that scales perfectly where two cores are free (SHA-256 of 16 MB
        # blocks, GIL released), run beside: what the machine's other work left for a
        # second thread at that moment.
        block = os.urandom(16 << 20)

        def sha(threads):
            import concurrent.futures
            import hashlib
            with concurrent.futures.ThreadPoolExecutor(threads) as ex:
                list(ex.map(lambda _: hashlib.sha256(block).digest(), range(8)))

        run(1), run(2)  # the page cache and the allocator warm
        walls, cpus, systs, faults, shas = {1: [], 2: []}, {1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}, {1: 0, 2: 0}, {1: [], 2: []}
        # 1 and 2 threads alternately, so that both see the same load.
        for _ in range(args.runs):
            for threads in (1, 2):
                before = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                run(threads)
                walls[threads].append(time.perf_counter() - t0)
                after = resource.getrusage(resource.RUSAGE_SELF)
                cpus[threads] += after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                systs[threads] += after.ru_stime - before.ru_stime
                faults[threads] += after.ru_minflt - before.ru_minflt
                shas[threads] += runs(lambda: sha(threads), 1)
        for threads in (1, 2):
            ws = walls[threads]
            tm = statistics.median(ws)
            print(f"load_many {n} files ({copies * total / 1e6:.1f} MB), {threads} thread(s), median of {args.runs}: "
                  f"{tm * 1e3:.1f} ms, {copies * total / tm / 1e9:.2f} GB/s (runs {min(ws) * 1e3:.1f} to "
                  f"{max(ws) * 1e3:.1f}); CPU {cpus[threads] / args.runs * 1e3:.1f} ms a run "
                  f"({systs[threads] / args.runs * 1e3:.1f} system), "
                  f"{faults[threads] / args.runs / n:.0f} page faults a file [{load_avg()}]")
        m = {t: statistics.median(walls[t]) for t in (1, 2)}
        r = {t: statistics.median(shas[t]) for t in (1, 2)}
        print(f"load_many: 2 threads {m[1] / m[2]:.2f}x of 1 (medians); the CPU-bound reference beside it "
              f"{r[1] / r[2]:.2f}x; CPU time 2 threads / 1: {cpus[2] / cpus[1]:.2f}")
    finally:
        shutil.rmtree(tmp)


def xror_compare(corpus, repeat):
    """sample1.xror with bsor_stream and with MetaGuard's `xror` library (its XROR.unpack:
    BSON, then the PyPI `fpzip` binding, into Python lists), time and values. MetaGuard's
    library (setup.py's name `XROR`, 1.0.0) is not on PyPI (`pip install xror` finds no
    distribution): install it from a clone of its repository, MetaGuard/xror on GitHub
    (`pip install ./xror`), which pulls `fpzip` (1.2.5, fpzip 1.3.0 in C) and `pymongo`
    (for `bson`) from PyPI."""
    path = corpus / "sample1.xror"
    if not path.exists():
        print("no sample1.xror in the corpus: no XROR comparison")
        return
    data = path.read_bytes()
    print(f"[{load_avg()}]")
    tx = med(lambda: bsor_stream.load(data), repeat=15)
    print(f"load XROR sample1.xror ({len(data) / 1e6:.2f} MB) -> arrays, median of 15: {tx * 1e3:.2f} ms")
    try:
        from xror import XROR
    except ImportError:
        print("MetaGuard's xror is not installed: no comparison")
        return
    import numpy as np

    # Interleaved, so that all three see the same load: MetaGuard's whole read, the C
    # fpzip library alone (its PyPI binding) on every float array of the file, ours whole.
    import bson
    import fpzip

    doc = bson.decode(data)
    blobs = [doc["frames"]] + [e["floatData"] for e in doc["events"] if "floatData" in e]
    jobs = {
        "MetaGuard xror XROR.unpack": lambda: XROR.unpack(data),
        "C fpzip alone (PyPI fpzip binding), every float array": lambda: [fpzip.decompress(b) for b in blobs],
        "bsor_stream.load, the whole file": lambda: bsor_stream.load(data),
    }
    times = {k: [] for k in jobs}
    for _ in range(2 * repeat + 1):
        for k, f in jobs.items():
            times[k] += runs(f, 1)
    m = {k: statistics.median(v) for k, v in times.items()}
    for k in jobs:
        print(f"{k}, interleaved, median of {2 * repeat + 1}: {m[k] * 1e3:.1f} ms")
    mine = m["bsor_stream.load, the whole file"]
    print(f"bsor_stream is {m['MetaGuard xror XROR.unpack'] / mine:.1f}x faster than MetaGuard's; "
          f"its whole load takes {mine / m['C fpzip alone (PyPI fpzip binding), every float array']:.2f}x "
          f"the C library's fpzip decoding alone [{load_avg()}]")
    # Their values against ours: frames are rows of [time, head, left, right] (7 floats a
    # device), the FPS event one value a frame, note events rows starting with their time.
    ours = bsor_stream.load(data)
    x = XROR.unpack(data).data
    frames = np.asarray(x["frames"], dtype=np.float64)
    same = frames.shape == (len(ours.frames["time"]), 22)
    # Their floats are float32 values widened to Python floats: back to float32 exactly.
    f32 = frames.astype(np.float32)
    same = same and np.array_equal(f32[:, 0].view(np.uint32), ours.frames["time"].view(np.uint32))
    same = same and np.array_equal(
        f32[:, 1:].reshape(-1, 3, 7).view(np.uint32), ours.frames["poses"].view(np.uint32))
    events = {e["id"]: e for e in x["events"]}
    # The FPS event: rows of [time (0 in BOXRR-23's files), fps].
    fps = np.asarray(events["f"]["floatData"], dtype=np.float64)
    same_fps = np.array_equal(fps[:, -1].astype(np.int64), ours.frames["fps"].astype(np.int64))
    note_times = sorted(
        np.float32(row[0]).view(np.uint32) for k in ("gc", "bc", "m", "b") if "floatData" in events.get(k, {})
        for row in events[k]["floatData"])
    same_notes = note_times == sorted(ours.notes["event_time"].view(np.uint32))
    print(f"values: frames (time and 21 pose floats, {frames.shape[0]} rows) bit for bit: {same}; "
          f"fps: {same_fps}; note event times ({len(note_times)}): {same_notes}")


if __name__ == "__main__":
    main()
