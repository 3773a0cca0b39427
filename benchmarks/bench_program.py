"""Speed of the program layer (issue 9): a model phase timed as a schedule of its program
(``run_workload(..., execution="schedule")``) against the summed run, warm (the engine's memo
and Numba's cache filled by a first call). Prints numbers with their targets; asserts nothing.

What the schedule adds to a warm run: lowering with tensor names → programs → fusion →
residency plan → one demand per distinct op → the list schedule, whose steady-state jump
simulates a few of the 80 layers. Each stage is timed on its own for the decode step.

Targets: the schedule adds < 2 s to a warm ``diptych run`` of one phase of an 80-layer model
(issue 9: the whole run < 5 s warm); planning and scheduling a decode step < 10 ms each;
the steady-state schedule exactly equal to the materialised one.

Run: ``python benchmarks/bench_program.py [--roofline]`` (``--roofline``: a roofline stands
in for the engine, to skip Numba's first compilation).
"""

from __future__ import annotations

import argparse
import time

from diptych.arch import load_chip
from diptych.sim.program import capacities, fuse_program, op_demand, plan_residency, schedule
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.graph import program_pieces
from diptych.workloads.lower import decode
from diptych.workloads.registry import load_model
from diptych.sim.run.node import default_precision

CASES = [
    ("infer-2026", "llama-3-70b", dict(phase="decode", batch=8, prompt=4096, tp=8)),
    ("h100", "llama-3-70b", dict(phase="decode", batch=1, prompt=2048, tp=8)),
    ("h100", "llama-3-70b", dict(phase="prefill", batch=1, prompt=2048, tp=8)),
    ("train-2026", "llama-3-70b", dict(phase="train", batch=16, seq=4096, tp=8, dp=2)),
]


def roofline(op, chip):
    """Standalone time without the engine: max(FLOPs at peak, bytes at 90 % of peak)."""
    from types import SimpleNamespace

    from diptych.workloads.ops import Gemm
    if isinstance(op, Gemm):
        flops, rd, wr = op.flops, op.a_bytes + op.b_bytes, op.c_bytes
        peak = chip.peak_ops_per_s[op.compute_dtype]
    else:
        flops, rd, wr = op.flops, op.read_bytes, op.write_bytes
        peak = chip.vector_ops_per_s
    bw = 0.9 * chip.dram_bytes_per_s
    tc = flops / peak
    s = max(tc, (rd + wr) / bw)
    return SimpleNamespace(kind="op", seconds=s, compute_cycles=tc * chip.clock_hz,
                           dram_read_bytes=rd, dram_write_bytes=wr, flops=flops,
                           dram_bytes_per_s=(rd + wr) / s if s else 0.0, energy_j=0.0,
                           energy_breakdown=None, bound="memory", utilization=0.0)


def _best(fn, n: int = 3) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def stages(sim) -> None:
    """Each stage of the schedule path for the 80-layer decode step on infer-2026."""
    chip = load_chip("infer-2026")
    model = load_model("llama-3-70b")
    p = default_precision(chip, "decode")
    t_low = _best(lambda: decode(model, 8, 4096, precision=p, tp=8))
    w = decode(model, 8, 4096, precision=p, tp=8)
    t_prog = _best(lambda: program_pieces(w))
    prog = program_pieces(w)[0].program
    t_fuse = _best(lambda: fuse_program(prog))
    prog = fuse_program(prog)
    t_plan = _best(lambda: plan_residency(prog, chip), 5)
    res = plan_residency(prog, chip)
    cap = capacities(chip)
    space = max(0, cap.scratchpad - res.on_chip_bytes("scratchpad"))
    d = {}
    for b in prog.blocks:
        for n in b.nodes:
            d[(b.name, n.name)] = op_demand(seconds=1e-6, unit=n.unit)
    timed = prog.with_demands(d)
    t_sched = _best(lambda: schedule(timed, space_bytes=space), 5)
    fast, full = schedule(timed, space_bytes=space), schedule(timed, space_bytes=space,
                                                               steady_state=False)
    print(f"llama-3-70b decode step, TP8, infer-2026: lowering with names {t_low * 1e3:.1f} ms, "
          f"program {t_prog * 1e3:.1f} ms, fusion {t_fuse * 1e3:.1f} ms, residency plan "
          f"{t_plan * 1e3:.2f} ms (target < 10 ms), schedule {t_sched * 1e3:.2f} ms "
          f"(target < 10 ms; {fast.simulated_phases} phases simulated, materialised "
          f"{full.simulated_phases}; equal: {fast.makespan_ps == full.makespan_ps})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roofline", action="store_true", help="skip the engine (no Numba)")
    args = ap.parse_args()
    sim = roofline if args.roofline else None
    stages(sim)
    print("warm run_workload, best of 3 (target: the schedule adds < 2 s):")
    for chip, model, kw in CASES:
        runs = {}
        for ex in ("sum", "schedule"):
            run_workload(chip, model, Scenario.of(execution=ex, **kw), simulate=sim)      # warm-up
            runs[ex] = _best(lambda: run_workload(chip, model, Scenario.of(execution=ex, **kw),
                                                  simulate=sim))
        r = run_workload(chip, model, Scenario.of(execution="schedule", **kw), simulate=sim)
        sim_rep = [b["simulated_repeats"] for p in r.schedule["pieces"] for b in p["blocks"]
                   if b["repeat"] > 1]
        desc = ", ".join(f"{k}={v}" for k, v in kw.items())
        print(f"  {model} on {chip} ({desc}): sum {runs['sum']:.3f} s, schedule "
              f"{runs['schedule']:.3f} s (+{runs['schedule'] - runs['sum']:.3f} s); "
              f"repeats simulated per repeated block {sim_rep}")


if __name__ == "__main__":
    main()
