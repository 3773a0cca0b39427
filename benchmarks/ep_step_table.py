"""The step table of docs/serving.md "Expert parallelism": steps of Qwen3-235B-A22B in FP8 on
eight H100s under EP 8 with DP attention, EP 8 with TP attention, and TP 8, timed by the
engine's step times (``execution="sum"``, :class:`~diptych.sim.serving.step_time.DirectStepTimer`;
a DP step is its busiest rank's, :class:`~diptych.sim.serving.ep.LockstepTimer`).

    python benchmarks/ep_step_table.py [--model qwen3-235b-a22b] [--chip h100]

Prints one markdown row per step: time, and output tokens per joule of the eight chips
(decode steps: one token per sequence)."""

from __future__ import annotations

import argparse
import time

from diptych.sim.run import Scenario
from diptych.sim.serving.ep import EpSpec, ExpertPart, LockstepTimer, ep_replica
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.workloads.serving_step import Step


def timer(chip, model, layout, split: bool = True):
    """The step timer of ``layout``: ``("ep", "dp")``, ``("ep", "tp")`` or ``("tp", None)``;
    ``split`` False: a DP step's experts at the busiest rank's own tokens (the bound before
    the frame split)."""
    kind, att = layout
    if kind == "tp":
        return DirectStepTimer(make_replica(chip, model, Scenario.of(
            phase="decode", tp=8, execution="sum", weights_dtype="fp8")))
    spec = EpSpec(8, att)
    base = make_replica(chip, model, Scenario.of(phase="decode", tp=spec.tp, execution="sum",
                                                 weights_dtype="fp8"))
    r = ep_replica(base, spec)
    t = DirectStepTimer(r)
    if r.dp == 1:
        return t
    return LockstepTimer(t, r.dp, ExpertPart(r, exact=True) if split else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-235b-a22b")
    ap.add_argument("--chip", default="h100")
    a = ap.parse_args()
    steps = [("decode, 64 sequences at 1,200 tokens", Step(64, 64 * 1201), 64),
             ("decode, 256 sequences at 1,200 tokens", Step(256, 256 * 1201), 256),
             ("prefill, 8 prompts of 1,000 tokens", Step(prefill=((1000, 0),) * 8), 0)]
    layouts = [("ep", "dp"), ("ep", "tp"), ("tp", None)]
    timers = [timer(a.chip, a.model, lay) for lay in layouts]
    print("| step | EP 8, `dp` attention | EP 8, `tp` attention | TP 8 |")
    print("|---|---|---|---|")
    t0 = time.process_time()
    for name, step, toks in steps:
        cells = []
        for t in timers:
            c = t.cost(step)
            cell = f"{c.seconds * 1e3:.2f} ms"
            if toks:
                cell += f" ({toks / (c.energy_j * 8):.2f} tok/J)"
            cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    # a mixed step whose ranks differ: one prompt's chunk beside decodes (DP attention only)
    mixed = Step(24, 24 * 1201, ((1000, 0),))
    old = timer(a.chip, a.model, ("ep", "dp"), False).cost(mixed)
    cells = [f"{t.cost(mixed).seconds * 1e3:.2f} ms" for t in timers]
    cells[0] += f" (before the frame split: {old.seconds * 1e3:.2f} ms)"
    print("| mixed, 24 sequences at 1,200 tokens + one 1,000-token chunk | "
          + " | ".join(cells) + " |")
    print(f"CPU {time.process_time() - t0:.0f} s")


if __name__ == "__main__":
    main()
