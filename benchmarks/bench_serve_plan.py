"""The deployment search's speed and its answer (issue 24 item 7): ``diptych serve-plan`` for
llama-3-70b on h100 and on infer-2026, every plan of up to 6 chips (324 plans), printed with
its CPU time against the target (< 300 s CPU for >= 200 plans) and the best plan per design.

    python benchmarks/bench_serve_plan.py [--chips N] [--qps Q] [--requests R] [-j J]
                                          [--exhaustive] [--model M] [--designs A,B]
                                          [--no-disagg] [--no-ep] [--max-batched-tokens L]
                                          [--json PATH] [--profile PATH]
    python benchmarks/bench_serve_plan.py --preset 70b-8

``--preset 70b-8`` is issue 24 item 7's measurement as docs/serving.md "Deployment search"
states it: llama-3-70b on h100 and infer-2026, up to 8 chips, colocated and disaggregated,
batch-token limits (= prefill chunk sizes) 2048, 4096 and 8192, prompts chunked or whole
(948 plans). ``--json PATH`` writes the search's result (every row); ``--profile PATH`` dumps
cProfile statistics of the search (this process only; use it with ``-j 1``).

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
import cProfile
import json
import os
import resource
import sys
import time

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import SearchSpace, search
from diptych.tools.dse.pool_map import pool_mapper

TARGET_S = 300.0
TARGET_PLANS = 200
#: named measurements: the arguments each stands for
PRESETS = {"70b-8": ["--chips", "8", "--max-batched-tokens", "2048,4096,8192"]}


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
    ap.add_argument("--max-batched-tokens", default="2048,8192",
                    help="batch-token limits (prefill chunk sizes) to try, comma-separated")
    ap.add_argument("--top", type=int, default=10, help="Pareto-front rows to print")
    ap.add_argument("--json", default=None, help="write the search's result here")
    ap.add_argument("--profile", default=None, help="write cProfile statistics here")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="a named measurement (module docstring); later flags override it")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--preset" in argv:
        i = argv.index("--preset")
        if i + 1 < len(argv) and argv[i + 1] in PRESETS:
            argv = PRESETS[argv[i + 1]] + argv
    a = ap.parse_args(argv)
    designs = tuple(a.designs.split(","))
    load = Load(qps=a.qps, prompt=parse_length("lognormal:mean=1024,sigma=0.5", "prompt"),
                gen=parse_length("lognormal:mean=256,sigma=0.5", "gen"), requests=a.requests)
    mbt = tuple(int(x) for x in a.max_batched_tokens.split(","))
    space = SearchSpace(designs=designs, chips=a.chips, disaggregated=not a.no_disagg,
                        ep=() if a.no_ep else None, max_batched_tokens=mbt)
    def children_cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    t0, c0, w0 = time.process_time(), children_cpu(), time.perf_counter()
    prof = cProfile.Profile() if a.profile else None
    with pool_mapper(a.jobs, None, 10_000) as mapper:
        if prof is not None:
            prof.enable()
        res = search(a.model, space, load, ServeConfig(), mapper=mapper,
                     prune=not a.exhaustive,
                     progress=lambda i, n, r: print(f"\r{i}/{n}", end="", file=sys.stderr))
        if prof is not None:
            prof.disable()
            prof.dump_stats(a.profile)
    # the workers have exited (the pool is closed): their CPU time is in RUSAGE_CHILDREN
    cpu = time.process_time() - t0 + children_cpu() - c0
    wall = time.perf_counter() - w0
    print(file=sys.stderr)
    n = res["candidates"]
    ok = "meets" if cpu < TARGET_S and n >= TARGET_PLANS else "MISSES"
    n_ep = sum(1 for r in res["evaluated"] if any(p["ep"] > 1 for p in r["pools"]))
    n_err = sum(1 for r in res["evaluated"] if r.get("error"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    print(f"{a.model}, designs {' + '.join(designs)}, up to {a.chips} chips"
          f"{' (colocated only)' if a.no_disagg else ''}, {a.qps:g} req/s, "
          f"{a.requests} requests, {a.jobs} process(es): {n} plans, {n_ep} expert-parallel "
          f"({res['run']} run, "
          f"{res['pruned']} skipped by their price floor, {n_err} of those run refused) in "
          f"{cpu:.0f} s CPU ({wall:.0f} s wall, load average {os.getloadavg()[0]:.1f}); "
          f"target >= {TARGET_PLANS} plans in < {TARGET_S:.0f} s CPU: {ok}; "
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
    print(f"Pareto front ($/Mtok, tokens/J, goodput per chip), {len(res['pareto'])} plans:")
    print("| plan | chips | $/Mtok | tokens/J | goodput/chip | TTFT p99 | TPOT p99 |")
    print("|---|---|---|---|---|---|---|")
    for r in res["pareto"][:a.top]:
        usd = f"{r['usd_per_mtok']:.3f}" if r["usd_per_mtok"] is not None else "-"
        print(f"| {r['plan']} | {r['chips']} | {usd} | {r['tokens_per_j']:.3g} | "
              f"{r['goodput_rps_per_chip']:.3g} | {r['ttft_p99_s'] * 1e3:.0f} ms | "
              f"{r['tpot_p99_s'] * 1e3:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
