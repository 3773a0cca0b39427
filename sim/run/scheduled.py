"""Time a workload as a schedule of its program, not as a sum of its ops.

:func:`schedule_workload` is ``run_workload``'s ``execution="schedule"`` (docs/program.md,
"Phase 2"):

    lower → Program(s) (workloads/graph.py) → fusion (optional) → plan_residency
          → split each block at its residency segments → each node's op with its operands'
            locations (resident_op) → time each distinct op with the engine (memoised)
          → op_demand (the chip's fixed costs) → schedule → totals and per-op records

**Residency in the engine** (phase 2b): every op is timed with the locations the planner gave
its operands (``Residency.node``): a GEMM's A, B and C (by their roles in the lowering's access
records) become ``a_source``/``b_source``/``c_dest`` (an operand made of several tensors is on
chip only when all of them are: in the shared buffer if any is there), with the scratchpad
bytes held by pinned state and the node's own resident operands as ``resident_bytes``; a
vector op's and fused attention's reads and writes are split by the share of their bytes
each location holds. A block whose repeats differ (``Residency.segments``: the first k
layers' weights pinned) is split into one block per segment, chained through its carries,
and each segment's ops are timed once; a block that imports from or is imported by another
(training's forward/backward pairs) is kept whole and timed with its last repeat's residency
(the one with the most in DRAM; the segments mirror each other across the pair).

What the schedule changes besides: ops overlap where the data allows (a vector op beside
independent array work, a collective beside work that does not wait for it, a weight prefetch
during the previous op's compute), and the fixed costs are charged. On a chip whose
``[overheads] kernel_order`` is ``issue`` (the stack setting ``kernel_order``) the array and
vector nodes run one at a time in program order, one CUDA stream (:func:`in_order_units`;
docs/program.md, "Kernel order"): collectives and prefetches still overlap them; under
``one_queue`` every node also starts in program order (:func:`queued_units`).

**Fused nodes** (:class:`~diptych.sim.program.FusedOps`): the vector work runs during the
GEMM's main phase: ``seconds = max(GEMM, Σ vector ALU time, DRAM bytes ÷ peak)`` where a
vector op's ALU time is its memory-free time (``compute_cycles`` ÷ clock), reserving the vector
unit at its average rate. DRAM bytes are the GEMM's own (A from the prologue's input, C to the
fused output's location) plus the epilogue's extra inputs in DRAM (a residual, a bias) and any
output bytes beyond the GEMM's C. One launch. Its record's ``flops`` are the GEMM's (the
array's work, which the roofline plots against the array's peak); ``vector_flops`` those of
its fused vector ops.

**Weight prefetch**: an op whose weights are in DRAM may stream them ahead, during earlier
ops, when the chip's scratchpad keeps weights between ops (``[residency] scratchpad_kinds``
lists ``weight``) and they fit the scratchpad left after residency's pinned state. Weights in
a second DRAM tier (:class:`~.placed.Tiered`'s ``prefetch_bytes``) are prefetched the same way,
at the tier's achieved stream rather than the first DRAM's: they arrive during the previous
ops, and the op's main phase keeps the rest of its time. The prefetch stream is the chip's one
stream (in order, one at a time, each holding its scratchpad space until its op ends) and
progresses at the share of the first DRAM the running ops leave free, which errs slow for a
tier behind its own link. A prefetch never makes an op's main phase shorter than its compute,
and the stream never moves the tier's bytes faster than the tier's rate.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from ...workloads.host_work import host_sync_count, kernel_count
from ...workloads.ops import Collective, Gemm, VectorOp, launch_group
from ...workloads.quant import HOLDS_ARRAY_TAG
from ...workloads.program import NODE_UNITS
from ..vector import stream_fraction
from ..program import FusedOps, capacities, fuse_program, op_demand, plan_residency
from ..program import schedule as list_schedule
from ...workloads.fused_attention import FusedAttention, on_chip
from .attention import fused_stats
from ...workloads.graph import Workload, program_pieces
from .. import energy_parts as EP
from .links import collective_energy_j, collective_launch_seconds, collective_seconds
from .placed import Tiered, access_index, placed_op, split_segments, tier2_chip, \
    tier2_weight_bytes, tier3_chip
from ..regime import roof_regime
from .stack import chip_kernel_order


def _compute_seconds(st, chip) -> float:
    cc = getattr(st, "compute_cycles", None)
    return st.seconds if cc is None else cc / chip.clock_hz


def _alu_energy(st) -> float:
    """The ALU share of a vector op's energy (what stays when it runs in a GEMM's epilogue)."""
    bd = getattr(st, "energy_breakdown", None)
    return bd.get("vector", 0.0) if bd else st.energy_j


def _fused_parts(st, vst, chip, extra_static_s: float,
                 extra_dram_bytes: float = 0.0) -> dict[str, float]:
    """A fused node's energy by component, as its total is made: the GEMM's breakdown, the
    fused vector ops' ALU share (:func:`_alu_energy`: ``vector``, or a stand-in's whole
    energy under ``other``), the epilogue's own DRAM inputs (a residual, a bias: their DRAM
    energy, and the NoC and D2D hops they take, as the engine charges a GEMM's bytes), and
    the static power over the part of the node's time the GEMM's own stats do not cover."""
    parts = EP.of_stats(st)
    for v in vst:
        key = "vector" if getattr(v, "energy_breakdown", None) else EP.OTHER
        parts[key] = parts.get(key, 0.0) + _alu_energy(v)
    for k, v in _bytes_energy(chip, extra_dram_bytes).items():
        parts[k] = parts.get(k, 0.0) + v
    parts["static"] += chip.energy.static_w * extra_static_s
    return parts


def _bytes_energy(chip, nbytes: float) -> dict[str, float]:
    """DRAM energy of ``nbytes`` of DRAM traffic and of the NoC and D2D hops they take (the
    per-byte energies the engine charges its own bytes; joules by component)."""
    if not nbytes:
        return {}
    from ...arch.energy import energy_breakdown_j
    e = energy_breakdown_j(chip, dram_bytes=nbytes, noc_bytes=nbytes)
    return {k: e[k] for k in ("dram", "noc", "d2d") if k in e}


def _bytes_energy_j(chip, nbytes: float) -> float:
    return sum(_bytes_energy(chip, nbytes).values())


class _Timer:
    """Times each distinct op record once (the engine memoises too; this also memoises fused
    attention, collectives and fused nodes)."""

    def __init__(self, chip, sim: Callable, coll: Callable | None = None):
        self.chip, self.sim, self.coll = chip, sim, coll
        self.memo: dict = {}
        self.stream = 0.0           # the highest DRAM bandwidth the engine achieved
        self._tier2: "_Timer | None" = None     # the same ops on the second DRAM tier
        self._tier3: "_Timer | None" = None     # and on the third

    def __call__(self, op):
        key = op
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._time(op)
            self.stream = max(self.stream, got.bandwidth)
        return got

    def _tiered(self, op: Tiered) -> SimpleNamespace:
        """:class:`~.placed.Tiered`: the op's time and energy on each tier, weighted by the
        share of its off-chip bytes each moves; ``tier1_bytes`` (what occupies the first
        DRAM in the schedule) and ``dram2_bytes`` split its ``dram_bytes``, each tier's share
        of the traffic of the op as the engine tiles it on that tier (the bytes its time and
        energy are of: the engine may tile an op differently for a slower DRAM). Its
        weights in the second tier (``tier2_prefetch_bytes``) may be fetched ahead by the
        schedule (:func:`_schedule_piece`); its other tier-2 bytes stream into the op.
        ``tier_s``/``tier_j`` per tier: what its share adds to the op's time over the same
        share in the first tier, and the DRAM energy of its bytes at its pJ/bit."""
        if op.dram3_share:
            return self._tiered3(op)
        if self._tier2 is None:
            self._tier2 = _Timer(tier2_chip(self.chip), self.sim, self.coll)
        a, b, s = self(op.inner), self._tier2(op.inner), op.dram2_share
        seconds = (1 - s) * a.seconds + s * b.seconds
        parts = {k: (1 - s) * a.energy_parts.get(k, 0.0) + s * b.energy_parts.get(k, 0.0)
                 for k in set(a.energy_parts) | set(b.energy_parts)}
        out = SimpleNamespace(**vars(a))
        out.__dict__.update(
            seconds=seconds, energy_j=(1 - s) * a.energy_j + s * b.energy_j,
            energy_parts=parts, bound=a.bound if s < 0.5 else b.bound,
            utilization=(a.utilization * a.seconds / seconds
                         if a.utilization is not None and seconds else a.utilization),
            weight_bytes=0.0, tier1_bytes=(1 - s) * a.dram_bytes, dram2_bytes=s * b.dram_bytes,
            dram_bytes=(1 - s) * a.dram_bytes + s * b.dram_bytes,
            tier2_prefetch_bytes=op.prefetch_bytes, tier2_bandwidth=b.bandwidth,
            tier_s={"dram2": s * (b.seconds - a.seconds)},
            tier_j={"dram2": s * b.energy_parts.get("dram", 0.0)})
        if hasattr(a, "memory_seconds"):
            out.memory_seconds = (1 - s) * a.memory_seconds + s * b.memory_seconds
        return out

    def _tiered3(self, op: Tiered) -> SimpleNamespace:
        """:meth:`_tiered` with a third tier's share: the op timed on each of the three tiers
        (:func:`~.placed.tier3_chip`), weighted by each tier's share of its off-chip bytes;
        ``dram3_bytes`` its third tier's share of the traffic."""
        for name, make in (("_tier2", tier2_chip), ("_tier3", tier3_chip)):
            if getattr(self, name) is None:
                setattr(self, name, _Timer(make(self.chip), self.sim, self.coll))
        a, b, c = self(op.inner), self._tier2(op.inner), self._tier3(op.inner)
        s2, s3 = op.dram2_share, op.dram3_share
        s1 = max(0.0, 1 - s2 - s3)
        ws = ((s1, a), (s2, b), (s3, c))

        def mix(get) -> float:
            return sum(w * get(t) for w, t in ws)

        seconds = mix(lambda t: t.seconds)
        keys = set(a.energy_parts) | set(b.energy_parts) | set(c.energy_parts)
        out = SimpleNamespace(**vars(a))
        out.__dict__.update(
            seconds=seconds, energy_j=mix(lambda t: t.energy_j),
            energy_parts={k: mix(lambda t: t.energy_parts.get(k, 0.0)) for k in keys},
            bound=max(ws, key=lambda x: x[0])[1].bound,
            utilization=(a.utilization * a.seconds / seconds
                         if a.utilization is not None and seconds else a.utilization),
            weight_bytes=0.0, tier1_bytes=s1 * a.dram_bytes, dram2_bytes=s2 * b.dram_bytes,
            dram3_bytes=s3 * c.dram_bytes, dram_bytes=mix(lambda t: t.dram_bytes),
            tier2_prefetch_bytes=op.prefetch_bytes, tier2_bandwidth=b.bandwidth,
            tier_s={"dram2": s2 * (b.seconds - a.seconds), "dram3": s3 * (c.seconds - a.seconds)},
            tier_j={"dram2": s2 * b.energy_parts.get("dram", 0.0),
                    "dram3": s3 * c.energy_parts.get("dram", 0.0)})
        if hasattr(a, "memory_seconds"):
            out.memory_seconds = mix(lambda t: t.memory_seconds)
        return out

    def _time(self, op) -> SimpleNamespace:
        if isinstance(op, Tiered):
            return self._tiered(op)
        chip = self.chip
        peak_bw = chip.dram_bytes_per_s
        if isinstance(op, Collective):
            secs = collective_seconds(op, chip) if self.coll is None else self.coll(op)
            link_j = collective_energy_j(op, chip)
            return SimpleNamespace(kind=op.kind, seconds=secs,
                                   compute_seconds=0.0, dram_bytes=0.0, vector_seconds=0.0,
                                   energy_j=link_j, energy_parts=EP.of(link=link_j),
                                   bound="communication",
                                   utilization=None, flops=0.0, bandwidth=0.0, unit="link",
                                   weight_bytes=0.0, link_bytes=op.bytes, dtype=None)
        if isinstance(op, FusedAttention):
            fs = fused_stats(op, chip, self.sim)
            return SimpleNamespace(kind="attention", seconds=fs.seconds,
                                   compute_seconds=fs.compute_seconds, dram_bytes=op.dram_bytes,
                                   vector_seconds=0.0, energy_j=fs.energy_j,
                                   energy_parts=fs.energy_parts, bound=fs.bound,
                                   utilization=fs.utilization, flops=fs.flops,
                                   bandwidth=min(fs.stream_bytes_per_s, peak_bw), unit="array",
                                   weight_bytes=0.0, dtype=op.compute_dtype,
                                   memory_seconds=fs.memory_seconds)
        gemm, vecs = (op.gemm, op.vector_ops) if isinstance(op, FusedOps) else (
            (op, ()) if isinstance(op, Gemm) else (None, (op,)))
        if gemm is None:
            st = self.sim(op, chip)
            # work its GEMM's matrix products wait out holds the arrays too (quant.py)
            held = HOLDS_ARRAY_TAG in getattr(op, "tags", ())
            return SimpleNamespace(kind=st.kind, seconds=st.seconds,
                                   compute_seconds=_compute_seconds(st, chip),
                                   dram_bytes=st.dram_read_bytes + st.dram_write_bytes,
                                   vector_seconds=st.seconds if held else 0.0,
                                   energy_j=st.energy_j,
                                   energy_parts=EP.of_stats(st), bound=st.bound,
                                   utilization=st.utilization, flops=st.flops,
                                   bandwidth=min(getattr(st, "dram_bytes_per_s", 0.0), peak_bw),
                                   unit="array" if held else "vector", weight_bytes=0.0,
                                   dtype=None,
                                   holds_dram=isinstance(op, VectorOp)
                                   and stream_fraction(op, chip) < 1.0)
        st = self.sim(gemm, chip)
        # a fused vector op only lends its ALU time (its bytes stay on the output path); on a
        # chip without DRAM it is timed with its bytes on chip
        vst = [self.sim(v if chip.has_dram else on_chip(v), chip) for v in vecs]
        vec_s = sum(_compute_seconds(v, chip) for v in vst)
        dram_b = st.dram_read_bytes + st.dram_write_bytes
        extra = getattr(op, "extra_dram_bytes", 0.0)
        seconds = max(st.seconds, vec_s)
        if extra:   # the epilogue's own DRAM traffic streams beside the GEMM's
            dram_b += extra
            seconds = max(seconds, dram_b / peak_bw)
        peak = chip.peak_ops_per_s[gemm.compute_dtype]
        return SimpleNamespace(
            kind="fused" if vecs else st.kind, seconds=seconds,
            compute_seconds=max(_compute_seconds(st, chip), vec_s),
            dram_bytes=dram_b, vector_seconds=vec_s,
            # the record lasts ``seconds``: static power over the part the GEMM's own stats
            # do not cover (a vector epilogue slower than its GEMM)
            energy_j=(st.energy_j + sum(_alu_energy(v) for v in vst)
                      + chip.energy.static_w * max(0.0, seconds - st.seconds)
                      + _bytes_energy_j(chip, extra)),
            energy_parts=_fused_parts(st, vst, chip, max(0.0, seconds - st.seconds), extra),
            bound=roof_regime(chip, seconds=seconds, mac_flops=gemm.flops,
                              dtype=gemm.compute_dtype,
                              vector_ops=sum(v.flops for v in vst), dram_bytes=dram_b),
            utilization=gemm.flops / (peak * seconds) if seconds else 0.0,
            flops=st.flops, vector_flops=sum(v.flops for v in vst),
            bandwidth=min(getattr(st, "dram_bytes_per_s", 0.0), peak_bw), unit="array",
            # the weights' element bytes, which the engine moves
            weight_bytes=(gemm.b_element_bytes
                          if "weight" in gemm.tags and gemm.b_source == "dram" else 0.0),
            dtype=gemm.compute_dtype)


def _launch(op, op_launch: float, coll_launch: Callable[[str], float],
            host_sync: float = 0.0) -> float:
    """An op's fixed issue cost: a collective's (``coll_launch(kind)``: none where its
    library's fixed latency holds it, :func:`~.links.collective_launch_seconds`), an op's
    (one launch per kernel it stands for, and ``host_sync`` per host synchronisation it
    makes: :mod:`diptych.workloads.host_work`), or none for the scale and dequant ops of
    :mod:`.quant` (they run inside their GEMM's kernel)."""
    if isinstance(op, Collective):
        return coll_launch(op.kind)
    if "precision" in getattr(op, "tags", ()):
        return 0.0
    return op_launch * kernel_count(op) + host_sync * host_sync_count(op)


def _block_launches(prog, bi: int, op_launch: float, coll_launch: Callable[[str], float],
                    host_sync: float = 0.0) -> dict[str, float]:
    """Launch seconds of each node of block ``bi`` per copy: :func:`_launch` of its op, except
    that the nodes of one launch group pay it once, on the first of them in the block's
    topological order (the scheduler's priority, so the first to start when they share their
    predecessors, as a layer's attention cores do)."""
    b = prog.blocks[bi]
    out: dict[str, float] = {}
    seen: set[str] = set()
    for ni in prog.order(bi):
        n = b.nodes[ni]
        g = launch_group(n.payload)
        if g is not None and g in seen:
            out[n.name] = 0.0
            continue
        if g is not None:
            seen.add(g)
        out[n.name] = _launch(n.payload, op_launch, coll_launch, host_sync)
    return out


def _shape(op) -> str:
    from .summed import _shape as shape
    if isinstance(op, FusedOps):
        return shape(op.gemm)
    return shape(op)


def _exposed(phases: dict, key) -> float:
    """Seconds during which node ``key``'s reserved (non-prefetch) phases run and no other
    simulated node's do: the time it alone holds up the step."""
    mine = [(s, e) for s, e, _, early in phases[key] if not early and e > s]
    if not mine:
        return 0.0
    lo, hi = min(s for s, _ in mine), max(e for _, e in mine)
    others = sorted((s, e) for k, ph in phases.items() if k != key
                    for s, e, _, early in ph if not early and e > lo and s < hi)
    total = 0.0
    for s, e in mine:
        cur = s
        for os_, oe in others:
            if oe <= cur or os_ >= e:
                continue
            if os_ > cur:
                total += os_ - cur
            cur = max(cur, oe)
            if cur >= e:
                break
        total += max(0.0, e - cur)
    return total


def _residency_view(res, block: str, node: str, repeat: int) -> list[dict]:
    v = res.node(block, node, repeat)
    return [{"tensor": a.tensor, "mode": a.mode, "location": a.location, "bytes": a.bytes}
            for a in v.accesses]


def _placed_pieces(w: Workload, chip, timer: "_Timer", fuse: bool,
                   dp_buckets: dict | None, tier2_kinds: frozenset = frozenset(),
                   tier3_share: float = 0.0) -> list:
    """Each program piece fused (when ``fuse``), planned for residency, split at its
    residency segments, and every node's op placed (its operands' locations) and timed:
    ``(piece, program, residency, origin, ops)``."""
    pieces = program_pieces(w, dp_buckets=dp_buckets)
    accesses = access_index(w)
    plans = []
    for piece in pieces:
        prog = (fuse_program(piece.program, chip.core.vector.gemm_fused_kinds) if fuse
                else piece.program)
        res = plan_residency(prog, chip, tier2_kinds=tier2_kinds)
        prog, origin = split_segments(prog, res)
        pinned = res.on_chip_bytes("scratchpad")
        ops = {}   # (block, node) → the op with its operands' locations (its segment's)
        for b in prog.blocks:
            ob, _, rep = origin[b.name]
            for n in b.nodes:
                nres = res.node(ob, n.name, rep)
                op = placed_op(n.payload, n, nres, accesses, pinned, chip.has_dram)
                share, share3 = nres.dram2_share, nres.dram3_share
                wb = tier2_weight_bytes(n.payload, n, nres, accesses)
                if tier3_share and share:   # offloaded state the second tier cannot hold
                    share, share3 = share * (1 - tier3_share), share3 + share * tier3_share
                    wb *= 1 - tier3_share
                if share > 0 or share3 > 0:   # some off-chip bytes live in a slower tier
                    op = Tiered(op, share, wb, dram3_share=share3)
                ops[(b.name, n.name)] = op
                timer(op)
        plans.append((piece, prog, res, origin, ops))
    return plans


def _schedule_piece(piece, prog, ops: dict, timer: "_Timer", space: int, stream: float,
                    launches: tuple[float, Callable[[str], float], float], sync: float):
    """List-schedule one piece's program: each node's demand from its timed op (a weight
    prefetch where it fits ``space``: from the first DRAM at its achieved stream, or, for
    weights in the second tier, at the tier's achieved stream, the highest the engine reached
    on it), its launch; returns (schedule, launch per node)."""
    stream2 = timer._tier2.stream if timer._tier2 is not None else 0.0
    demands = {}
    launch = {(b.name, k): v for bi, b in enumerate(prog.blocks)
              for k, v in _block_launches(prog, bi, *launches).items()}
    for b in prog.blocks:
        for n in b.nodes:
            t = timer(ops[(b.name, n.name)])
            pre = t.weight_bytes if 0 < t.weight_bytes <= space else 0.0
            hbm = getattr(t, "tier1_bytes", t.dram_bytes)   # the first DRAM's share
            w2 = getattr(t, "tier2_prefetch_bytes", 0.0)
            pre_s = None
            if 0 < w2 <= space and not pre and max(stream2, t.tier2_bandwidth) > 0:
                pre, pre_s = w2, w2 / max(stream2, t.tier2_bandwidth)
            # a kernel the stack runs below the copy rate (sim/vector.py stream_fraction)
            # holds the memory as the copy-rate kernel would: it is slow for want of issue
            # over every SM, not for want of DRAM that other work could take
            own = getattr(t, "holds_dram", False)
            demands[(b.name, n.name)] = op_demand(
                seconds=t.seconds, unit=t.unit, dram_bytes=hbm,
                stream_bytes_per_s=(t.bandwidth if own else max(stream, t.bandwidth))
                if hbm else None,
                compute_seconds=t.compute_seconds, prefetch_bytes=pre, prefetch_seconds=pre_s,
                launch_seconds=launch[(b.name, n.name)],
                co_seconds={"vector": t.vector_seconds} if t.vector_seconds else None)
    r = list_schedule(prog.with_demands(demands), space_bytes=space,
                      step_sync_seconds=sync if piece.step else 0.0,
                      in_order_units=in_order_units(timer.chip),
                      queued_units=queued_units(timer.chip))
    return r, launch


#: The node units one in-order stream runs under ``kernel_order = "issue"``: the compute
#: kernels (GEMMs and attention on the arrays, vector ops); collectives (``link``: NCCL's own
#: streams) and DMA transfers (copy engines) stay beside them.
STREAM_UNITS = ("array", "vector")


def in_order_units(chip) -> tuple[str, ...]:
    """The node units the list schedule runs on one in-order stream on ``chip``
    (:data:`STREAM_UNITS` under ``[overheads] kernel_order`` ``issue`` or ``one_queue``, else
    none)."""
    return STREAM_UNITS if chip_kernel_order(chip) in ("issue", "one_queue") else ()


def queued_units(chip) -> tuple[str, ...]:
    """The node units the list schedule dispatches in program order from one hardware queue
    on ``chip`` (every unit under ``[overheads] kernel_order = "one_queue"``, else none)."""
    return NODE_UNITS if chip_kernel_order(chip) == "one_queue" else ()


class _Totals:
    """What the pieces of a scheduled workload add up to: time, energy, DRAM bytes, fixed
    costs, time by bound, per-resource busy time, the per-op records (first seen, counts
    summed), the timeline and each piece's summary."""

    def __init__(self):
        self.total = self.energy = self.dram = self.launches = self.syncs = 0.0
        self.dram2 = 0.0
        self.dram3 = 0.0
        self.tier_s: dict = {}      # per slower tier: what it adds to the ops' time (s)
        self.tier_j: dict = {}      # and its bytes' DRAM energy (J)
        self.parts = EP.zero()
        self.t_compute = self.t_mem = self.t_lat = self.t_comm = 0.0
        self.offset = 0.0
        self.busy: dict = {}
        self.records: dict = {}
        self.order: list = []
        self.timeline: list = []
        self.summary: list = []

    def add_piece(self, piece, prog, r) -> float:
        """The piece's time, sync, busy time and summary; returns its length (one run)."""
        length = r.makespan_s + r.step_sync_s
        self.total += piece.times * length
        self.syncs += piece.times * r.step_sync_s
        for k, v in r.busy_s.items():
            self.busy[k] = self.busy.get(k, 0.0) + piece.times * v
        off = self.offset
        self.summary.append({
            "program": prog.name, "label": piece.label, "times": piece.times,
            "makespan_s": r.makespan_s, "step_sync_s": r.step_sync_s, "start_s": off,
            "blocks": [{"block": bt.name, "repeat": bt.repeat, "start_s": off + bt.start_s,
                        "end_s": off + bt.end_s, "simulated_repeats": bt.simulated_repeats,
                        "period_s": bt.period_s, "representative": bt.representative}
                       for bt in r.blocks]})
        return length

    def add_timeline(self, piece, prog, origin: dict, r, stage: dict) -> None:
        """The simulated node phases of the piece, for the trace."""
        off = self.offset
        for key, ph in r.phases.items():
            blk = next(b for b in prog.blocks if b.name == key[0])
            node = next(n for n in blk.nodes if n.name == key[2])
            self.timeline.append({"block": key[0], "repeat": key[1], "op": key[2],
                                  "unit": node.unit,
                                  "stage": stage.get(origin[key[0]][0], "forward"),
                                  "piece": piece.label,
                                  "phases": [(off + s, off + e, lab, early)
                                             for s, e, lab, early in ph]})

    def add_records(self, piece, prog, res, origin: dict, ops: dict, r, timer: "_Timer",
                    launch: dict, stage: dict) -> None:
        """Every node's totals and its per-op record (merged with an earlier piece's)."""
        for b, bt in zip(prog.blocks, r.blocks):
            count = b.repeat * piece.times
            for n in b.nodes:
                op = ops[(b.name, n.name)]
                t = timer(op)
                op_launch_s = launch[(b.name, n.name)]
                self.launches += op_launch_s * count
                self.energy += t.energy_j * count
                EP.add(self.parts, t.energy_parts, count)
                self.dram += t.dram_bytes * count
                self.dram2 += getattr(t, "dram2_bytes", 0.0) * count
                self.dram3 += getattr(t, "dram3_bytes", 0.0) * count
                for k, v in getattr(t, "tier_s", {}).items():
                    self.tier_s[k] = self.tier_s.get(k, 0.0) + v * count
                    self.tier_j[k] = self.tier_j.get(k, 0.0) + t.tier_j[k] * count
                if t.bound == "communication":
                    pass
                elif t.bound == "memory":
                    self.t_mem += t.seconds * count
                elif t.bound == "latency":
                    self.t_lat += t.seconds * count
                else:
                    self.t_compute += t.seconds * count
                key = (b.name, n.name)
                rep = bt.representative
                start, end = r.nodes[(b.name, rep, n.name)]
                exposed = _exposed(r.phases, (b.name, rep, n.name))
                if t.bound == "communication":
                    self.t_comm += exposed * count
                rec = self.records.get(key)
                if rec is not None:
                    rec["repeat"] += count
                    rec["total_seconds"] = rec["seconds"] * rec["repeat"]
                    rec["exposed_total_s"] += exposed * count
                    continue
                ob, s0, _ = origin[b.name]
                self.records[key] = _record(getattr(op, "inner", op) if isinstance(op, Tiered)
                                            else op, n, t, b.name, stage.get(ob, "optimizer"),
                                            count,
                                            self.offset + start, self.offset + end, exposed,
                                            op_launch_s, _residency_view(res, ob, n.name, s0 + rep))
                self.order.append(key)


def _record(op, n, t, block: str, stage: str, count: int, start: float, end: float,
            exposed: float, launch_s: float, residency: list) -> dict:
    """One op's record in a scheduled run's ``layers``."""
    rec = {"op": n.name, "kind": t.kind, "shape": _shape(op), "seconds": t.seconds,
           "bound": t.bound, "utilization": t.utilization, "flops": t.flops,
           "dram_bytes": t.dram_bytes, "energy_j": t.energy_j,
           "energy_breakdown_j": dict(t.energy_parts),
           "block": block, "stage": stage,
           "repeat": count, "total_seconds": t.seconds * count,
           "start_s": start, "end_s": end, "exposed_s": exposed,
           "exposed_total_s": exposed * count, "launch_s": launch_s,
           "residency": residency}
    if t.dtype:
        rec["dtype"] = t.dtype
    if getattr(t, "dram2_bytes", 0.0):
        rec["dram2_bytes"] = t.dram2_bytes
    if getattr(t, "dram3_bytes", 0.0):
        rec["dram3_bytes"] = t.dram3_bytes
    if isinstance(op, Collective):
        rec["link_bytes"] = op.bytes
    if isinstance(op, FusedOps):
        rec["fused"] = [o.name for o in op.ops]
        rec["vector_flops"] = t.vector_flops
    if isinstance(op, FusedAttention):
        rec.update(compute_seconds=t.compute_seconds, memory_seconds=t.memory_seconds,
                   stream_bytes_per_s=t.bandwidth)
    return rec


def _split3(held: dict, share: float) -> dict:
    """``held`` (bytes by tier, or by tier then kind) with a share ``share`` of the second
    tier's moved to the third (an offload the second cannot hold, :func:`schedule_workload`)."""
    if not share or "dram2" not in held:
        return held
    out = dict(held)
    two = out["dram2"]
    if isinstance(two, dict):
        three = dict(out.get("dram3") or {})
        out["dram2"] = {k: v - int(v * share) for k, v in two.items()}
        for k, v in two.items():
            three[k] = three.get(k, 0) + int(v * share)
        out["dram3"] = three
    else:
        out["dram2"] = two - int(two * share)
        out["dram3"] = out.get("dram3", 0) + int(two * share)
    return out


def _tier_bytes(plans) -> dict[str, int]:
    """State bytes each DRAM tier holds, over the pieces' residency plans (the largest piece
    per tier: the pieces run one after another)."""
    out: dict = {}
    for _, _, res, _, _ in plans:
        for k, v in res.dram_tier_bytes().items():
            out[k] = max(out.get(k, 0), v)
    return out


def _tier_kinds(plans) -> dict[str, dict[str, int]]:
    """:func:`_tier_bytes` by tensor kind (the largest piece per tier and kind)."""
    out: dict = {}
    for _, _, res, _, _ in plans:
        for tier, kinds in res.dram_tier_kinds().items():
            d = out.setdefault(tier, {})
            for k, v in kinds.items():
                d[k] = max(d.get(k, 0), v)
    return out


def schedule_workload(w: Workload, chip, *, simulate: Callable, fusion: bool = True,
                      dp_buckets: dict | None = None,
                      collective_time: Callable | None = None,
                      tier2_kinds: frozenset = frozenset(), tier3_share: float = 0.0
                      ) -> dict:
    """Time ``w`` on ``chip`` as a schedule of its programs (module docstring). Returns the
    totals :func:`~diptych.sim.run.summed.simulate_workload` returns (``seconds``,
    ``energy_j`` and ``energy_breakdown_j``, ``dram_bytes``, ``layers``, ``compute_seconds``,
    ``memory_bound_seconds``,
    ``latency_bound_seconds``,
    ``communication_seconds``) plus ``fixed_costs_s`` (launches + step syncs), ``launch_s``,
    ``step_sync_s``, ``utilization`` (per resource, over the step), ``timeline`` (the
    simulated node phases, for the trace) and ``pieces`` (each program's time and count).
    ``collective_time(op)``: a collective's seconds (default: the chip's own links,
    :func:`~diptych.sim.run.links.collective_seconds`; the cluster step times its
    tensor-parallel collectives on the topology, :mod:`diptych.sim.cluster.timing`).
    ``tier2_kinds``: tensor kinds the residency plan puts in the second DRAM tier whatever
    room the first has (a training offload, :mod:`diptych.sim.run.offload`); ``tier3_share``:
    the share of that offloaded state in the third tier (the second cannot hold it all,
    :func:`~diptych.sim.run.offload.third_tier_share`): every op's second-tier share is split,
    that share of it streaming from the third tier, and the tiers' held bytes likewise."""
    fc = chip.fixed_costs
    launches = (fc.op_launch_us * 1e-6, lambda kind: collective_launch_seconds(kind, chip),
                fc.host_sync_us * 1e-6)
    sync = fc.step_sync_us * 1e-6
    fuse = (fusion and chip.core.vector.on_array_output_path
            and bool(chip.core.vector.gemm_fused_kinds))
    timer = _Timer(chip, simulate, collective_time)
    stage = {b.name: b.stage for b in w.blocks}
    cap = capacities(chip)
    prefetch_ok = "weight" in cap.scratchpad_kinds
    plans = _placed_pieces(w, chip, timer, fuse, dp_buckets, tier2_kinds, tier3_share)
    stream = timer.stream or chip.dram_bytes_per_s
    acc = _Totals()
    for piece, prog, res, origin, ops in plans:
        space = max(0, cap.scratchpad - res.on_chip_bytes("scratchpad")) if prefetch_ok else 0
        r, launch = _schedule_piece(piece, prog, ops, timer, space, stream, launches, sync)
        length = acc.add_piece(piece, prog, r)
        acc.add_timeline(piece, prog, origin, r, stage)
        acc.add_records(piece, prog, res, origin, ops, r, timer, launch, stage)
        acc.offset += piece.times * length
    total = acc.total
    return {"seconds": total, "energy_j": acc.energy, "energy_breakdown_j": acc.parts,
            "dram_bytes": acc.dram,
            **({"dram2_bytes": acc.dram2,
                "dram_tiers": _split3(_tier_bytes(plans), tier3_share),
                "dram_tier_kinds": _split3(_tier_kinds(plans), tier3_share),
                "tier_added_s": dict(acc.tier_s),
                "tier_energy_j": dict(acc.tier_j)} if acc.dram2 or acc.dram3 else {}),
            **({"dram3_bytes": acc.dram3} if acc.dram3 else {}),
            "layers": [acc.records[k] for k in acc.order],
            "compute_seconds": acc.t_compute, "memory_bound_seconds": acc.t_mem,
            "latency_bound_seconds": acc.t_lat,
            "communication_seconds": acc.t_comm, "fixed_costs_s": acc.launches + acc.syncs,
            "launch_s": acc.launches, "step_sync_s": acc.syncs,
            "utilization": {k: v / total if total else 0.0 for k, v in acc.busy.items()},
            "timeline": acc.timeline, "pieces": acc.summary, "fused": fuse,
            "stream_bytes_per_s": stream}
