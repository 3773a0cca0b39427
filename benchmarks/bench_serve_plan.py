"""The deployment search's speed and its answer (issue 24 item 7): ``diptych serve-plan`` for
llama-3-70b on h100 and on infer-2026, every plan of up to 6 chips (324 plans), printed with
its CPU time against the target (< 300 s CPU for >= 200 plans) and the best plan per design.

    python benchmarks/bench_serve_plan.py [--chips N] [--qps Q] [--requests R] [-j J]
                                          [--exhaustive] [--model M] [--designs A,B]
                                          [--no-disagg] [--no-ep]

A mixture-of-experts model (``--model qwen3-30b-a3b``) searches expert-parallel layouts too
(each EP degree dividing the experts, DP and TP attention); the line states how many plans
are expert-parallel.

CPU time is this process's and its workers' (``-j``: a local pool of J processes, as
``diptych serve-plan -j``). By default plans whose chips' cost alone prices them above their
design's best are skipped (sim/serving/search_prune.py); ``--exhaustive`` runs all of them.
The step-time grids are the user's cache's when warm (docs/serving.md); point
DIPTYCH_CACHE_DIR at an empty directory for the cold figure, run it twice for the warm one.
Numbers go in the issue's note, not in a timed test.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import SearchSpace, search
from diptych.tools.dse.pool_map import pool_mapper

TARGET_S = 300.0
TARGET_PLANS = 200


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chips", type=int, default=6)
    ap.add_argument("--qps", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--model", default="llama-3-70b")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--exhaustive", action="store_true")
    ap.add_argument("--designs", default="h100,infer-2026")
    ap.add_argument("--no-disagg", action="store_true")
    ap.add_argument("--no-ep", action="store_true")
    a = ap.parse_args(argv)
    designs = tuple(a.designs.split(","))
    load = Load(qps=a.qps, prompt=parse_length("lognormal:mean=1024,sigma=0.5", "prompt"),
                gen=parse_length("lognormal:mean=256,sigma=0.5", "gen"), requests=a.requests)
    space = SearchSpace(designs=designs, chips=a.chips, disaggregated=not a.no_disagg,
                        ep=() if a.no_ep else None)
    def children_cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    t0, c0, w0 = time.process_time(), children_cpu(), time.perf_counter()
    with pool_mapper(a.jobs, None, 10_000) as mapper:
        res = search(a.model, space, load, ServeConfig(), mapper=mapper,
                     prune=not a.exhaustive,
                     progress=lambda i, n, r: print(f"\r{i}/{n}", end="", file=sys.stderr))
    # the workers have exited (the pool is closed): their CPU time is in RUSAGE_CHILDREN
    cpu = time.process_time() - t0 + children_cpu() - c0
    wall = time.perf_counter() - w0
    print(file=sys.stderr)
    n = res["candidates"]
    ok = "meets" if cpu < TARGET_S and n >= TARGET_PLANS else "MISSES"
    n_ep = sum(1 for r in res["evaluated"] if any(p["ep"] > 1 for p in r["pools"]))
    print(f"{a.model}, designs {' + '.join(designs)}, up to {a.chips} chips"
          f"{' (colocated only)' if a.no_disagg else ''}, {a.qps:g} req/s, "
          f"{a.requests} requests, {a.jobs} process(es): {n} plans, {n_ep} expert-parallel "
          f"({res['run']} run, "
          f"{res['pruned']} skipped by their price floor) in {cpu:.0f} s CPU ({wall:.0f} s "
          f"wall); target >= {TARGET_PLANS} plans in < {TARGET_S:.0f} s CPU: {ok}; "
          f"{res['meeting_slo']} meet the SLOs")
    print("| design | best plan | chips | $/Mtok | tokens/J | goodput/chip | TTFT p99 | "
          "TPOT p99 | binding |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, d in res["per_design"].items():
        r = d["best"]
        if r is None:
            print(f"| {name} | none meets the SLOs | | | | | | | {d['binding']} |")
            continue
        usd = f"{r['usd_per_mtok']:.3f}" if r["usd_per_mtok"] is not None else "-"
        print(f"| {name} | {r['plan']} | {r['chips']} | {usd} | {r['tokens_per_j']:.3g} | "
              f"{r['goodput_rps_per_chip']:.3g} | {r['ttft_p99_s'] * 1e3:.0f} ms | "
              f"{r['tpot_p99_s'] * 1e3:.1f} ms | {d['binding']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
