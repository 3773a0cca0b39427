"""List scheduler: the time of a program is the finish time of a list schedule of its nodes'
phases on the chip's resources, honouring data dependencies.

The rule (the golden twin, :mod:`diptych.sim.program.schedule_ref`, states it in words):
an event-driven non-delay list schedule in priority order (block, repeat, the node's
topological position in its block, phase index). Each resource is a whole of :data:`UNITS`
shares; a phase reserves its shares for its duration (:mod:`diptych.sim.program.demand`).
Early phases (weight prefetches) form one in-order stream: one at a time, each holding its
scratchpad space (``space_bytes``, what residency and the tile reserve leave free) until its
node ends, each progressing at the DRAM shares the reserved phases leave free (so it never
delays them). Times are integer picoseconds (every phase at least 1 ps); shares are whole
units of ``1/UNITS``, rounded to the nearest (at least one unit). Exactness needs only that
both schedulers and :func:`bounds_ps` work on the same integers, not a rounding direction;
rounding lowers a share by at most half a unit, so phases that together ask for more than a
whole resource plus half a unit each never overlap. Because the schedule never idles while
work is left, its length lies between the critical path (and the busiest resource's total)
and the serial sum of all phases.

**Repeated blocks in steady state.** A block of L repeats is not materialised L times: repeats
are generated as the schedule reaches them, and each time the earliest unfinished repeat
advances, the scheduler compares its whole state (running phases with their remaining time,
every unfinished node's counters, the prefetch queue, the space in use), relative to that
repeat, with the states it saw before (and the start and end times of the phases that
already ran in the repeats still open, so that reported times are exact too). When the state
recurs m repeats later after P picoseconds, the schedule from then on is the same shifted by
P per m repeats (the rule is deterministic and the repeats identical), so it jumps ahead as
many periods as fit before the block's last two repeats and simulates the rest: the result
is exactly the materialised schedule's (tested), at the cost of a few repeats.

**One in-order stream** (``in_order_units``, docs/program.md "Kernel order"): the nodes whose
unit is listed (a GPU stack's compute kernels, ``array`` and ``vector``, issued on one CUDA
stream) run one at a time in priority order: such a node starts its first reserved phase only
once every earlier such node has ended, even where its own data would let it start sooner
(a kernel waits behind the one issued before it). Its prefetch (an early phase) and the
nodes of other units (collectives on their own streams, copy-engine transfers) keep the rule
above. The stream's position is part of the state the steady-state jump compares.

**One hardware queue** (``queued_units``, docs/program.md "One hardware queue"): the nodes
whose unit is listed are dispatched in priority order, as kernels of every CUDA stream are
when ``CUDA_DEVICE_MAX_CONNECTIONS=1`` maps all streams onto one work queue: such a node
starts its first reserved phase only once every earlier such node has started, so one that
cannot start (waiting for its data, or for a collective before it on the links) holds back
every node queued after it.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass, field

from .demand import RESOURCES, Demand
from ...workloads.program import NODE_UNITS, Program

#: Shares of a whole resource.
UNITS = 1 << 20
#: Picoseconds per second.
PS_PER_S = 10**12


def to_ps(seconds: float) -> int:
    """A duration in whole picoseconds, at least 1."""
    return max(1, int(round(seconds * PS_PER_S)))


def to_units(share: float) -> int:
    """A resource share in whole units (rounded to the nearest), in [1, UNITS]."""
    return min(UNITS, max(1, int(round(share * UNITS))))


def check_in_order_units(units, name: str = "in_order_units") -> frozenset:
    """``units`` as a frozenset; ValueError naming ``name`` unless it is a tuple or list of
    node units (:data:`~diptych.workloads.program.NODE_UNITS`)."""
    if isinstance(units, str) or not isinstance(units, (tuple, list, frozenset)) \
            or any(u not in NODE_UNITS for u in units):
        raise ValueError(f"{name} must be a tuple of node units "
                         f"({', '.join(NODE_UNITS)}), not {units!r}")
    return frozenset(units)


def compile_demand(block: str, node) -> tuple[list, int]:
    """``([(duration_ps, ((resource, units), ...), early), ...], hold_bytes)`` of a node."""
    d = node.demand
    if d is None:
        raise ValueError(f"block {block!r}: node {node.name!r} has no demand (attach one with "
                         f"Program.with_demands before scheduling)")
    if not isinstance(d, Demand):
        raise ValueError(f"block {block!r}: node {node.name!r}: demand must be a Demand, not "
                         f"{type(d).__name__}")
    return ([(to_ps(p.seconds), tuple((r, to_units(u)) for r, u in p.use), p.early)
             for p in d.phases], int(math.ceil(d.hold_bytes)))


@dataclass(frozen=True)
class BlockTiming:
    """When a block ran: first phase start and last phase end (seconds), how many of its
    repeats were simulated, the steady-state period per repeat (None if not used) and a
    ``representative`` repeat whose neighbours were simulated too (in the periodic regime when
    there is one): the repeat to report and draw."""

    name: str
    repeat: int
    start_s: float
    end_s: float
    simulated_repeats: int
    period_s: float | None = None
    representative: int = 0


@dataclass(frozen=True)
class ScheduleResult:
    """``seconds`` = ``makespan_s`` (the list schedule) + ``step_sync_s`` (the per-step fixed
    cost). ``busy_s``: each resource's total reserved work (shares × time) in seconds of a whole
    resource, for the whole program; ``nodes``: (start, end) in seconds of every *simulated*
    node instance, keyed by (block, repeat, node); ``phases``: the same keys, each phase's
    ``(start, end, label, early)``."""

    makespan_s: float
    step_sync_s: float
    blocks: tuple[BlockTiming, ...]
    busy_s: dict = field(hash=False)
    nodes: dict = field(hash=False, repr=False)
    phases: dict = field(default_factory=dict, hash=False, repr=False)
    makespan_ps: int = 0
    simulated_phases: int = 0

    @property
    def seconds(self) -> float:
        return self.makespan_s + self.step_sync_s

    def utilization(self, resource: str) -> float:
        return self.busy_s.get(resource, 0.0) / self.makespan_s if self.makespan_s else 0.0


class _Inst:
    __slots__ = ("rem", "nxt", "running", "queued", "finished", "succ", "starts", "ends")

    def __init__(self):
        self.rem = 0
        self.nxt = 0
        self.running = False
        self.queued = False
        self.finished = False
        self.succ: list = []
        self.starts: list[int] = []
        self.ends: list[int] = []


class _Scheduler:
    def __init__(self, program: Program, space: int, steady: bool, min_repeats: int,
                 in_order: frozenset = frozenset(), queued: frozenset = frozenset()):
        self.prog = program
        self.space = space
        ex = program.expand(condensed=True)
        nb = len(program.blocks)
        self.L = [b.repeat for b in program.blocks]
        self.n = [len(b.nodes) for b in program.blocks]
        self.phases: list[list] = []
        self.hold: list[list[int]] = []
        self.names: list[list[str]] = []
        self.labels = [[[p.label for p in b.nodes[ni].demand.phases] if b.nodes[ni].demand
                         else [] for ni in program.order(bi)]
                       for bi, b in enumerate(program.blocks)]
        for bi, b in enumerate(program.blocks):
            ph, ho, nm = [], [], []
            for ni in program.order(bi):
                p, h = compile_demand(b.name, b.nodes[ni])
                if h > space:
                    raise ValueError(f"block {b.name!r}: node {b.nodes[ni].name!r} holds "
                                     f"{h:,} bytes, more than the {space:,}-byte prefetch "
                                     f"space")
                ph.append(p)
                ho.append(h)
                nm.append(b.nodes[ni].name)
            self.phases.append(ph)
            self.hold.append(ho)
            self.names.append(nm)
        self.early_pos = [[i for i, p in enumerate(ph) if p[0][2]] for ph in self.phases]
        # positions of the nodes on the one in-order stream, per block
        self.stream_pos = [[i for i, ni in enumerate(program.order(bi))
                            if b.nodes[ni].unit in in_order]
                           for bi, b in enumerate(program.blocks)]
        self.stream_set = [frozenset(sp) for sp in self.stream_pos]
        # positions of the nodes dispatched in order from one hardware queue, per block
        self.queue_pos = [[i for i, ni in enumerate(program.order(bi))
                           if b.nodes[ni].unit in queued]
                          for bi, b in enumerate(program.blocks)]
        self.queue_set = [frozenset(qp) for qp in self.queue_pos]
        # predecessor patterns by repeat type, from the condensed expansion
        where = {}
        first_idx = {}
        for inst in ex.nodes:
            first_idx.setdefault((inst.block, inst.repeat), inst.index)
            where[inst.index] = (inst.block, inst.repeat, inst.index - first_idx[
                (inst.block, inst.repeat)])
        self.pat = [dict() for _ in range(nb)]
        for inst in ex.nodes:
            b, k, pos = where[inst.index]
            pats = []
            for p in inst.preds:
                pb, pk, ppos = where[p]
                if pb == b and pk == k:
                    pats.append(("s", ppos))
                elif pb == b:
                    pats.append(("p", ppos))
                else:
                    pats.append(("a", pb, pk, ppos))
            self.pat[b].setdefault(self._type(b, k), {})[pos] = pats
        # reads of imported tensors, by node position: their writers come from the rule
        # (Program.import_writer), exact for every repeat, not from the condensed pattern
        self.import_reads = []
        for bi, b in enumerate(program.blocks):
            imp = program.imported(bi)
            self.import_reads.append([[t for t in b.nodes[ni].reads if t in imp]
                                      for ni in program.order(bi)])
        self.has_imports = any(program.imported(bi) for bi in range(nb))
        self.skipped: list[list[tuple[int, int]]] = [[] for _ in range(nb)]
        self.insts: dict[tuple, _Inst] = {}
        self.unfinished: set = set()
        self.pending: dict[tuple, list] = {}
        self.done_count: dict[tuple, int] = {}
        self.mat_next = [1] * nb      # next middle repeat to materialise, per block
        self.usage = {r: 0 for r in RESOURCES}
        self.space_used = 0
        self.running: list = []
        self.cands: list = []
        self.t = 0
        self.qptr = self._next_early(0, 0, -1)
        self.sptr = self._next_in(self.stream_pos, 0, 0, -1)   # the stream's next node
        self.dptr = self._next_in(self.queue_pos, 0, 0, -1)    # the queue's next to start
        self.elastic = None     # [key, remaining work (units × ps), rate (units) since t]
        self.steady = [steady and L >= min_repeats for L in self.L]
        self.seen: list[dict] = [dict() for _ in range(nb)]
        self.r0 = [0] * nb
        self.jump = [None] * nb        # (repeats skipped, period ps per repeat)
        self.periodic_from = [0] * nb  # first repeat of the periodic regime (with a jump)
        self.simulated = 0
        for bi in range(nb):
            L = self.L[bi]
            last = [L - 1] if L > 1 else []
            upfront = range(L) if L <= 3 else [0]
            for k in list(upfront) + [k for k in last if k not in upfront]:
                self._materialise(bi, k)
            if L <= 3:
                self.mat_next[bi] = L

    # ---- structure ----------------------------------------------------------------------
    def _type(self, b: int, k: int) -> str:
        L = self.L[b]
        return "first" if k == 0 else ("last" if k == L - 1 else "mid")

    def _next_early(self, b: int, k: int, pos: int):
        """The first node with an early phase strictly after (b, k, pos) in priority order."""
        return self._next_in(self.early_pos, b, k, pos)

    def _next_in(self, positions: list, b: int, k: int, pos: int):
        """The first node at one of ``positions`` (per block) strictly after (b, k, pos) in
        priority order."""
        while b < len(self.L):
            ep = positions[b]
            if ep:
                i = bisect_right(ep, pos)
                if i < len(ep):
                    return (b, k, ep[i])
                if k + 1 < self.L[b]:
                    return (b, k + 1, ep[0])
            b, k, pos = b + 1, 0, -1
        return None

    def _ensure(self, b: int, k: int) -> None:
        while self.mat_next[b] <= min(k, self.L[b] - 2):
            self._materialise(b, self.mat_next[b])
            self.mat_next[b] += 1

    def _materialise(self, b: int, k: int) -> None:
        pats = self.pat[b][self._type(b, k)]
        new = []
        for pos in range(self.n[b]):
            key = (b, k, pos)
            inst = _Inst()
            keys = [(b, k, p[1]) if p[0] == "s" else (
                (b, k - 1, p[1]) if p[0] == "p" else (p[1], p[2], p[3])) for p in pats[pos]]
            for t in self.import_reads[b][pos]:
                w = self.prog.import_writer(b, t, k)
                if w is not None and w not in keys:
                    keys.append(w)
            for pk in keys:
                pi = self.insts.get(pk)
                if pi is None and self._skipped(pk):
                    continue                     # jumped over: finished long ago
                if pi is None:
                    self.pending.setdefault(pk, []).append(key)
                    inst.rem += 1
                elif not pi.finished:
                    pi.succ.append(key)
                    inst.rem += 1
            self.insts[key] = inst
            self.unfinished.add(key)
            inst.succ.extend(self.pending.pop(key, ()))
            new.append(key)
        for key in new:
            self._maybe_ready(key)

    def _skipped(self, key) -> bool:
        return any(lo <= key[1] < hi for lo, hi in self.skipped[key[0]])

    def _jump_safe(self, b: int, r0: int, top: int) -> bool:
        """No dependency (only imports make one) ties block ``b``'s window of repeats
        ``[r0, top]`` to another block's nodes that are not finished: the jump re-labels the
        window, which only the window's own edges survive."""
        if not self.has_imports:
            return True
        inside = lambda key: key[0] == b and r0 <= key[1] <= top
        for key in self.unfinished:
            if inside(key):
                continue
            if any(inside(s) for s in self.insts[key].succ):
                return False
        for k in range(r0, top + 1):
            for pos in range(self.n[b]):
                inst = self.insts[(b, k, pos)]
                if not inst.finished and any(s[0] != b for s in inst.succ):
                    return False
        return True

    # ---- the list schedule --------------------------------------------------------------
    def _maybe_ready(self, key) -> None:
        inst = self.insts[key]
        if inst.running or inst.queued or inst.finished:
            return
        ph = self.phases[key[0]][key[2]]
        j = inst.nxt
        if j == 0:
            if ph[0][2] or inst.rem:
                return        # an early phase waits for the queue; others for predecessors
        elif j == 1 and ph[0][2] and inst.rem:
            return
        if j == 0 or (j == 1 and ph[0][2]):
            b, pos = key[0], key[2]
            if pos in self.stream_set[b] and key != self.sptr:
                return        # a stream node's first reserved phase waits for its turn
            if pos in self.queue_set[b] and key != self.dptr:
                return        # and a queued node's for its turn to be dispatched
        inst.queued = True
        heapq.heappush(self.cands, key + (j,))

    def _start(self, key, j: int) -> None:
        b, k, pos = key
        inst = self.insts[key]
        dur, use, early = self.phases[b][pos][j]
        inst.queued = False
        inst.running = True
        inst.nxt = j + 1
        inst.starts.append(self.t)
        if j == 0:
            self.space_used += self.hold[b][pos]
            if 0 < k + 1 <= self.L[b] - 2:
                self._ensure(b, k + 1)
        if key == self.dptr and not early:    # dispatched: the queue's next may start
            self.dptr = self._next_in(self.queue_pos, b, k, pos)
            if self.dptr is not None:
                self._ensure(self.dptr[0], self.dptr[1])
                if self.dptr in self.insts:
                    self._maybe_ready(self.dptr)
        if early:
            self.elastic = [key, dur * UNITS, 0]
            self.qptr = self._next_early(b, k, pos)
        else:
            for r, u in use:
                self.usage[r] += u
            heapq.heappush(self.running, (self.t + dur, key, j))
        self.simulated += 1

    def _fits(self, key, j: int) -> bool:
        b, _, pos = key
        _, use, _ = self.phases[b][pos][j]
        for r, u in use:
            if self.usage[r] + u > UNITS:
                return False
        return True

    def _end_phase(self, key, j: int) -> None:
        b, k, pos = key
        inst = self.insts[key]
        inst.running = False
        inst.ends.append(self.t)
        if j == len(self.phases[b][pos]) - 1:
            inst.finished = True
            self.unfinished.discard(key)
            self.space_used -= self.hold[b][pos]
            self.done_count[(b, k)] = self.done_count.get((b, k), 0) + 1
            for s in inst.succ:
                si = self.insts[s]
                si.rem -= 1
                if si.rem == 0:
                    self._maybe_ready(s)
            if key == self.sptr:    # the stream's turn passes to its next node
                self.sptr = self._next_in(self.stream_pos, b, k, pos)
                if self.sptr is not None:
                    self._ensure(self.sptr[0], self.sptr[1])
                    if self.sptr in self.insts:
                        self._maybe_ready(self.sptr)
        else:
            self._maybe_ready(key)

    def _finish_events(self) -> None:
        t = self.t
        el = self.elastic
        if el is not None and el[1] <= 0:
            self.elastic = None
            self._end_phase(el[0], 0)
        while self.running and self.running[0][0] == t:
            _, key, j = heapq.heappop(self.running)
            b, _, pos = key
            for r, u in self.phases[b][pos][j][1]:
                self.usage[r] -= u
            self._end_phase(key, j)

    def _scan(self) -> None:
        blocked = []
        while self.cands:
            item = heapq.heappop(self.cands)
            key, j = item[:3], item[3]
            if self._fits(key, j):
                self._start(key, j)
            else:
                blocked.append(item)
        for item in blocked:
            heapq.heappush(self.cands, item)
        q = self.qptr
        if self.elastic is None and q is not None:
            self._ensure(q[0], q[1])
            if self.space_used + self.hold[q[0]][q[2]] <= self.space:
                self._start(q, 0)

    def _next_time(self):
        nxt = self.running[0][0] if self.running else None
        el = self.elastic
        if el is not None:
            el[2] = UNITS - self.usage["dram"]
            if el[2] > 0:
                e = self.t + -(-el[1] // el[2])
                nxt = e if nxt is None else min(nxt, e)
        return nxt

    def run(self) -> None:
        while True:
            self._finish_events()
            self._scan()
            self._steady_state()
            nxt = self._next_time()
            if nxt is None:
                if self.unfinished:
                    raise RuntimeError("scheduler stalled with nodes left (a bug)")
                return
            if self.elastic is not None:
                self.elastic[1] -= (nxt - self.t) * self.elastic[2]
            self.t = nxt

    # ---- steady state -------------------------------------------------------------------
    def _steady_state(self) -> None:
        for b in range(len(self.L)):
            if not self.steady[b]:
                continue
            r0 = self.r0[b]
            while r0 < self.L[b] and self.done_count.get((b, r0), 0) == self.n[b]:
                r0 += 1
            if r0 == self.r0[b]:
                continue
            self.r0[b] = r0
            top = self.mat_next[b] - 1
            if r0 < 1 or r0 > top:
                continue
            canon = self._canon(b, r0, top)
            hit = self.seen[b].get(canon)
            if hit is None:
                self.seen[b][canon] = (self.t, r0)
                continue
            t1, r1 = hit
            m, period = r0 - r1, self.t - t1
            jumps = (self.L[b] - 2 - top) // m
            if self.has_imports:
                # a later block waits for a repeat not yet materialised (an import's writer):
                # jump short of it, so that it is simulated and its waiters told in time
                waited = [pk[1] for pk, ws in self.pending.items()
                          if pk[0] == b and any(w[0] != b for w in ws)]
                if waited:
                    jumps = min(jumps, (min(waited) - 1 - top) // m)
            if jumps >= 1 and period > 0:
                if not self._jump_safe(b, r0, top):
                    self.seen[b].clear()
                    continue
                self.periodic_from[b] = r1
                self._shift(b, r0, top, m * jumps, period * jumps)
                self.jump[b] = (m * jumps, period // m if period % m == 0 else period / m)
            self.steady[b] = False

    def _canon(self, b: int, r0: int, top: int):
        t = self.t
        ends = {kk: e - t for e, kk, _ in self.running}
        window = []
        for k in range(r0, top + 1):
            for pos in range(self.n[b]):
                inst = self.insts[(b, k, pos)]
                # the window's history too (start and end times relative to now), so that a
                # match also makes the reported times of the shifted nodes exact
                window.append((inst.rem, inst.nxt, ends.get((b, k, pos), -1), inst.queued,
                               inst.finished, tuple(t - x for x in inst.starts),
                               tuple(t - x for x in inst.ends)))
        foreign = []
        for key in sorted(self.unfinished):
            if key[0] == b and r0 <= key[1] <= top:
                continue
            inst = self.insts[key]
            foreign.append((key, inst.rem, inst.nxt, ends.get(key, -1), inst.queued))
        q = self.qptr
        if q is not None and q[0] == b and r0 <= q[1] <= top:
            q = ("w", q[1] - r0, q[2])
        sp = self.sptr
        if sp is not None and sp[0] == b and r0 <= sp[1] <= top:
            sp = ("w", sp[1] - r0, sp[2])
        dp = self.dptr
        if dp is not None and dp[0] == b and r0 <= dp[1] <= top:
            dp = ("w", dp[1] - r0, dp[2])
        el = self.elastic
        if el is not None:
            ek = el[0]
            el = (("w", ek[1] - r0, ek[2]) if ek[0] == b and r0 <= ek[1] <= top else ek, el[1])
        return (top - r0, tuple(window), tuple(foreign), q, sp, dp, el, self.space_used,
                tuple(sorted(self.usage.items())))

    def _shift(self, b: int, r0: int, top: int, dk: int, dt: int) -> None:
        """Jump ``dk`` repeats and ``dt`` picoseconds ahead: the window's nodes become those
        ``dk`` repeats later, every pending time moves by ``dt``."""
        def rekey(key):
            return (b, key[1] + dk, key[2]) if key[0] == b and r0 <= key[1] <= top else key
        moved = {}
        for k in range(r0, top + 1):
            for pos in range(self.n[b]):
                key = (b, k, pos)
                inst = self.insts.pop(key)
                inst.succ = [rekey(s) for s in inst.succ]
                inst.starts = [x + dt for x in inst.starts]
                inst.ends = [x + dt for x in inst.ends]
                moved[rekey(key)] = inst
                if key in self.unfinished:
                    self.unfinished.discard(key)
                    self.unfinished.add(rekey(key))
        for key, inst in moved.items():
            self.insts[key] = inst
            inst.succ.extend(self.pending.pop(key, ()))
        counts = {k: self.done_count.pop((b, k), 0) for k in range(r0, top + 1)}
        for k, c in counts.items():
            if c:
                self.done_count[(b, k + dk)] = c
        self.running = [(e + dt, rekey(kk), j) for e, kk, j in self.running]
        heapq.heapify(self.running)
        self.cands = [rekey(item[:3]) + (item[3],) for item in self.cands]
        heapq.heapify(self.cands)
        if self.qptr is not None:
            self.qptr = rekey(self.qptr)
        if self.sptr is not None:
            self.sptr = rekey(self.sptr)
        if self.dptr is not None:
            self.dptr = rekey(self.dptr)
        if self.elastic is not None:
            self.elastic[0] = rekey(self.elastic[0])
        self.t += dt
        self.skipped[b].append((r0, r0 + dk))
        self.r0[b] = r0 + dk
        self.mat_next[b] = top + 1 + dk
        self.seen[b].clear()

    # ---- results ------------------------------------------------------------------------
    def result(self, step_sync_s: float) -> ScheduleResult:
        makespan = max((i.ends[-1] for i in self.insts.values() if i.ends), default=0)
        nodes, phases = {}, {}
        span: dict[int, list] = {}
        for (b, k, pos), inst in self.insts.items():
            if not inst.starts:
                continue
            key = (self.prog.blocks[b].name, k, self.names[b][pos])
            nodes[key] = (inst.starts[0] / PS_PER_S, inst.ends[-1] / PS_PER_S)
            phases[key] = tuple((s0 / PS_PER_S, s1 / PS_PER_S, lab, ph[2]) for s0, s1, ph, lab
                                in zip(inst.starts, inst.ends, self.phases[b][pos],
                                       self.labels[b][pos]))
            s = span.setdefault(b, [inst.starts[0], inst.ends[-1]])
            s[0] = min(s[0], inst.starts[0])
            s[1] = max(s[1], inst.ends[-1])
        blocks = []
        for b, blk in enumerate(self.prog.blocks):
            s = span.get(b, [0, 0])
            skipped, per = self.jump[b] if self.jump[b] else (0, None)
            rep = self.periodic_from[b] if self.jump[b] else min(blk.repeat - 1,
                                                                 blk.repeat // 2)
            blocks.append(BlockTiming(blk.name, blk.repeat, s[0] / PS_PER_S, s[1] / PS_PER_S,
                                      blk.repeat - skipped,
                                      None if per is None else per / PS_PER_S, rep))
        busy = {r: 0 for r in RESOURCES}
        for b, blk in enumerate(self.prog.blocks):
            for ph in self.phases[b]:
                for dur, use, _ in ph:
                    for r, u in use:
                        busy[r] += blk.repeat * dur * u
        return ScheduleResult(makespan_s=makespan / PS_PER_S, step_sync_s=step_sync_s,
                              blocks=tuple(blocks),
                              busy_s={r: v / UNITS / PS_PER_S for r, v in busy.items()},
                              nodes=nodes, phases=phases, makespan_ps=makespan,
                              simulated_phases=self.simulated)


def schedule(program: Program, *, space_bytes: float = 0, step_sync_seconds: float = 0.0,
             steady_state: bool = True, steady_state_min_repeats: int = 6,
             in_order_units: tuple[str, ...] = (),
             queued_units: tuple[str, ...] = ()) -> ScheduleResult:
    """List-schedule ``program`` (every node needs a demand) and return its timing.

    ``space_bytes``: scratchpad space for prefetched weights (a node holding more is an
    error); ``step_sync_seconds``: the per-step fixed cost added after the schedule
    (``[overheads] step_sync_us``); ``steady_state``: jump over repeated blocks' periodic
    middle (exact; off = simulate every repeat), for blocks of at least
    ``steady_state_min_repeats`` repeats. ``in_order_units``: node units (of
    :data:`~diptych.workloads.program.NODE_UNITS`) whose nodes run one at a time in priority
    order, one in-order stream (module docstring; empty: none); ``queued_units``: node
    units whose nodes start in priority order, one hardware queue (module docstring; empty:
    none)."""
    in_order = check_in_order_units(in_order_units)
    queued = check_in_order_units(queued_units, "queued_units")
    if isinstance(space_bytes, bool) or not isinstance(space_bytes, (int, float)) \
            or not math.isfinite(space_bytes) or space_bytes < 0:
        raise ValueError(f"space_bytes must be a finite number >= 0, not {space_bytes!r}")
    if isinstance(step_sync_seconds, bool) or not isinstance(step_sync_seconds, (int, float)) \
            or not math.isfinite(step_sync_seconds) or step_sync_seconds < 0:
        raise ValueError(f"step_sync_seconds must be a finite number >= 0, not "
                         f"{step_sync_seconds!r}")
    s = _Scheduler(program, int(space_bytes), steady_state, max(4, steady_state_min_repeats),
                   in_order, queued)
    s.run()
    return s.result(float(step_sync_seconds))


def bounds_ps(program: Program) -> dict:
    """Bounds every schedule of ``program`` obeys, in the scheduler's integer picoseconds:
    ``critical_path`` (longest dependency chain; a node's early phase may overlap its
    predecessors), ``busiest`` (largest total reserved work of one resource, in whole-resource
    picoseconds, rounded up) and ``serial`` (every phase one after another). Materialises
    every repeat (for tests and small programs)."""
    ex = program.expand()
    finish: dict[int, int] = {}
    serial = 0
    work = {r: 0 for r in RESOURCES}
    for n in ex.nodes:
        ph, _ = compile_demand(program.blocks[n.block].name, n.node)
        ready = max((finish[p] for p in n.preds), default=0)
        early = ph[0][0] if ph[0][2] else 0
        rest = sum(d for d, _, e in ph if not e)
        finish[n.index] = max(ready, early) + rest
        for d, use, _ in ph:
            serial += d
            for r, u in use:
                work[r] += d * u
    busiest = max(-(-w // UNITS) for w in work.values())
    return {"critical_path": max(finish.values()), "busiest": busiest, "serial": serial}
