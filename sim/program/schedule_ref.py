"""Golden twin of the list scheduler: every repeat materialised, and at every event time a
plain scan over all phases in priority order. Written for clarity (O(phases²)); tests
require exactly the finish times of :func:`diptych.sim.program.schedule.schedule`.

The rule (docs/program.md, "Scheduler"), in words:

* time advances from event to event (0, then every phase end); at an event, phases that end
  then release their resources, then every not-yet-started phase is visited in priority order
  (block, repeat, node's topological position, phase index) and started *now* if it is
  eligible and fits;
* a prefetch (an early first phase) starts once every earlier prefetch has ended (one
  in-order stream) and its node's ``hold_bytes`` are free in the prefetch space (held until
  the node's last phase ends), whatever the node's predecessors; it then progresses at the
  DRAM shares the reserved phases leave free, its work being its seconds at the whole DRAM;
* any other first phase starts once all the node's predecessors have ended, a later phase
  once the node's previous phase has ended (and, after a prefetch, the predecessors too),
  provided that for every resource the shares of the running reserved phases plus its own
  stay within the whole resource;
* with ``in_order_units``, a node whose unit is listed (one in-order stream) also waits, for
  its first reserved phase, until every such node before it in priority order has ended;
* with ``queued_units``, a node whose unit is listed (one hardware queue) also waits, for its
  first reserved phase, until every such node before it in priority order has started its
  own.
"""

from __future__ import annotations

from ...workloads.program import Program
from .schedule import UNITS, check_in_order_units, compile_demand


def schedule_ref(program: Program, *, space_bytes: int = 0,
                 in_order_units: tuple[str, ...] = (),
                 queued_units: tuple[str, ...] = ()) -> dict:
    """Start and end (integer picoseconds) of every phase of every materialised node, and
    the makespan: ``{"makespan_ps", "nodes": [(block, repeat, node name, [(start, end)])]}``."""
    ex = program.expand()
    nodes = ex.nodes
    ph = [compile_demand(program.blocks[n.block].name, n.node) for n in nodes]
    for n, (phases, hold) in zip(nodes, ph):
        if hold > space_bytes:
            raise ValueError(f"node {n.node.name!r} holds {hold:,} bytes, more than the "
                             f"{space_bytes:,}-byte prefetch space")
    pos = {}
    for n in nodes:       # topological position within its block repeat
        pos[n.index] = sum(1 for m in nodes if m.block == n.block and m.repeat == n.repeat
                           and m.index < n.index)
    order = sorted(((n.block, n.repeat, pos[n.index], j, n.index)
                    for n in nodes for j in range(len(ph[n.index][0]))))
    prio = {n.index: (n.block, n.repeat, pos[n.index]) for n in nodes}
    prefetchers = [n.index for n in nodes if ph[n.index][0][0][2]]
    in_order = check_in_order_units(in_order_units)
    streamed = {n.index for n in nodes if n.node.unit in in_order}
    queue = check_in_order_units(queued_units, "queued_units")
    queued = {n.index for n in nodes if n.node.unit in queue}

    def dispatched(k):        # node k's first reserved phase has started
        return (k, 1 if ph[k][0][0][2] else 0) in start
    def reserved(start, end, t):  # shares of every resource held by reserved phases at t
        busy = {}
        for (k, jj), s in start.items():
            dur, use, early = ph[k][0][jj]
            if not early and s <= t < end[(k, jj)]:
                for r, u in use:
                    busy[r] = busy.get(r, 0) + u
        return busy

    start: dict[tuple[int, int], int] = {}
    end: dict[tuple[int, int], int] = {}
    prefetch = None               # [node, remaining work in units × ps] of the running one

    def node_end(i):              # end of node i's last phase, if it has one yet
        return end.get((i, len(ph[i][0]) - 1))

    def ended(i, t):
        return node_end(i) is not None and node_end(i) <= t

    t = 0
    while True:
        if prefetch is not None and prefetch[1] <= 0:
            end[(prefetch[0], 0)] = t
            prefetch = None
        for (_, _, _, j, i) in order:
            if (i, j) in start:
                continue
            phases, hold = ph[i]
            dur, use, early = phases[j]
            if j == 0 and early:
                # the in-order prefetch stream: every earlier prefetch has ended, and the
                # node's scratchpad space is free
                if prefetch is not None or not all(
                        (k, 0) in end and end[(k, 0)] <= t
                        for k in prefetchers if prio[k] < prio[i]):
                    continue
                held = sum(ph[k][1] for k in range(len(nodes))
                           if (k, 0) in start and not ended(k, t))
                if held + hold > space_bytes:
                    continue
                start[(i, 0)] = t
                prefetch = [i, dur * UNITS]
                continue
            if j == 0:
                ok = all(ended(p, t) for p in nodes[i].preds)
            else:
                ok = (i, j - 1) in end and end[(i, j - 1)] <= t
                if ok and j == 1 and phases[0][2]:
                    ok = all(ended(p, t) for p in nodes[i].preds)
            if ok and (j == 0 or (j == 1 and phases[0][2])) and i in streamed:
                # the in-order stream: every earlier node on it has ended
                ok = all(ended(k, t) for k in streamed if prio[k] < prio[i])
            if ok and (j == 0 or (j == 1 and phases[0][2])) and i in queued:
                # the one hardware queue: every earlier node on it has been dispatched
                ok = all(dispatched(k) for k in queued if prio[k] < prio[i])
            if not ok:
                continue
            busy = reserved(start, end, t)
            if any(busy.get(r, 0) + u > UNITS for r, u in use):
                continue
            start[(i, j)] = t
            end[(i, j)] = t + dur
        later = [e for e in end.values() if e > t]
        free = UNITS - reserved(start, end, t).get("dram", 0)
        if prefetch is not None and free > 0:
            later.append(t + -(-prefetch[1] // free))
        if not later:
            if len(end) < len(order) or prefetch is not None:
                raise RuntimeError("scheduler stalled with phases left (a bug)")
            break
        nxt = min(later)
        if prefetch is not None:
            prefetch[1] -= (nxt - t) * free
        t = nxt

    out = []
    for n in nodes:
        k = len(ph[n.index][0])
        out.append((program.blocks[n.block].name, n.repeat, n.node.name,
                    [(start[(n.index, j)], end[(n.index, j)]) for j in range(k)]))
    return {"makespan_ps": max(end.values()), "nodes": out}

