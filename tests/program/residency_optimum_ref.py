"""An oracle for the residency tests that shares no code with the planners: every tensor
instance's live interval and DRAM traffic counted from the expanded program, the bytes each
memory holds at each position under a plan, and the exhaustive optimum over every placement
of a handful of instances."""

from __future__ import annotations

import math
from dataclasses import dataclass

MEMORIES = ("scratchpad", "shared_buffer")


@dataclass(frozen=True)
class Instance:
    """One tensor instance: its class and index (the repeat), bytes, kind, the positions
    (node instances in program order) ``first..last`` where it is live, and the DRAM bytes
    its accesses move if it lives in DRAM (a read or write moves it once, an update twice)."""

    tid: str
    cls: str
    index: int
    size: int
    kind: str
    first: int
    last: int
    traffic: int


def instances(program) -> tuple[list[Instance], int]:
    """The accessed tensor instances of ``program`` and its number of positions. Live: a state
    input (never written in the program) for the whole program; a produced tensor from its
    producer to its last access, to the end if ``live_out``; any other input from the start."""
    ex = program.expand()
    n = len(ex.nodes)
    first, last, traffic, produced = {}, {}, {}, set()
    for node in ex.nodes:
        for t, moves in ([(t, 1) for t in node.reads + node.writes]
                         + [(t, 2) for t in node.updates]):
            last[t] = node.index
            first.setdefault(t, node.index)
            traffic[t] = traffic.get(t, 0) + moves * math.ceil(ex.tensors[t].tensor.bytes)
        for t in node.writes:
            first[t] = node.index
            produced.add(t)
    out = []
    for tid, ti in ex.tensors.items():
        if tid not in last:
            continue
        lo, hi = first[tid], last[tid]
        if tid not in produced:
            lo = 0
            if ti.tensor.is_state:
                hi = n - 1
        if ti.tensor.live_out:
            hi = n - 1
        out.append(Instance(tid, ti.cls, ti.repeat if ti.repeat is not None else 0,
                            math.ceil(ti.tensor.bytes), ti.tensor.kind, lo, hi,
                            traffic[tid]))
    return out, n


def locations(insts, res) -> list[str]:
    """Where the plan ``res`` puts each instance."""
    return [res.placements[i.cls].location(i.index) for i in insts]


def held(insts, n: int, locs) -> dict[str, list[int]]:
    """Bytes each on-chip memory holds at each position under ``locs``."""
    used = {m: [0] * n for m in MEMORIES}
    for i, loc in zip(insts, locs):
        if loc in used:
            for x in range(i.first, i.last + 1):
                used[loc][x] += i.size
    return used


def live_bytes(insts, n: int) -> list[int]:
    """Bytes live at each position (every instance on chip)."""
    return held(insts, n, ["scratchpad"] * len(insts))["scratchpad"]


def dram_traffic(insts, locs) -> int:
    return sum(i.traffic for i, loc in zip(insts, locs) if loc == "dram")


def optimum(insts, n: int, cap) -> int:
    """The least DRAM traffic of any placement (one location per instance) that respects
    each memory's capacity at every position and its kinds: exhaustive, with pruning."""
    limit = {"scratchpad": cap.scratchpad, "shared_buffer": cap.shared_buffer}
    kinds = {"scratchpad": cap.scratchpad_kinds, "shared_buffer": cap.shared_buffer_kinds}
    order = sorted(insts, key=lambda i: -i.traffic)
    used = {m: [0] * n for m in MEMORIES}
    best = [sum(i.traffic for i in insts)]

    def go(k: int, dram: int):
        if dram >= best[0]:
            return
        if k == len(order):
            best[0] = dram
            return
        i = order[k]
        span = range(i.first, i.last + 1)
        for m in MEMORIES:
            if i.kind in kinds[m] and all(used[m][x] + i.size <= limit[m] for x in span):
                for x in span:
                    used[m][x] += i.size
                go(k + 1, dram)
                for x in span:
                    used[m][x] -= i.size
        go(k + 1, dram + i.traffic)

    go(0, 0)
    return best[0]
