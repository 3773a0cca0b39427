"""Golden twin of the residency planner: every repeat materialised, every item decided one
by one in priority order by literally summing, at each program position, the bytes of the
higher-priority items already offered to a memory. Slow (items × positions × items) and
obviously the rule of :mod:`diptych.sim.program.residency`; tests require the same
placements."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...workloads.program import Program
from .residency import (ACCESS_COUNT, MEMORIES, Capacities, _eligible, _fits_error, _interval,
                        _result, capacities, priority_key)


@dataclass
class _Item:
    """What the planner decides at once: a transient class (all its ``count`` instances) or
    one instance of a per-instance class. ``intervals``: the live intervals of its instances."""

    key: tuple
    cls: str
    size: int
    intervals: list
    count: int = 1

    def load_at(self, x: int) -> int:
        return sum(self.size for lo, hi in self.intervals if lo <= x <= hi)

    def positions(self) -> set[int]:
        return {x for lo, hi in self.intervals for x in range(lo, hi + 1)}


def plan_residency_ref(program: Program, chip=None, *, capacity: Capacities | None = None):
    """The same decision as :func:`~diptych.sim.program.residency.plan_residency`."""
    if capacity is None:
        program.check_fits(chip)
        capacity = capacities(chip)
    ex = program.expand(condensed=False)
    P = len(ex.nodes)
    producer, accessed, traffic = {}, {}, {}
    for n in ex.nodes:
        for mode, names in (("read", n.reads), ("write", n.writes), ("update", n.updates)):
            for t in names:
                accessed.setdefault(t, []).append(n.index)
                traffic[t] = traffic.get(t, 0) + ACCESS_COUNT[mode] * int(
                    math.ceil(ex.tensors[t].tensor.bytes))
                if mode == "write":
                    producer[t] = n.index

    # the instances of each class, with their live intervals; the items to decide
    saved = program.saved_classes()
    members: dict[str, list] = {}
    for tid, ti in ex.tensors.items():
        members.setdefault(ti.cls, []).append(tid)
    items: list[_Item] = []
    info = {}
    for cls, tids in members.items():
        tids = sorted(tids, key=lambda tid: ex.tensors[tid].repeat or 0)
        t0 = ex.tensors[tids[0]].tensor
        size = int(math.ceil(t0.bytes))
        blk = ex.tensors[tids[0]].block
        b = program.blocks[blk] if blk is not None else None
        is_saved = cls in saved
        per_instance = is_saved or (b is not None and t0.is_state and not any(
            t0.name in n.writes for n in b.nodes))
        iv = {tid: _interval(P, producer.get(tid), accessed.get(tid, ()), t0, is_saved)
              for tid in tids}
        live = any(v is not None for v in iv.values())
        info[cls] = {"cls": cls, "block": b.name if b else None, "tensor": t0, "kind": t0.kind,
                     "n": len(tids), "traffic": sum(traffic.get(tid, 0) for tid in tids),
                     "live": live, "saved": is_saved,
                     "state": not is_saved and (per_instance or (
                         b is None and t0.is_state and tids[0] not in producer))}
        if not live:
            continue
        if per_instance:        # one item per instance, in repeat order
            for j, tid in enumerate(tids):
                items.append(_Item(priority_key(traffic.get(tid, 0), size, size, cls, j),
                                   cls, size, [iv[tid]] if iv[tid] else []))
        else:                   # one item for the whole class
            ivs = [v for v in iv.values() if v is not None]
            item = _Item(None, cls, size, ivs, count=len(tids))
            peak = max(item.load_at(x) for x in range(P))
            item.key = priority_key(info[cls]["traffic"], peak, size, cls, 0)
            items.append(item)
    items.sort(key=lambda it: it.key)

    # the rule: offer each item to the memories its kind allows, in order; a memory takes it
    # if, at every position where it is live, the items offered to that memory before it
    # (taken or refused) and itself fit; on a chip with a second DRAM tier what no on-chip
    # memory took is offered to the first DRAM likewise, and what it refuses lives in the
    # second (with a third tier, ``dram2_bytes``: offered to the second likewise, and what it
    # refuses lives in the third); an offloaded kind (``tier2_kinds``) goes to the second
    # tier whole
    limit = {"scratchpad": capacity.scratchpad, "shared_buffer": capacity.shared_buffer}
    offered: dict[str, list[_Item]] = {m: [] for m in (*MEMORIES, "dram", "dram2")}
    width = 2 + bool(capacity.dram_bytes) + bool(capacity.dram2_bytes)
    placed = {cls: [0] * width for cls in info}
    for item in items:
        if info[item.cls]["kind"] in capacity.tier2_kinds:   # offloaded: in the second tier
            placed[item.cls][2] += item.count
            continue
        allowed = dict(zip(MEMORIES, _eligible(capacity, info[item.cls]["kind"])))
        for slot, mem in enumerate(MEMORIES):
            if not allowed[mem]:
                continue
            f = max(sum(h.load_at(x) for h in offered[mem]) + item.load_at(x)
                    for x in item.positions())
            offered[mem].append(item)
            if f <= limit[mem]:
                placed[item.cls][slot] += item.count
                break
        else:
            if not capacity.dram:
                raise _fits_error(program, item.cls, item.size, capacity)
            if capacity.dram_bytes:     # a second tier: the first DRAM by the same rule
                f = max(sum(h.load_at(x) for h in offered["dram"]) + item.load_at(x)
                        for x in item.positions())
                offered["dram"].append(item)
                if f > capacity.dram_bytes and not capacity.dram2_bytes:
                    placed[item.cls][2] += item.count
                elif f > capacity.dram_bytes:      # a third tier: the second by the same rule
                    f = max(sum(h.load_at(x) for h in offered["dram2"]) + item.load_at(x)
                            for x in item.positions())
                    offered["dram2"].append(item)
                    placed[item.cls][2 if f <= capacity.dram2_bytes else 3] += item.count
    return _result(program, capacity, info, placed)
