"""Benchmark for `diptych plan` (issue 11, item 7): prints numbers, asserts nothing.

``diptych plan --model llama-3.1-405b --chip h100 --cluster dgx-h100 --chips 16384 --batch 2048
--seq 8192``: the library call the command makes (:func:`diptych.sim.cluster.search.
search_plans`), in a fresh process with Numba's cache warm (a tiny simulation first loads the
compiled kernels), so every per-layer simulation is really run. Target: >= 1,000 candidate
plans in < 60 s. Also prints the time of each pass and the best plans. The roofline screen
sums; the refined plans' layers are each layer kind's scheduled program (``--execution
schedule``, the default, as ``diptych plan``) or summed (``--execution sum``).

Run: ``python benchmarks/bench_plan.py [--refine N] [--chips N] [--execution sum]``.
"""

from __future__ import annotations

import argparse
import time

TARGET_S = 60.0
TARGET_PLANS = 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-405b")
    ap.add_argument("--chip", default="h100")
    ap.add_argument("--cluster", default="dgx-h100")
    ap.add_argument("--chips", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--refine", type=int, default=8)
    ap.add_argument("--execution", choices=("schedule", "sum"), default="schedule")
    args = ap.parse_args()

    from diptych.arch import load_chip
    from diptych.sim import simulate_gemm
    from diptych.sim.cluster.search import search_plans
    from diptych.sim.run import Scenario

    t0 = time.perf_counter()
    simulate_gemm(64, 64, 64, load_chip(args.chip))            # load the JIT cache
    warm = time.perf_counter() - t0
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(done: int, total: int, stage: str) -> None:
        if done == total:
            marks[stage] = time.perf_counter() - t0

    res = search_plans(args.model, args.chip, args.cluster,
                       Scenario.of(phase="train", chips=args.chips, batch=args.batch, seq=args.seq,
                                   execution=args.execution),
                       refine=args.refine, progress=progress)
    total = time.perf_counter() - t0
    print(f"JIT warm-up (cache load): {warm:.1f} s")
    print(f"{args.model} on {args.chips} x {args.chip} ({args.cluster}), batch {args.batch} x "
          f"{args.seq}, refined layers: {args.execution}:")
    print(f"  candidate plans: {res.candidates} (target >= {TARGET_PLANS}); fit: {res.fitting}; "
          f"refined with the engine: {len(res.plans)}")
    print(f"  memory pass {marks.get('memory', 0):.1f} s, roofline screen "
          f"{marks.get('screen', 0) - marks.get('memory', 0):.1f} s, engine refine "
          f"{marks.get('refine', 0) - marks.get('screen', 0):.1f} s")
    print(f"  total {total:.1f} s (target < {TARGET_S:.0f} s warm): "
          f"{'OK' if total < TARGET_S and res.candidates >= TARGET_PLANS else 'MISSED'}")
    for r in res.plans[:5]:
        print(f"  {r.plan.describe():70s} {r.seconds:7.3f} s  MFU {100 * r.mfu:5.1f} %  "
              f"{r.memory_bytes_per_chip / 2**30:5.1f} GiB")


if __name__ == "__main__":
    main()
