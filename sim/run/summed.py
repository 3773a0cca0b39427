"""A workload timed as the sum of its ops (``execution="sum"``), and the per-block costs the
serving step-time grids combine.

:func:`simulate_workload` simulates every op once (the engine memoises identical ops), scales
by the block's ``repeat`` and adds: the compute ops run in sequence; with ``overlap`` a
block's tensor-parallel collectives hide behind its compute (``max(compute, comm)``, the
collective-matmul / async-TP ideal), without it they add; the data-parallel gradient
all-reduce overlaps the last micro-batch's backward pass. Every operand is read from DRAM (no
residency). It is the model before the program scheduler (:mod:`diptych.sim.run.scheduled`),
kept for comparison and as the serving grids' summed execution (:func:`block_costs`,
:func:`combine_parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...workloads.fused_attention import FusedAttention
from ...workloads.graph import Workload
from ...workloads.host_work import host_sync_count, kernel_count
from ...workloads.ops import Collective, Gemm, Op
from ...workloads.quant import IN_KERNEL_TAG
from ...workloads.serving_step import base_name
from .. import energy_parts as EP
from .attention import fused_stats
from .links import collective_energy_j, collective_launch_seconds, collective_seconds

if TYPE_CHECKING:  # pragma: no cover
    from ...arch import Chip


def _default_simulate():
    from .. import simulate
    return simulate


def _shape(op: Op) -> str:
    if isinstance(op, FusedAttention):
        return "fused " + _shape(op.gemms[0])
    if isinstance(op, Gemm):
        s = f"{op.m}x{op.k}x{op.n}"
        return f"{op.batch}x({s})" if op.batch > 1 else s
    if isinstance(op, Collective):
        return f"{op.bytes / 2**20:.2f} MiB x{op.group}"
    return f"{op.elements}"


def _timed(op: Op, chip: Chip, sim, coll=None) -> dict:
    """One op timed alone, every operand from DRAM: its record (seconds, energy and its
    ``energy_breakdown_j`` by component per repeat, bound, ...); ``coll(op)``: a
    collective's seconds (default: the chip's links)."""
    if isinstance(op, Collective):
        link_j = collective_energy_j(op, chip)
        return {"op": op.name, "kind": op.kind, "shape": _shape(op),
                "seconds": collective_seconds(op, chip) if coll is None else coll(op),
                "bound": "communication",
                "utilization": None, "flops": 0.0, "dram_bytes": 0.0,
                "energy_j": link_j, "energy_breakdown_j": EP.of(link=link_j),
                "link_bytes": op.bytes}
    if isinstance(op, FusedAttention):
        fs = fused_stats(op, chip, sim)
        return {"op": op.name, "kind": "attention", "shape": _shape(op), "seconds": fs.seconds,
                "bound": fs.bound, "utilization": fs.utilization, "flops": fs.flops,
                "dram_bytes": op.dram_bytes, "energy_j": fs.energy_j,
                "energy_breakdown_j": fs.energy_parts, "dtype": op.compute_dtype,
                "compute_seconds": fs.compute_seconds, "memory_seconds": fs.memory_seconds,
                "stream_bytes_per_s": fs.stream_bytes_per_s}
    st = sim(op, chip)
    rec = {"op": op.name, "kind": st.kind, "shape": _shape(op), "seconds": st.seconds,
           "bound": st.bound, "utilization": st.utilization, "flops": st.flops,
           "dram_bytes": st.dram_read_bytes + st.dram_write_bytes, "energy_j": st.energy_j,
           "energy_breakdown_j": EP.of_stats(st)}
    if isinstance(op, Gemm):
        rec["dtype"] = op.compute_dtype
    return rec


def simulate_workload(w: Workload, chip: Chip, *, overlap: bool = True,
                      simulate: Callable | None = None,
                      collective_time: Callable | None = None) -> dict:
    """The trivial schedule of ``w``'s blocks (module docstring): every node's op timed once
    alone (:func:`_timed`), the nodes of a block one after another, its tensor-parallel
    collectives beside them (``overlap``), scaled by the block's repeats; per-chip totals
    (``energy_breakdown_j``: ``energy_j`` by component, :mod:`diptych.sim.energy_parts`)
    and op records. ``collective_time(op)``: a collective's seconds (default: the chip's
    links)."""
    sim = simulate or _default_simulate()
    records: list[dict] = []
    t_compute = t_mem = t_lat = t_comm_exposed = 0.0
    total = energy = dram = 0.0
    parts = EP.zero()
    backward_s = 0.0
    dp_comm = 0.0
    for b in w.blocks:
        comp_s = comm_s = 0.0
        for n in b.nodes:
            op = n.payload
            rec = _timed(op, chip, sim, collective_time)
            s, e = rec["seconds"], rec["energy_j"]
            if isinstance(op, Collective):
                if "dp" in op.tags:
                    dp_comm += s * b.repeat
                else:
                    comm_s += s
            else:
                comp_s += s
                dram += rec["dram_bytes"] * b.repeat
                if rec["bound"] == "memory":
                    t_mem += s * b.repeat
                elif rec["bound"] == "latency":
                    t_lat += s * b.repeat
                else:
                    t_compute += s * b.repeat
            energy += e * b.repeat
            EP.add(parts, rec["energy_breakdown_j"], b.repeat)
            rec.update(block=b.name, stage=b.stage, repeat=b.repeat,
                       total_seconds=rec["seconds"] * b.repeat)
            records.append(rec)
        block_s = max(comp_s, comm_s) if overlap else comp_s + comm_s
        t_comm_exposed += (block_s - comp_s) * b.repeat
        total += block_s * b.repeat
        if b.stage == "backward":
            backward_s += block_s * b.repeat
    # the gradient all-reduce can only overlap the last micro-batch's backward pass
    last_bwd = backward_s / w.info.get("micro_batches", 1)
    exposed_dp = max(0.0, dp_comm - last_bwd) if overlap else dp_comm
    total += exposed_dp
    t_comm_exposed += exposed_dp
    return {"seconds": total, "energy_j": energy, "energy_breakdown_j": parts,
            "dram_bytes": dram, "layers": records,
            "compute_seconds": t_compute, "memory_bound_seconds": t_mem,
            "latency_bound_seconds": t_lat, "communication_seconds": t_comm_exposed}


@dataclass(frozen=True)
class BlockCost:
    """One block of a simulated workload: per copy, the compute time (all non-collective
    ops in sequence), the tensor-parallel collectives' time, and the energy; ``repeat``
    copies. ``attention_compute_s``/``attention_memory_s`` are the two terms of the fused
    attention records' ``max`` (zero without fused attention). ``energy_breakdown_j``: the
    copy's ``energy_j`` by component (:mod:`diptych.sim.energy_parts`)."""

    name: str
    repeat: int
    compute_s: float
    comm_s: float
    energy_j: float
    attention_compute_s: float = 0.0
    attention_memory_s: float = 0.0
    energy_breakdown_j: Mapping[str, float] = field(default_factory=EP.zero, compare=False)


def launch_seconds(chip) -> tuple[float, float]:
    """(per op launch, per collective launch) in seconds from the chip's ``[overheads]``."""
    fc = chip.fixed_costs
    return fc.op_launch_us * 1e-6, fc.collective_launch_us * 1e-6


def _op_launch_s(op, op_s: float, sync_s: float) -> float:
    """One op's launches (a kernel each it stands for) and host synchronisations
    (:mod:`diptych.workloads.host_work`); one launch for an op not found by name."""
    if op is None:
        return op_s
    return op_s * kernel_count(op) + sync_s * host_sync_count(op)


def step_sync_seconds(chip) -> float:
    """The chip's fixed cost per step (``[overheads] step_sync_us``) in seconds."""
    return chip.fixed_costs.step_sync_us * 1e-6


def block_costs(w: Workload, chip, simulate: Callable | None = None, *,
                fixed_costs: bool = False,
                collective_time: Callable | None = None) -> list[BlockCost]:
    """Per-block costs of ``w`` from :func:`~diptych.sim.run.summed.simulate_workload`'s
    records (the one place step times come from).

    With ``fixed_costs`` each block also pays the chip's launch costs (``[overheads]``): one
    ``op_launch_us`` per distinct op of the block, or per kernel of an op that stands for
    several, and ``host_sync_us`` per host synchronisation it makes
    (:mod:`diptych.workloads.host_work`; a serving engine runs the attention of all
    the step's sequences as one kernel, so records of one op name, group marks aside, are one
    launch; a GEMM's precision ops, :func:`~diptych.sim.run.precision_ops.with_precision_ops`, run
    inside its kernel and launch nothing, as in a schedule) on its compute side and one
    ``collective_launch_us`` per collective on its communication side (none for one its
    library times: :func:`~.links.collective_launch_seconds`), spending static power
    meanwhile. This is the summed model's stand-in
    for the program scheduler, which charges them itself: with ``execution="schedule"`` it is
    never used (the step's ``step_sync_us`` is the caller's). ``collective_time(op)``: a
    collective's seconds (default: the chip's links; a waterfall step frees them)."""

    t = simulate_workload(w, chip, simulate=simulate, collective_time=collective_time)
    inside = {op.name for b in w.blocks for op in b.ops if "precision" in op.tags}
    in_kernel = {op.name for b in w.blocks for op in b.ops if IN_KERNEL_TAG in op.tags}
    acc: dict[str, dict] = {}
    names: dict[str, set] = {}
    order: list[str] = []
    kernel: dict[str, float] = {}     # seconds of in-kernel precision ops per block
    for r in t["layers"]:
        b = r["block"]
        if b not in acc:
            acc[b] = {"repeat": r["repeat"], "compute_s": 0.0, "comm_s": 0.0, "energy_j": 0.0,
                      "attention_compute_s": 0.0, "attention_memory_s": 0.0,
                      "energy_breakdown_j": EP.zero()}
            names[b] = set()
            order.append(b)
        a = acc[b]
        if r["op"] in in_kernel:      # inside the attention kernel: its compute term's
            kernel[b] = kernel.get(b, 0.0) + r["seconds"]
        elif r["bound"] == "communication":
            a["comm_s"] += r["seconds"]
        else:
            a["compute_s"] += r["seconds"]
        if r.get("kind") == "attention" and "compute_seconds" in r:
            a["attention_compute_s"] += r["compute_seconds"]
            a["attention_memory_s"] += r["memory_seconds"]
        a["energy_j"] += r["energy_j"]
        EP.add(a["energy_breakdown_j"], r["energy_breakdown_j"])
        if fixed_costs and r["op"] not in inside:
            comm = r["bound"] == "communication"
            names[b].add(("c" if comm else "o", base_name(r["op"]), r["kind"] if comm else ""))
    for b, k in kernel.items():      # the attention's max(compute + conversion, memory)
        a = acc[b]
        c, m = a["attention_compute_s"], a["attention_memory_s"]
        a["compute_s"] += max(c + k, m) - max(c, m)
        a["attention_compute_s"] = c + k
    if fixed_costs:
        by_name = {base_name(op.name): op for b in w.blocks for op in b.ops}
        op_s = launch_seconds(chip)[0]
        sync_s = chip.fixed_costs.host_sync_us * 1e-6
        static = chip.energy.static_w
        for b in order:
            ops_s = sum(_op_launch_s(by_name.get(n), op_s, sync_s)
                        for k, n, _ in names[b] if k == "o")
            colls_s = sum(collective_launch_seconds(kind, chip)
                          for k, _, kind in names[b] if k == "c")
            acc[b]["compute_s"] += ops_s
            acc[b]["comm_s"] += colls_s
            acc[b]["energy_j"] += static * (ops_s + colls_s)
            acc[b]["energy_breakdown_j"]["static"] += static * (ops_s + colls_s)
    return [BlockCost(b, **acc[b]) for b in order]


def combine_parts(blocks: list[BlockCost], core_compute_s: dict[str, float],
                  core_energy_j: dict[str, float], overlap: bool = True) -> tuple[float, float]:
    """(seconds, energy) of a step from its frame's blocks and its cores' time and energy per
    layer of each layer block (by name): a layer block's copy takes ``max(compute + cores,
    collectives)`` (with ``overlap``, else their sum), as
    :func:`~diptych.sim.run.summed.simulate_workload` does."""
    secs = energy = 0.0
    for b in blocks:
        comp = b.compute_s + core_compute_s.get(b.name, 0.0)
        e = b.energy_j + core_energy_j.get(b.name, 0.0)
        secs += b.repeat * (max(comp, b.comm_s) if overlap else comp + b.comm_s)
        energy += b.repeat * e
    return secs, energy


def combine_energy_parts(blocks: list[BlockCost],
                         core_parts: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The energy of :func:`combine_parts` by component: each block's
    ``energy_breakdown_j`` plus its cores' (``core_parts`` by layer block name, per layer),
    times its repeats."""
    out = EP.zero()
    for b in blocks:
        EP.add(out, b.energy_breakdown_j, b.repeat)
        if b.name in core_parts:
            EP.add(out, core_parts[b.name], b.repeat)
    return out
