"""Golden twin of the residency planner: every repeat materialised, every item decided one
by one by literally summing, at each program position, the bytes of the higher-priority items
live there. Slow (items × positions × items) and obviously the rule of
:mod:`diptych.sim.program.residency`; tests require the same placements."""

from __future__ import annotations

import math

from .graph import Program
from .residency import (ACCESS_COUNT, Capacities, _eligible, _fits_error, _interval, _result,
                        capacities, priority_key)


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

    # the instances of each class, with their live intervals
    saved = program.saved_classes()
    members: dict[str, list] = {}
    for tid, ti in ex.tensors.items():
        members.setdefault(ti.cls, []).append(tid)
    items = []      # (key, cls, [instance ids], per_instance index or None)
    info = {}
    for cls, tids in members.items():
        t0 = ex.tensors[tids[0]].tensor
        size = int(math.ceil(t0.bytes))
        blk = ex.tensors[tids[0]].block
        b = program.blocks[blk] if blk is not None else None
        is_saved = cls in saved
        per_instance = is_saved or (b is not None and t0.is_state and not any(
            t0.name in n.writes for n in b.nodes))
        intervals = {tid: _interval(P, producer.get(tid), accessed.get(tid, ()), t0, is_saved)
                     for tid in tids}
        live = any(iv is not None for iv in intervals.values())
        total = sum(traffic.get(tid, 0) for tid in tids)
        info[cls] = {"cls": cls, "block": b.name if b else None, "tensor": t0, "kind": t0.kind,
                     "n": len(tids), "traffic": total, "live": live, "saved": is_saved,
                     "state": not is_saved and (per_instance or (
                         b is None and t0.is_state and tids[0] not in producer))}
        if not live:
            continue
        if per_instance:
            order = sorted(tids, key=lambda tid: ex.tensors[tid].repeat)
            for j, tid in enumerate(order):
                key = priority_key(traffic.get(tid, 0), size, size, cls, j)
                items.append((key, cls, [tid], j, size, intervals))
        else:
            peak = max(sum(size for tid in tids if intervals[tid] is not None
                           and intervals[tid][0] <= x <= intervals[tid][1]) for x in range(P))
            items.append((priority_key(total, peak, size, cls, 0), cls, tids, None, size,
                          intervals))
    items.sort(key=lambda it: it[0])

    def load_at(item, x):
        _, _, tids, _, size, intervals = item
        return sum(size for tid in tids if intervals[tid] is not None
                   and intervals[tid][0] <= x <= intervals[tid][1])

    def live_at(item, x):
        _, _, tids, _, _, intervals = item
        return any(intervals[tid] is not None and intervals[tid][0] <= x <= intervals[tid][1]
                   for tid in tids)

    limit = {"scratchpad": capacity.scratchpad, "shared_buffer": capacity.shared_buffer}
    placed = {cls: [0, 0] for cls in info}
    for i, item in enumerate(items):
        cls = item[1]
        el = dict(zip(("scratchpad", "shared_buffer"), _eligible(capacity, info[cls]["kind"])))
        where = None
        for slot, mem in enumerate(("scratchpad", "shared_buffer")):
            if not el[mem]:
                continue
            higher = [h for h in items[:i] if _eligible(capacity, info[h[1]]["kind"])[slot]]
            f = max(sum(load_at(h, x) for h in higher) + load_at(item, x)
                    for x in range(P) if live_at(item, x))
            if f <= limit[mem]:
                where = slot
                break
        if where is None:
            if not capacity.dram:
                raise _fits_error(program, cls, item[4], capacity)
            continue
        if item[3] is None:
            placed[cls][where] = info[cls]["n"]
        else:
            placed[cls][where] += 1
    return _result(program, capacity, info, placed)
