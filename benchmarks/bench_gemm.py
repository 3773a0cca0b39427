"""Engine speed: simulated GEMMs/s and tiles (blocks, folds)/s, peak RSS.

Run: ``python benchmarks/bench_gemm.py [--scalesim-python /tmp/ss/bin/python]``. Targets:
the (8192, 8192, 28672) BF16 GEMM on a 128×128 array in < 0.5 s after JIT warm-up (issue 3);
1000 mixed GEMMs in < 3 s of CPU in one process (issue 27; issue 14's was < 5 s, from 10 s);
RSS < 500 MB. Times
are CPU seconds of this process (and of its workers for ``simulate_many``), so other load on
the machine does not count; the persistent result cache is off (every GEMM is simulated).
"""

from __future__ import annotations

import dataclasses
import os
import random
import resource
import time

from diptych.arch import load_chip
from diptych.sim.gemm import gemm_stats
from diptych.workloads.ops import Gemm


def mixed_gemms() -> list[Gemm]:
    """The 1000 mixed GEMMs the issue-27 target times (seeded: the same every run; also
    replayed by bench_dram_fills.py)."""
    rng = random.Random(0)
    dims = [1, 8, 64, 128, 512, 1024, 2048, 4096, 8192]
    return [Gemm(name=f"g{i}", m=rng.choice(dims), k=rng.choice(dims[2:]) + rng.randrange(0, 64),
                 n=rng.choice(dims[2:]) + rng.randrange(0, 64)) for i in range(1000)]


def chip_128():
    c = load_chip("tpu-v4")  # 128x128 arrays, 2 cores x 4 arrays, HBM2 1.2 TB/s
    return c


def scalesim_speed(python: str) -> None:
    """Time SCALE-Sim and diptych on the same small GEMMs (one 16x8 array, all dataflows).

    Each GEMM is timed on its own on both sides (SCALE-Sim: one ``run_scale`` per GEMM in one
    subprocess, its start-up excluded; diptych: ``gemm_stats`` with the full mapper search,
    after one warm-up call of the same shape on the same chip, the result cache off), and the
    speed-up is the geometric mean of the per-GEMM ratios (issue 27's ">= 5,000x geo-mean";
    the ratio of the mean times is printed beside it). Then the ceiling (:func:`_engine_share`):
    the same searches with only their engine runs' own simulation counted, every line of the
    search's Python and every run's call cost left out: what no rewrite of the search around
    the same runs could beat."""
    import math
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import scalesim_crosscheck as X

    shapes = [(256, 256, 256), (64, 64, 64), (33, 65, 17), (16, 16, 16)]
    X.SHAPES[:] = shapes
    sec = X.measure_scalesim(python)["seconds"]
    c = load_chip("tpu-v4")
    arr = dataclasses.replace(c.core.array, rows=X.R, cols=X.C, dataflows=("os", "ws", "is"))
    one = dataclasses.replace(c, tensor_cores=1, area_budget_mm2=0.0,
                              core=dataclasses.replace(c.core, arrays=1, array=arr))
    ratios, ts_all, td_all = [], [], []
    for df in ("os", "ws", "is"):
        for i, (m, k, n) in enumerate(shapes):
            # the warm-up call (a shape one larger in K: nothing of the timed call memoised)
            gemm_stats(Gemm(name="w", m=m, k=k + 1, n=n), one, df)
            t = time.perf_counter()
            gemm_stats(Gemm(name="s", m=m, k=k, n=n), one, df)
            td = time.perf_counter() - t
            ratios.append(sec[df][i] / td)
            ts_all.append(sec[df][i])
            td_all.append(td)
    # one engine run of a fixed mapping (the whole GEMM as one block), as SCALE-Sim does
    from diptych.sim import mapper as MP
    from diptych.sim.array import array_rates
    from diptych.sim.gemm import run_engine
    rates = array_rates(one, "bf16")
    t = time.perf_counter()
    for df in ("os", "ws", "is"):
        for m, k, n in shapes:
            split = MP.Split(pb=1, pm=1, pn=1, batch=1, m=m, n=n, active=1, arrays_per_core=1)
            pb = MP.orient(Gemm(name="s", m=m, k=k, n=n), df, split, m)
            run_engine(one, pb, MP.Blocks(pb.m, pb.k, pb.n, 0), rates, split, True)
    tf = (time.perf_counter() - t) / (3 * len(shapes))
    call, ceil = _engine_share(one, shapes, sec)
    ts, td = sum(ts_all) / len(ts_all), sum(td_all) / len(td_all)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"SCALE-Sim v3: {ts:.3f} s per GEMM (mean; {min(ts_all):.3f}-{max(ts_all):.3f} s). "
          f"diptych, one fixed mapping with the DRAM model: {tf * 1e6:.0f} us per GEMM "
          f"({ts / tf:,.0f}x faster)")
    print(f"  with the full mapper search over splits, dataflow, blocks and loop orders: "
          f"{td * 1e3:.2f} ms per GEMM (mean; {min(td_all) * 1e3:.2f}-{max(td_all) * 1e3:.2f} ms): "
          f"{geo:,.0f}x faster, geometric mean of the {len(ratios)} per-GEMM ratios "
          f"({min(ratios):,.0f}-{max(ratios):,.0f}x; target >= 5,000x: "
          f"{'OK' if geo >= 5000 else 'MISSED'}); ratio of the means {ts / td:,.0f}x")
    print(f"  the ceiling: the searches' engine runs alone, less {call * 1e6:.1f} us per run (a "
          f"run cut off at its first cycle: the call and the engine's setup; no Python around "
          f"them, an upper bound): {ceil:,.0f}x geo-mean")


def _engine_share(chip, shapes, sec) -> tuple[float, float]:
    """(a run's call cost in seconds, the geo-mean ratio to SCALE-Sim's ``sec`` of the
    searches' engine time alone): each search of :func:`scalesim_speed` again with every
    engine run (``gemm._run_candidate``) timed; the call cost is the least mean of five
    batches of 400 calls of the first run of the 64³ OS search with a one-cycle cutoff (the
    engine stops before its first block)."""
    import math
    from diptych.sim import gemm as G

    orig = G._run_candidate
    acc = [0.0, 0]
    first = []

    def timed(*a):
        if not first:
            first.append(a)
        t = time.perf_counter()
        out = orig(*a)
        acc[0] += time.perf_counter() - t
        acc[1] += 1
        return out

    G._run_candidate = timed
    try:
        gemm_stats(Gemm(name="c", m=64, k=64, n=64), chip, "os")
        base, cs, local, _, _, dram, run = first[0]
        call = math.inf
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(400):
                orig(base, cs, local, 1, 0, dram, run)
            call = min(call, (time.perf_counter() - t) / 400)
        logs = []
        for df in ("os", "ws", "is"):
            for i, (m, k, n) in enumerate(shapes):
                acc[:] = [0.0, 0]
                gemm_stats(Gemm(name="s", m=m, k=k, n=n), chip, df)
                own = max(acc[0] - acc[1] * call, 1e-9)
                logs.append(math.log(sec[df][i] / own))
    finally:
        G._run_candidate = orig
    return call, math.exp(sum(logs) / len(logs))


def _cpu(children: bool = False) -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    t = r.ru_utime + r.ru_stime
    if children:
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        t += c.ru_utime + c.ru_stime
    return t


def main():
    import argparse
    from diptych.sim import cache
    cache.set_enabled(False)
    os.environ["DIPTYCH_NO_CACHE"] = "1"   # (workers too)
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalesim-python", default=None,
                    help="interpreter with scalesim installed, to time it on shared shapes")
    args = ap.parse_args()
    chip = chip_128()
    gemm_stats(Gemm(name="warm", m=256, k=256, n=256), chip)  # JIT warm-up (or cache load)
    print(f"load average {os.getloadavg()[0]:.1f}; CPU seconds")
    op = Gemm(name="big", m=8192, k=8192, n=28672)
    t = _cpu()
    st = gemm_stats(op, chip)
    dt = _cpu() - t
    print(f"8192x8192x28672 bf16 on {chip.name} ({chip.core.array.rows}x{chip.core.array.cols}): "
          f"{dt:.3f} s (target < 0.5 s), {st.mapping['blocks']} blocks, "
          f"{st.mapping['folds']} folds/array, {st.mapping['folds'] / max(dt, 1e-9):,.0f} folds/s, "
          f"util {st.utilization:.3f}")
    one = dataclasses.replace(chip, tensor_cores=1, core=dataclasses.replace(chip.core, arrays=1),
                              area_budget_mm2=0.0)
    t = _cpu()
    st1 = gemm_stats(op, one)
    dt1 = _cpu() - t
    print(f"  same on a single 128x128 array: {dt1:.3f} s, {st1.mapping['blocks']} blocks, "
          f"{st1.mapping['folds']} folds, {st1.mapping['folds'] / dt1:,.0f} folds/s")
    ops = mixed_gemms()
    t = _cpu()
    blocks = 0
    for o in ops:
        blocks += gemm_stats(o, chip).mapping["blocks"]
    dt = _cpu() - t
    print(f"1000 mixed GEMMs (uncached, one process): {dt:.2f} s (target < 3 s: "
          f"{'OK' if dt < 3 else 'MISSED'}) = {1000 / dt:,.0f} GEMMs/s, "
          f"{blocks / dt:,.0f} blocks/s (final mappings only)")
    from diptych.sim import simulate_many
    ops2 = [dataclasses.replace(o, k=o.k + 64) for o in ops]  # fresh shapes: nothing memoised
    t, w = _cpu(children=True), time.perf_counter()
    simulate_many(ops2, chip, workers=os.cpu_count())
    dt2, wall2 = _cpu(children=True) - t, time.perf_counter() - w
    print(f"1000 mixed GEMMs via simulate_many on {os.cpu_count()} processes (uncached): "
          f"{dt2:.2f} s CPU in all, {wall2:.2f} s wall = {1000 / wall2:,.0f} GEMMs/s")
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"peak RSS {rss:.0f} MB (target < 500 MB)")
    python = args.scalesim_python
    if python is None:
        try:
            import scalesim  # noqa: F401
            import sys
            python = sys.executable
        except ImportError:
            print("scalesim not importable here (pass --scalesim-python): SCALE-Sim timing skipped")
    if python:
        scalesim_speed(python)


if __name__ == "__main__":
    main()
