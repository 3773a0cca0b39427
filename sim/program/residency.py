"""Residency planner: which tensors stay on chip (scratchpads, shared buffer) and which live
in DRAM, for the whole program.

**Capacities** (:func:`capacities`): the scratchpads of all cores together
(``tensor_cores × capacity``) and the shared buffer, each less ``[residency]
reserve_fraction`` kept free for the engine's double-buffered tiles and operand reuse; the
``[residency]`` table also says which tensor kinds each memory may hold between ops. A tensor
placed in "the scratchpad" is spread over the cores' scratchpads like the ops that use it.

**Items.** A program tensor is one item. A block tensor is one *class* of ``repeat``
instances (one per repeat): a transient class (activations, anything with a producer) is one
item decided for all its instances together (they are the same buffer in every repeat); a
state input of a block (that layer's weights, KV cache, optimizer state) is ``repeat`` items,
one per instance, so that the first k of L layers' weights can be pinned. An item is live
over an interval of the program (positions = node instances in program order): a state input
for the whole program (it stays where it is across program invocations), a produced tensor
from its producer to its last access (to the end if ``live_out``), an activation input from
the start to its last access. Its *load* at a position is its bytes times the number of its
instances live there.

**Priority.** Items are ordered by DRAM bytes saved per byte of on-chip memory, highest first
(``traffic ÷ peak load``, exact rationals; a transient block class saves its traffic in every
repeat with one buffer), then by fewer bytes, class name and instance.

**Rule** (thresholds over what each memory is offered). Items are taken in priority order.
An item is *offered* to the scratchpad if its kind may live there, then, if the scratchpad did
not take it, to the shared buffer if its kind may live there. Offered to memory M, item i gets
``f_M(i) = max over its live positions of (load of every higher-priority item offered to M,
taken or refused, + its own load)``; M takes it if ``f_M(i) ≤ C_M``. An item no memory takes
lives in DRAM. Properties (proofs):

1. *Capacity is never exceeded at any position.* The items M holds at a position were all
   offered to M; the lowest-priority of them, i, counted the others' bytes there in
   ``f_M(i) ≤ C_M``.
2. *A tensor larger than a memory never goes there; kinds are honoured*: ``f_M(i)`` is at
   least its own bytes; an item is offered only where its kind may live.
3. *More SRAM, in either memory, never moves a tensor down the hierarchy, so never adds DRAM
   traffic.* The scratchpad is offered every item its kinds allow, whatever the capacities:
   its ``f`` are constants, so what it takes grows with ``C_scratchpad`` and does not depend
   on ``C_shared``. The shared buffer is offered the allowed items the scratchpad did not take:
   a set that shrinks as ``C_scratchpad`` grows and does not depend on ``C_shared``; so each
   ``f_shared`` can only fall as ``C_scratchpad`` grows and is constant in ``C_shared``, and
   an item the shared buffer held stays on chip. Every item's location therefore only moves
   up (DRAM → shared buffer → scratchpad) as either capacity grows; the DRAM traffic (that of
   the items left in DRAM) never rises.
4. *Use of both memories* (every kind allowed in both). If the live bytes fit the scratchpad
   at every position, or the shared buffer at every position, nothing is left in DRAM (every
   ``f`` is at most the live bytes). If every item is live over the whole program (state:
   weights, KV caches, optimizer state — what fills the memories in decode), ``f`` is the
   priority prefix sum, so the scratchpad holds the items before its first refusal a and the shared
   buffer the next ones before its first refusal b: the on-chip set is the priority prefix
   before b, more than ``C_scratchpad + C_shared − s_a − s_b`` bytes. The optimum (one
   location per item, both capacities) saves at most the fractional knapsack of
   ``C_scratchpad + C_shared`` bytes by traffic per byte, so
   ``DRAM traffic ≤ optimum + d_b × (free on-chip bytes) ≤ optimum + t_a + t_b``
   (``d``: traffic per byte, ``t``: traffic, ``s``: bytes of an item). In particular nothing
   is left in DRAM when the total fits ``C_scratchpad + C_shared`` less the largest item: the
   scratchpad leaves fewer than ``s_a`` bytes free, so what it refuses fits the shared buffer.

The trade-off. (i) A memory also counts the items it refused — the scratchpad even those the
shared buffer then took — so where live ranges differ a refused tensor blocks lower-priority
ones live beside it (100-byte tensors A at position 0, B at 0-1, C at 1-2 in that order, 150 +
150 bytes: A goes to the scratchpad, B to the shared buffer, C to DRAM, though A and C in the
scratchpad and B in the shared buffer fit). Counting only what a memory holds (a plain greedy)
is not monotone: tensors A (4 bytes at position 1, traffic 11), B (3 bytes at 1-2, 7), C
(6 bytes at 2, 12) in one memory: with 6 bytes, A and C fit (7 DRAM bytes); with 7 bytes, A
and B fit and C does not (12). (ii) No rule can promise zero DRAM traffic whenever the live bytes
fit ``C_scratchpad + C_shared``: three 60-byte tensors live together do not fit two 100-byte
memories, and deciding whether some placement leaves nothing in DRAM is PARTITION already for
state tensors alone. Thresholds over the combined capacity admit such sets, and a split in
priority order then overfills a memory (A at 0, B at 0-1, C at 1, 100 bytes each, 100 + 100:
all three pass 200 bytes; the scratchpad's thresholds keep A, B and C go to the shared buffer,
200 bytes at position 1); repairing the split (dropping what it cannot hold) ties each
memory's decisions to both capacities, and the monotonicity of 3 is then not guaranteed. The
rule above keeps the exact per-tensor monotonicity (what makes an SRAM sweep go one way) with
the guarantees of 4.

:func:`plan_residency` is the fast planner: it materialises only the first, one middle and
the last repeat of each block (every middle repeat has the same live set) and places the
instances of a state class in closed form. ``residency_ref.plan_residency_ref`` is the
golden twin over every repeat, literally summing offered bytes per position; they agree
exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ...workloads.program import Expanded, Program
from ..capacity import Capacities, capacities

LOCATIONS: tuple[str, ...] = ("scratchpad", "shared_buffer", "dram", "dram2", "dram3")
#: The on-chip memories, in the order an item is offered to them.
MEMORIES: tuple[str, ...] = LOCATIONS[:2]
#: Where an access moves bytes over a DRAM interface: the first tier, the second or the third.
OFF_CHIP: frozenset = frozenset(LOCATIONS[2:])

#: DRAM accesses an op makes to an operand, by how it uses it.
ACCESS_COUNT = {"read": 1, "write": 1, "update": 2}


@dataclass(frozen=True)
class Placement:
    """Where the instances of one tensor class live. Instance i (repeat i of its block, or the
    single program tensor) is in the scratchpad for ``i < scratchpad``, in the shared buffer
    for ``i < scratchpad + shared_buffer``, in the second DRAM tier for the last ``dram2``
    instances before the last ``dram3`` (a chip with ``[dram2]``; :data:`LOCATIONS`
    ``"dram2"``), in the third tier for the last ``dram3`` (a chip with ``[dram3]``), else in
    DRAM (the first tier).
    ``traffic_bytes``: DRAM bytes its accesses would move per program if all of it were in
    DRAM; ``live``: False for a tensor no
    node accesses (it is left in DRAM and costs nothing); ``saved``: an activation a later
    block imports (saved for backward), placed instance by instance like state."""

    cls: str
    block: str | None
    tensor: object
    instances: int
    scratchpad: int
    shared_buffer: int
    state: bool
    traffic_bytes: int
    live: bool = True
    saved: bool = False
    dram2: int = 0
    dram3: int = 0

    def location(self, i: int = 0) -> str:
        if i < self.scratchpad:
            return "scratchpad"
        if i < self.scratchpad + self.shared_buffer:
            return "shared_buffer"
        if i >= self.instances - self.dram3:
            return "dram3"
        return "dram2" if i >= self.instances - self.dram3 - self.dram2 else "dram"

    @property
    def dram(self) -> int:
        """Instances off chip (in either DRAM tier)."""
        return self.instances - self.scratchpad - self.shared_buffer


@dataclass(frozen=True)
class Access:
    """One operand of a node: tensor (instance name), how it is used, where it is, bytes."""

    tensor: str
    mode: str
    location: str
    bytes: float
    transient: bool


@dataclass(frozen=True)
class NodeResidency:
    """For every operand of one node instance: where it is read from / written to.
    ``spill_bytes``: DRAM bytes of its transient operands (activations and other produced
    tensors) that did not fit on chip, the traffic an unlimited SRAM would remove."""

    accesses: tuple[Access, ...]

    @property
    def dram_read_bytes(self) -> float:
        return sum(a.bytes * (1 if a.mode != "write" else 0) for a in self.accesses
                   if a.location in OFF_CHIP)

    @property
    def dram_write_bytes(self) -> float:
        return sum(a.bytes for a in self.accesses
                   if a.location in OFF_CHIP and a.mode in ("write", "update"))

    @property
    def spill_bytes(self) -> float:
        return sum(a.bytes * ACCESS_COUNT[a.mode] for a in self.accesses
                   if a.location in OFF_CHIP and a.transient)

    @property
    def dram2_share(self) -> float:
        """The share of this node's off-chip bytes (both tiers, each access counted by its
        mode) that the second tier moves; 0 when nothing is off chip."""
        tot = sum(a.bytes * ACCESS_COUNT[a.mode] for a in self.accesses
                  if a.location in OFF_CHIP)
        two = sum(a.bytes * ACCESS_COUNT[a.mode] for a in self.accesses
                  if a.location == "dram2")
        return two / tot if tot else 0.0

    @property
    def dram3_share(self) -> float:
        """The share of this node's off-chip bytes that the third tier moves (0 when nothing
        is off chip or the chip has no ``[dram3]``)."""
        tot = sum(a.bytes * ACCESS_COUNT[a.mode] for a in self.accesses
                  if a.location in OFF_CHIP)
        three = sum(a.bytes * ACCESS_COUNT[a.mode] for a in self.accesses
                    if a.location == "dram3")
        return three / tot if tot else 0.0

    def location(self, tensor: str) -> str:
        for a in self.accesses:
            if a.tensor == tensor:
                return a.location
        raise KeyError(tensor)


@dataclass(frozen=True)
class Residency:
    """The planner's decision: a :class:`Placement` per tensor class, and per-node views."""

    program: Program
    capacity: Capacities
    placements: dict = field(hash=False)

    def placement(self, name: str, block: str | None = None) -> Placement:
        """The placement of program tensor ``name`` or of block ``block``'s tensor ``name``."""
        return self.placements[f"{block}/{name}" if block else name]

    @property
    def dram_bytes(self) -> int:
        """DRAM bytes the program's accesses move per invocation under this plan (the
        planner's count: each access moves the tensor once)."""
        return sum(p.traffic_bytes * p.dram // p.instances for p in self.placements.values()
                   if p.live and p.instances)

    @property
    def dram2_bytes(self) -> int:
        """Bytes the program's accesses move per invocation to and from the second DRAM
        tier (0 without one)."""
        return sum(p.traffic_bytes * p.dram2 // p.instances for p in self.placements.values()
                   if p.live and p.instances)

    @property
    def dram3_bytes(self) -> int:
        """Bytes the program's accesses move per invocation to and from the third DRAM tier
        (0 without one)."""
        return sum(p.traffic_bytes * p.dram3 // p.instances for p in self.placements.values()
                   if p.live and p.instances)

    def dram_tier_bytes(self) -> dict[str, int]:
        """Bytes of state (weights, caches, saved activations) held in each DRAM tier for
        the whole program: ``{"dram": ..., "dram2": ...}`` (and ``"dram3"`` on a chip with a
        third tier); what a result reports as where the tensors live."""
        out = {k: sum(v.values()) for k, v in self.dram_tier_kinds().items()}
        return out

    def dram_tier_kinds(self) -> dict[str, dict[str, int]]:
        """:meth:`dram_tier_bytes` by tensor kind: ``{"dram": {"weight": ..., "kv_cache":
        ...}, "dram2": {...}}`` (kinds with bytes there only): which tensors live in which
        tier."""
        tiers = ("dram", "dram2", "dram3") if self.capacity.dram2_bytes else ("dram", "dram2")
        out: dict[str, dict[str, int]] = {t: {} for t in tiers}
        for p in self.placements.values():
            if p.state or p.saved:
                nb = int(math.ceil(p.tensor.bytes))
                for t, n in (("dram", p.dram - p.dram2 - p.dram3), ("dram2", p.dram2),
                             ("dram3", p.dram3)):
                    if n and t in out:
                        out[t][p.tensor.kind] = out[t].get(p.tensor.kind, 0) + nb * n
        return out

    def on_chip_bytes(self, location: str) -> int:
        """Bytes of state kept in ``location`` for the whole program (pinned weights, caches)."""
        n = {"scratchpad": lambda p: p.scratchpad, "shared_buffer": lambda p: p.shared_buffer}
        return sum(int(math.ceil(p.tensor.bytes)) * n[location](p)
                   for p in self.placements.values() if p.state or p.saved)

    def segments(self, block: str) -> tuple[tuple[int, int], ...]:
        """Ranges ``[start, stop)`` of ``block``'s repeats within which every tensor has the
        same location (phase 2 times each range's ops once)."""
        bi = next(i for i, x in enumerate(self.program.blocks) if x.name == block)
        b = self.program.blocks[bi]
        sources = {(imp.block, imp.reverse) for imp in self.program.imported(bi).values()}
        cuts = {0, b.repeat}
        for p in self.placements.values():
            if not (p.state or p.saved):
                continue
            for src, reverse in {(block, False)} | sources:
                if p.block == src:
                    cuts.update(b.repeat - c if reverse else c
                                for c in (p.scratchpad, p.scratchpad + p.shared_buffer,
                                          p.instances - p.dram2 - p.dram3,
                                          p.instances - p.dram3)
                                if 0 < c < b.repeat)
        cuts = sorted(cuts)
        return tuple(zip(cuts[:-1], cuts[1:]))

    def node(self, block: str, node: str, repeat: int = 0) -> NodeResidency:
        """Where each operand of ``node`` of ``block`` (in ``repeat``) lives."""
        bi = next(i for i, x in enumerate(self.program.blocks) if x.name == block)
        b = self.program.blocks[bi]
        if not 0 <= repeat < b.repeat:
            raise ValueError(f"repeat must be in [0, {b.repeat}) for block {block!r}, "
                             f"not {repeat!r}")
        n = next((x for x in b.nodes if x.name == node), None)
        if n is None:
            raise ValueError(f"block {block!r} has no node {node!r}")
        out = []
        for mode, names in (("read", n.reads), ("write", n.writes), ("update", n.updates)):
            for t in names:
                owner, name, i = self.program.instance_parts(bi, t, repeat)
                p = self.placements[name if owner is None else f"{owner}/{name}"]
                tid = name if owner is None else f"{owner}[{i}].{name}"
                loc = p.location(i) if p.live else "dram"
                out.append(Access(tid, mode, loc, float(p.tensor.bytes), not p.state))
        return NodeResidency(tuple(out))


# ---- the specification shared by both planners: classes and their ordering ---------------
def _interval(n_positions: int, producer, accesses, tensor, saved: bool = False
              ) -> tuple[int, int] | None:
    """The live interval of one instance, or None if nothing accesses it. An instance saved
    for a later block (``saved``) counts as live for the whole program (conservative: it is
    really live from its producer to the importing read)."""
    if saved or (producer is None and tensor.is_state):
        return (0, n_positions - 1) if accesses else None
    if not accesses and producer is None:
        return None
    first = producer if producer is not None else 0
    last = n_positions - 1 if tensor.live_out else max(accesses)
    return first, last


def priority_key(traffic: int, peak: int, nbytes: int, cls: str, instance: int):
    """Sort key of an item: saved DRAM bytes per byte of memory (descending, exact), then
    fewer bytes, then class name and instance."""
    density = Fraction(traffic, peak) if peak else Fraction(traffic + 1, 1) * 10**30
    return (-density, nbytes, cls, instance)


def _fits_error(program: Program, cls: str, nbytes: int, cap: Capacities) -> ValueError:
    return ValueError(f"program {program.name!r} does not fit on chip: the chip has no DRAM "
                      f"and tensor {cls!r} ({nbytes:,} bytes) finds no room in "
                      f"{cap.scratchpad:,} bytes of scratchpad"
                      + (f" and {cap.shared_buffer:,} of shared buffer" if cap.shared_buffer
                         else "") + " left for residency (more chips, a narrower precision or "
                      "a smaller batch would)")


def _eligible(cap: Capacities, kind: str) -> tuple[bool, bool]:
    return kind in cap.scratchpad_kinds, kind in cap.shared_buffer_kinds


def plan_residency(program: Program, chip=None, *, capacity: Capacities | None = None,
                   tier2_kinds: frozenset = frozenset()) -> Residency:
    """Decide where every tensor of ``program`` lives (see the module docstring).

    Give ``chip`` (capacities from its scratchpads, shared buffer and ``[residency]`` table;
    also checks that no tensor exceeds every memory) or ``capacity`` explicitly. Raises
    ValueError on a chip without DRAM when the program does not fit on chip.
    ``tier2_kinds`` (with ``chip``): tensor kinds placed whole in the second DRAM tier, on
    chip nowhere (a training offload, :mod:`diptych.sim.run.offload`); with ``capacity``,
    its own ``tier2_kinds`` hold."""
    if capacity is None:
        if chip is None:
            raise ValueError("plan_residency needs a chip or capacities")
        program.check_fits(chip)
        capacity = capacities(chip, tier2_kinds=tier2_kinds)
    ex = program.expand(condensed=True)
    classes = _classes(program, ex)
    P = len(ex.nodes)
    H = {m: np.zeros(P, dtype=np.int64) for m in MEMORIES}    # bytes offered, per position
    limit = {"scratchpad": capacity.scratchpad, "shared_buffer": capacity.shared_buffer}
    H_dram = np.zeros(P, dtype=np.int64)     # bytes offered to the first DRAM tier
    H_dram2 = np.zeros(P, dtype=np.int64)    # bytes offered to the second (with a third)
    placed: dict[str, list[int]] = {}
    for c in sorted(classes.values(), key=lambda c: c["key"]):
        if not c["live"]:
            continue
        if c["kind"] in capacity.tier2_kinds:     # offloaded: every instance in the tier
            placed[c["cls"]] = [0, 0, c["n"]]
            continue
        counts = [0, 0]
        offered = c["n"]    # instances not taken yet: the last ``offered`` ones
        for slot, (mem, ok) in enumerate(zip(MEMORIES, _eligible(capacity, c["kind"]))):
            if not ok or not offered:
                continue
            k = _offer(H[mem], c, offered, limit[mem])
            counts[slot] = k
            offered -= k
        if offered and not capacity.dram:
            raise _fits_error(program, c["cls"], c["size"], capacity)
        if offered and capacity.dram_bytes:
            # a second DRAM tier: the first takes what fits by the same threshold rule (so
            # more first-tier room never moves a tensor to the second); the rest goes there
            k = _offer(H_dram, c, offered, capacity.dram_bytes)
            rest = offered - k
            if capacity.dram2_bytes:
                # a third: the second takes what fits of the rest by the same rule, the third
                # what remains (the tiers fastest first, [dram3] no faster than [dram2])
                k2 = _offer(H_dram2, c, rest, capacity.dram2_bytes) if rest else 0
                counts += [k2, rest - k2]
            else:
                counts.append(rest)
        placed[c["cls"]] = counts
    return _result(program, capacity, classes, placed)


def _offer(h, c: dict, offered: int, limit: int) -> int:
    """How many of the ``offered`` instances of class ``c`` a memory whose offered bytes per
    position are ``h`` (updated in place) and whose room is ``limit`` bytes takes."""
    if c["per_instance"]:
        # every instance is live everywhere: the j-th offered one needs max(h) + (j+1)·size
        s = c["size"]
        room = limit - int(h.max())
        k = (offered if room >= 0 else 0) if s == 0 else max(0, min(offered, room // s))
        h += offered * s
        return k
    live = c["mask"]
    k = offered if int((h[live] + c["load"][live]).max()) <= limit else 0
    h += c["load"]
    return k


def _classes(program: Program, ex: Expanded) -> dict[str, dict]:
    """Items of the fast planner from a condensed expansion (middle repeats weighted)."""
    P = len(ex.nodes)
    weight = {}
    for bi, reps in enumerate(ex.repeats):
        L = program.blocks[bi].repeat
        for k in reps:
            weight[(bi, k)] = (L - 2) if (len(reps) == 3 and L > 3 and k == 1) else 1
    prod: dict[str, int] = {}
    acc: dict[str, list[int]] = {}
    traffic: dict[str, int] = {}
    saved = program.saved_classes()
    for n in ex.nodes:
        w = weight[(n.block, n.repeat)]
        for mode, names in (("read", n.reads), ("write", n.writes), ("update", n.updates)):
            for t in names:
                acc.setdefault(t, []).append(n.index)
                nb = int(math.ceil(ex.tensors[t].tensor.bytes))
                traffic[t] = traffic.get(t, 0) + ACCESS_COUNT[mode] * nb * w
                if mode == "write":
                    prod[t] = n.index
    classes: dict[str, dict] = {}
    for tid, ti in ex.tensors.items():
        t = ti.tensor
        size = int(math.ceil(t.bytes))
        c = classes.get(ti.cls)
        if c is None:
            b = program.blocks[ti.block] if ti.block is not None else None
            is_saved = ti.cls in saved
            per_instance = is_saved or (b is not None and t.is_state and not any(
                t.name in n.writes for n in b.nodes))
            c = classes[ti.cls] = {
                "cls": ti.cls, "block": b.name if b else None, "tensor": t, "kind": t.kind,
                "size": size, "per_instance": per_instance, "saved": is_saved,
                "state": not is_saved and (per_instance or (
                    b is None and t.is_state and tid not in prod)),
                "n": 0, "traffic": 0, "load": np.zeros(P, dtype=np.int64),
                "mask": np.zeros(P, dtype=bool), "live": False}
        w = weight[(ti.block, ti.repeat)] if ti.block is not None else 1
        c["n"] += w
        c["traffic"] += traffic.get(tid, 0)
        iv = _interval(P, prod.get(tid), acc.get(tid, ()), t, c["saved"])
        if iv is not None:
            c["live"] = True
            c["load"][iv[0]:iv[1] + 1] += size
            c["mask"][iv[0]:iv[1] + 1] = True
    for c in classes.values():
        if c["per_instance"]:
            per = c["traffic"] // c["n"] if c["n"] else 0
            c["key"] = priority_key(per, c["size"], c["size"], c["cls"], 0)
        else:
            c["key"] = priority_key(c["traffic"], int(c["load"].max()) if c["live"] else 0,
                                    c["size"], c["cls"], 0)
    return classes


def _result(program: Program, capacity: Capacities, classes: dict, placed: dict
            ) -> Residency:
    out = {}
    for cls, c in classes.items():
        sp, sb, *two = placed.get(cls, (0, 0))
        out[cls] = Placement(cls=cls, block=c["block"], tensor=c["tensor"], instances=c["n"],
                             scratchpad=sp, shared_buffer=sb, state=c["state"],
                             traffic_bytes=c["traffic"], live=c["live"],
                             saved=c.get("saved", False), dram2=two[0] if two else 0,
                             dram3=two[1] if len(two) > 1 else 0)
    return Residency(program, capacity, out)
