"""Benchmark: the 1000-point sweep (examples/sweep-1000.toml) on a local process pool.

Prints the number of points, wall time, points per second, the distribution of per-point
evaluation time and the failures. Target (issue 6): 1000 points in under 10 minutes on 2 cores.

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
    args = ap.parse_args()

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
    print(f"wall time       {wall:.1f} s  ({n / wall:.2f} points/s; target 1000 in 600 s)")
    print(f"CPU time        {cpu:.1f} s (this process and its workers; "
          f"load average now {os.getloadavg()[0]:.1f})")
    if evals:
        print(f"eval per point  median {statistics.median(evals) * 1e3:.1f} ms, "
              f"p90 {evals[int(0.9 * (len(evals) - 1))] * 1e3:.1f} ms, "
              f"max {evals[-1] * 1e3:.1f} ms, sum {sum(evals):.1f} s")
    print(f"failed points   {len(errors)}")
    for e in sorted(set(errors))[:5]:
        print(f"  {errors.count(e)} x {e}")
    print(f"projected 1000  {1000 * wall / n:.0f} s wall; {1000 * cpu / n / args.jobs:.0f} s on "
          f"{args.jobs} otherwise idle cores")


if __name__ == "__main__":
    main()
