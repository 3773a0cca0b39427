"""Speed of the program layer (issue 9): residency planning and list scheduling of a decode
step of an 80-layer model. Prints numbers with their targets; asserts nothing.

The program is built from today's lowering (``workloads.lower.decode``) by a stand-in adapter:
every op of a block reads the previous op's output, a GEMM tagged ``weight`` also reads its
weight matrix, attention reads the layer's KV cache. (Phase 2 replaces this adapter by tensor
names from the lowering itself.) Each op's demand comes from the engine's standalone result
(``--roofline`` uses a roofline instead, to skip Numba's first compilation).

Targets: planning and scheduling a decode step of llama-3-70b (80 layers) in milliseconds
(< 10 ms each), the steady-state schedule exactly equal to the materialised one.

Run: ``python benchmarks/bench_program.py [--chip infer-2026] [--model llama-3-70b]
[--tp 8] [--batch 8] [--roofline]``.
"""

from __future__ import annotations

import argparse
import time

from diptych.arch import load_chip
from diptych.sim.ops import Collective, Gemm, VectorOp
from diptych.sim.program import (Block, Carry, Node, Program, Tensor, capacities, op_demand,
                                 plan_residency, schedule)
from diptych.workloads.fused import FusedAttention, fused_stats
from diptych.workloads.lower import decode
from diptych.workloads.parallel import collective_seconds
from diptych.workloads.registry import load_model
from diptych.workloads.run import default_precision


def roofline(op, chip):
    """Standalone time without the engine: max(FLOPs at peak, bytes at 90 % of peak)."""
    from types import SimpleNamespace
    if isinstance(op, Gemm):
        flops, rd, wr = op.flops, op.a_bytes + op.b_bytes, op.c_bytes
        peak = chip.peak_ops_per_s[op.compute_dtype]
    else:
        flops, rd, wr = op.flops, op.read_bytes, op.write_bytes
        peak = chip.vector_ops_per_s
    bw = 0.9 * chip.dram_bytes_per_s
    tc = flops / peak
    s = max(tc, (rd + wr) / bw)
    return SimpleNamespace(seconds=s, compute_cycles=tc * chip.clock_hz, dram_read_bytes=rd,
                           dram_write_bytes=wr, dram_bytes_per_s=(rd + wr) / s if s else 0.0,
                           energy_j=0.0, energy_breakdown=None)


def op_timing(op, chip, sim):
    """(seconds, compute seconds, DRAM bytes, achieved DRAM bandwidth, unit)."""
    if isinstance(op, Collective):
        return collective_seconds(op, chip), 0.0, 0.0, 0.0, "link"
    if isinstance(op, FusedAttention):
        fs = fused_stats(op, chip, sim)
        return fs.seconds, fs.compute_seconds, op.dram_bytes, fs.stream_bytes_per_s, "array"
    st = sim(op, chip)
    unit = "array" if isinstance(op, Gemm) else "vector"
    return (st.seconds, st.compute_cycles / chip.clock_hz,
            st.dram_read_bytes + st.dram_write_bytes, st.dram_bytes_per_s, unit)


def op_timings(workload, chip, sim) -> tuple[dict, float, float]:
    """Every op's standalone timing, the sum of standalone times (today's model, without the
    overlap of collectives) and the streaming bandwidth (the highest any op achieves)."""
    t = {(b.name, op.name): op_timing(op, chip, sim) for b in workload.blocks for op in b.ops}
    total = sum(t[(b.name, op.name)][0] * b.repeat for b in workload.blocks for op in b.ops)
    stream = max((x[3] for x in t.values()), default=0.0) or chip.dram_bytes_per_s
    return t, total, stream


def build_program(workload, chip, timings, stream, space: float = 0.0) -> Program:
    """The stand-in adapter (module docstring). Weights are prefetched when they fit in
    ``space`` bytes of scratchpad."""
    oh = chip.fixed_costs
    width = 16384.0                     # bytes of a layer's hidden-state tensors
    blocks, gl = [], [Tensor("tokens", 64)]
    prev = "tokens"
    for bi, b in enumerate(workload.blocks):
        repeated = b.repeat > 1
        tensors = [Tensor("x", width)] if repeated else []
        nodes = []
        last = "x" if repeated else prev
        for i, op in enumerate(b.ops):
            final = i == len(b.ops) - 1
            out = f"h{bi}" if final and not repeated else f"o{i}"
            if out == f"h{bi}":
                gl.append(Tensor(out, width))
            else:
                tensors.append(Tensor(out, width))
            reads, wbytes = [last], 0.0
            if isinstance(op, Gemm) and "weight" in op.tags:
                tensors.append(Tensor(f"w{i}", op.b_bytes, "weight"))
                reads.append(f"w{i}")
                wbytes = op.b_bytes
            if isinstance(op, FusedAttention):
                tensors.append(Tensor(f"kv{i}", op.read_bytes, "kv_cache"))
                reads.append(f"kv{i}")
            s, tc, dram, _, unit = timings[(b.name, op.name)]
            launch = (oh.collective_launch_us if unit == "link" else oh.op_launch_us) * 1e-6
            pre = min(wbytes, dram) if wbytes <= space else 0.0
            d = op_demand(seconds=s, unit=unit, dram_bytes=dram,
                          stream_bytes_per_s=stream if dram else None, compute_seconds=tc,
                          launch_seconds=launch, prefetch_bytes=pre)
            nodes.append(Node(op.name, reads=tuple(reads), writes=(out,), unit=unit,
                              demand=d, payload=op))
            last = out
        carry = ()
        if repeated:
            gl.append(Tensor(f"h{bi}", width))
            carry = (Carry("x", last, prev, f"h{bi}"),)
        prev = f"h{bi}"
        blocks.append(Block(b.name.replace(" ", "_"), tuple(tensors), tuple(nodes),
                            repeat=b.repeat, carry=carry))
    return Program("decode", blocks, [Tensor(t.name, width) if t.name == "tokens" else t
                                      for t in gl])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chip", default="infer-2026")
    ap.add_argument("--model", default="llama-3-70b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--roofline", action="store_true", help="skip the engine (no Numba)")
    args = ap.parse_args()
    chip = load_chip(args.chip)
    model = load_model(args.model)
    p = default_precision(chip, "decode")
    w = decode(model, args.batch, args.context, precision=p, tp=args.tp)
    if args.roofline:
        sim = roofline
    else:
        from diptych.sim import simulate as sim
    t0 = time.perf_counter()
    timings, total, stream = op_timings(w, chip, sim)
    t_ops = time.perf_counter() - t0
    prog = build_program(w, chip, timings, stream)
    print(f"{args.model} decode, batch {args.batch}, context {args.context}, TP{args.tp} on "
          f"{chip.name}: {prog.node_count} nodes materialised, "
          f"{sum(len(b.nodes) for b in prog.blocks)} in the program "
          f"(ops timed in {t_ops:.2f} s)")

    cap = capacities(chip)
    t0 = time.perf_counter()
    for _ in range(5):
        res = plan_residency(prog, chip)
    t_plan = (time.perf_counter() - t0) / 5
    space = max(0, cap.scratchpad - res.on_chip_bytes("scratchpad")) \
        if "weight" in cap.scratchpad_kinds else 0
    print(f"residency plan: {t_plan * 1e3:.2f} ms (target < 10 ms); "
          f"{res.on_chip_bytes('scratchpad') / 2**20:.1f} MiB of state pinned, "
          f"{space / 2**20:.1f} MiB left for prefetched weights, planned DRAM traffic "
          f"{res.dram_bytes / 1e9:.2f} GB per step")
    prog = build_program(w, chip, timings, stream, space)
    sync = chip.fixed_costs.step_sync_us * 1e-6
    t0 = time.perf_counter()
    for _ in range(5):
        r = schedule(prog, space_bytes=space, step_sync_seconds=sync)
    t_fast = (time.perf_counter() - t0) / 5
    t0 = time.perf_counter()
    full = schedule(prog, space_bytes=space, step_sync_seconds=sync,
                    steady_state=False)
    t_full = time.perf_counter() - t0
    print(f"schedule, steady state: {t_fast * 1e3:.2f} ms (target < 10 ms), "
          f"{r.simulated_phases} phases simulated; materialised: {t_full * 1e3:.2f} ms, "
          f"{full.simulated_phases} phases; equal: {r.makespan_ps == full.makespan_ps}")
    print(f"step time: schedule {r.seconds * 1e3:.3f} ms (makespan {r.makespan_s * 1e3:.3f} + "
          f"sync {r.step_sync_s * 1e3:.3f}) vs sum of standalone ops {total * 1e3:.3f} ms; "
          f"DRAM busy {r.utilization('dram'):.0%}, links busy {r.utilization('link'):.0%} "
          "(phase 1 preview: the ops are timed as today, every operand in DRAM)")


if __name__ == "__main__":
    main()
