"""Benchmark: the 1000-point sweep (examples/sweep-1000.toml) on a local process pool.

Prints the number of points, wall and CPU time, points per second, the distribution of
per-point evaluation time and the failures. Target (issue 27): the 1000 points in under 120 CPU
seconds in total (this process and its workers; ~480 s when the issue was filed); the wall time
projected on otherwise idle cores (CPU / jobs) is printed too, as an extra line (issue 14's
reading: 1000 points in under 2 minutes on 2 cores). The persistent result cache is off unless
``--with-cache`` (then it starts empty).

    python benchmarks/bench_sweep.py [--spec FILE] [--jobs N] [--limit N] [--evaluator MOD:FN]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from diptych.tools.dse.spec import load_spec
from diptych.tools.dse.sweep import read_results, run_sweep

ROOT = Path(__file__).resolve().parents[1]

#: Earlier measurements of the default run (docs/engine.md, Speed), printed for comparison:
#: CPU seconds of all processes and the projection on 2 idle cores, on the shared 2-core
#: development machine, the two commits one after the other at load average ~3.
REFERENCE = (("7e4bb80, before the second speed pass", "263", "132"),
             ("w4-speed2 (outline search, hashing, mapper layout)", "230", "115"))


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children (the workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "examples" / "sweep-1000.toml"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None,
                    help="random specs only: fewer chip samples (points = samples x workloads)")
    ap.add_argument("--evaluator", default=None, help="MODULE:FUNCTION (default run_workload)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--with-cache", action="store_true",
                    help="use the persistent result cache (an empty one in a temporary dir)")
    args = ap.parse_args()
    cache_tmp = tempfile.TemporaryDirectory()
    if args.with_cache:
        os.environ["DIPTYCH_CACHE_DIR"] = cache_tmp.name
        os.environ.pop("DIPTYCH_NO_CACHE", None)
    else:
        os.environ["DIPTYCH_NO_CACHE"] = "1"    # inherited by the workers

    spec = load_spec(args.spec)
    if args.limit:
        spec = replace(spec, samples=args.limit)
    n = len(spec.points())
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = _cpu_s()
        t0 = time.perf_counter()
        summary = run_sweep(spec, Path(tmp) / "out", evaluate=args.evaluator, jobs=args.jobs,
                            progress=not args.no_progress)
        wall = time.perf_counter() - t0
        cpu = _cpu_s() - cpu0
        rows = read_results(Path(tmp) / "out").to_pylist()
    evals = sorted(r["eval_s"] for r in rows if r.get("eval_s") is not None)
    errors = [r["error"] for r in rows if r.get("error")]
    print(f"spec            {args.spec}")
    print(f"points          {n} ({summary.ran} run, {summary.over_budget} over budget)")
    print(f"jobs            {args.jobs}")
    print(f"result cache    {'on (empty at start)' if args.with_cache else 'off'}")
    print(f"wall time       {wall:.1f} s  ({n / wall:.2f} points/s)")
    print(f"CPU time        {cpu:.1f} s (this process and its workers; "
          f"load average now {os.getloadavg()[0]:.1f})")
    if evals:
        print(f"eval per point  median {statistics.median(evals) * 1e3:.1f} ms, "
              f"p90 {evals[int(0.9 * (len(evals) - 1))] * 1e3:.1f} ms, "
              f"max {evals[-1] * 1e3:.1f} ms, sum {sum(evals):.1f} s")
    print(f"failed points   {len(errors)}")
    for e in sorted(set(errors))[:5]:
        print(f"  {errors.count(e)} x {e}")
    total = 1000 * cpu / n
    print(f"CPU for 1000    {total:.0f} s CPU in total (target < 120 s CPU in total, issue 27: "
          f"{'OK' if total < 120 else 'MISSED'})")
    print(f"projected 1000  {1000 * wall / n:.0f} s wall; {total / args.jobs:.0f} s on "
          f"{args.jobs} otherwise idle cores (CPU / jobs)")
    print(f"peak RSS        {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB"
          f" per worker (target < 500 MB)")
    if args.spec == ap.get_default("spec") and not args.limit and args.jobs == 2:
        for what, cpu_s, proj_s in REFERENCE:
            print(f"earlier         {cpu_s} s CPU, {proj_s} s projected: {what}")


if __name__ == "__main__":
    main()
