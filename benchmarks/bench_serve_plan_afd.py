"""The attention:FFN ratio search's speed and its answer (issue 24): ``diptych serve-plan-afd``
for qwen3-30b-a3b with h100 and infer-2026 in both roles, every plan of up to 6 chips (48
plans: 8 pool pairs x 1, 2, 4 micro-batches x 2 assignments), printed with its CPU time and
the best plan per assignment.

    python benchmarks/bench_serve_plan_afd.py [--chips N] [--qps Q] [--requests R]
                                              [--slo-tpot S] [--model M]

The attention pools' step-time grids are the user's cache's when warm (docs/serving.md); point
DIPTYCH_CACHE_DIR at an empty directory for the cold figure. Numbers go in the issue's note
and docs/serving.md, not in a timed test.
"""

from __future__ import annotations

import argparse
import time

from diptych.sim.serving.afd_search import AfdSearchSpace, afd_search
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import Load, parse_length


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chips", type=int, default=6)
    ap.add_argument("--qps", type=float, default=24.0)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--slo-tpot", type=float, default=0.01)
    ap.add_argument("--model", default="qwen3-30b-a3b")
    a = ap.parse_args(argv)
    load = Load(qps=a.qps, requests=a.requests, prompt=parse_length("512", "prompt"),
                gen=parse_length("64", "gen"))
    space = AfdSearchSpace(("h100", "infer-2026"), a.chips)
    t = time.process_time()
    res = afd_search(a.model, space, load, ServeConfig(slo_tpot_s=a.slo_tpot),
                     require_slo=False)
    cpu = time.process_time() - t
    print(f"{res['model']}: {res['candidates']} AFD plans, {res['meeting_slo']} meet the SLOs, "
          f"{cpu:.1f} s CPU ({cpu / res['candidates']:.2f} s per plan)")
    for name, d in res["per_assignment"].items():
        b = d["best"]
        if b is None:
            print(f"  {name}: none meets the SLOs ({d['binding']})")
            continue
        print(f"  {name}: {b['ratio']}, k = {b['microbatches']}: "
              f"{b['usd_per_mtok']:.4f} $/Mtok, {b['goodput_rps_per_chip']:.3g} req/s per "
              f"chip, {b['tokens_per_j']:.3g} tokens/J, p99 TPOT "
              f"{b['tpot_p99_s'] * 1e3:.1f} ms ({d['binding']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
