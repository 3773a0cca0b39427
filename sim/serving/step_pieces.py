"""A serving step's pieces, simulated once each: what the grid step timer tabulates.

:class:`StepPieces` times, for one :class:`~diptych.sim.serving.step_time.Replica`, the
frame of a step (embedding, layer blocks without their attention, head) at ``n`` tokens and
``rows`` logits rows, per block (compute, collectives, energy; for ``execution="schedule"``
the scheduled nodes and the schedule's overlap), and the attention cores of a decode batch
or a prefill chunk per layer kind (non-fused time, fused compute and memory terms, energy);
every piece is one simulation, memoised. :mod:`diptych.sim.serving.grid_timer` interpolates
between them.

Each tuple ends with its energy by component (:data:`diptych.sim.energy_parts.VECTOR`,
repeats included): a frame's for its blocks but the head, then for the head; the cores' over
every layer kind (per token as their energy is). Interpolated with the same weights as the
energies, they sum to the interpolated energy.
"""

from __future__ import annotations

from collections.abc import Callable

from ...workloads.serving_step import (CORE_OPS, Step, base_name, decode_cores, frame,
                                       prefill_cores)
from ..run.precision_ops import with_precision_ops
from ..run.summed import block_costs, launch_seconds
from .. import energy_parts as EP
from .piece_cache import PieceStore
from .step_time import Replica

#: Entries of an energy-by-component vector.
_NV = len(EP.VECTOR)


def _of_core(name: str) -> bool:
    """Whether a schedule node belongs to the step's cores: a core, or a precision op of a
    core GEMM (``<gemm>.scales``/``.rescale``/``.dequant``, sim/run/precision_ops.py)."""
    return base_name(name) in CORE_OPS or base_name(name.rsplit(".", 1)[0]) in CORE_OPS


def _origin(block: str, names) -> str:
    """The workload block a schedule record belongs to: itself, or the block a residency
    segment ``name[a:b]`` was cut from (its repeats a to b)."""
    if block in names:
        return block
    head, bracket, tail = block.rpartition("[")
    if bracket and head in names and tail.endswith("]"):
        return head
    raise KeyError(f"schedule record of unknown block {block!r}")


class StepPieces:
    """The pieces of a replica's serving steps, each simulated once and memoised: the frame
    (every block but the attention cores) at a number of tokens and logits rows, and the
    attention cores of a decode batch or a prefill chunk, per layer kind; with the tuples'
    layouts and their reductions to seconds. ``simulations`` counts the pieces simulated or
    read back from the user's cache (:mod:`~diptych.sim.serving.piece_cache`; the same
    count either way, ``store.hits`` of them read back; ``progress(simulations)`` is told
    after each)."""

    def __init__(self, replica: Replica, simulate: Callable | None = None,
                 progress: Callable[[int], None] | None = None):
        self.replica = replica
        self._scheduled = replica.execution == "schedule"
        self._simulate = replica.timer(simulate)
        self._frame: dict[tuple[int, int], tuple] = {}
        self._dec: dict[tuple[int, int, int], tuple] = {}
        self._pf: dict[tuple[int, int], tuple] = {}
        self._kind_reps: list[int] | None = None
        self._progress = progress
        self.simulations = 0
        self._blocks: list[tuple[str, int]] | None = None
        self._kinds: list[str] | None = None
        self._names: dict = {}
        self._launches: dict[tuple, list[float]] = {}
        self._head_precision: bool | None = None
        #: the pieces persisted in the user's cache (engine step times only)
        self.store = PieceStore(replica, simulate)

    @property
    def blocks(self) -> list[tuple[str, int]]:
        """(name, repeat) of the frame's blocks (once a frame has been simulated)."""
        return self._blocks

    def tick(self):
        self.simulations += 1
        if self._progress is not None:
            self._progress(self.simulations)

    def frame_at(self, n: int, rows: int = 1) -> tuple:
        """The frame at ``n`` tokens and ``rows`` logits rows: a vertex of the token axis
        with one row (its head is not used: the head's rows have their own axis,
        :meth:`head_at`; the other blocks do not depend on the rows, in a schedule
        either, residency included: tests)."""
        if self._scheduled and rows != n and self.head_has_precision_ops():
            rows = n
        got = self._frame.get((n, rows))
        if got is None:
            got, blocks = self.store.get("frame", (n, rows), lambda: self._frame_sim(n, rows),
                                         lambda: self._blocks)
            if blocks is not None:        # read back: the blocks a simulation would set
                if self._blocks is None:
                    self._blocks = blocks
                if self._scheduled:       # and the cores a simulated frame times (the
                    self.dec_exact(n, n, 1)   # count of pieces is the cache's to keep)
            self._frame[(n, rows)] = got
            self.tick()
        return got

    def _frame_sim(self, n: int, rows: int) -> tuple:
        """The frame at ``n`` tokens and ``rows`` logits rows, simulated (:meth:`frame_at`)."""
        r = self.replica
        if self._scheduled:
            return self.scheduled_frame(n, rows)
        w = r.frame_workload(n, rows)
        bc = block_costs(w, r.chip, self._simulate, fixed_costs=r.fixed_costs,
                         collective_time=r.collective_time)
        if self._blocks is None:
            self._blocks = [(b.name, b.repeat) for b in bc]
        return tuple(x for b in bc for x in (b.compute_s, b.comm_s, b.energy_j)) \
            + _frame_parts((b.name, EP.scaled(b.energy_breakdown_j, b.repeat)) for b in bc)

    def head_has_precision_ops(self) -> bool:
        """Whether the chip runs precision ops beside the head (block scales, quantisation,
        dequantisation: :func:`~diptych.sim.run.precision_ops.with_precision_ops`). In a schedule
        they may overlap the layers' work by an amount that grows with the logits rows, so
        the schedule's overlap then depends on the rows and a token-axis vertex is the
        frame of ``n`` tokens and ``n`` rows (exact for decode-only steps, as before the
        rows axis); without them the overlap does not depend on the rows (measured on h100,
        tpu-v5e, infer-2026) and a vertex has one row."""
        if self._head_precision is None:
            r = self.replica
            w = frame(r.model, 1, 1, precision=r.precision, tp=r.tp, attention=r.attention,
                      sampler=r.sampler)
            wp = with_precision_ops(w, r.chip)
            self._head_precision = any(a is not b for a, b in zip(w.blocks, wp.blocks)
                                       if a.name == "head")
        return self._head_precision

    def head_at(self, rows: int) -> tuple:
        """A vertex of the logits-rows axis: the frame of ``rows`` tokens and rows (its
        head entries are used; its other ops are those of the token axis's vertex at
        ``rows``, memoised per op)."""
        return self.frame_at(rows, rows)

    def scheduled_frame(self, n: int, rows: int) -> tuple:
        """The frame at ``n`` tokens and ``rows`` logits rows as the program scheduler
        times it: per block, the nodes' time (launch + run) and energy per copy, the cores
        left out; then the schedule's overlap ``H`` (the nodes' time less the makespan) of
        the step of ``n`` one-token decode sequences (``rows`` of them sampled), which the
        frame's vertices measure for every step."""
        from ..run.scheduled import schedule_workload
        from ..run.node import _default_simulate

        r = self.replica
        w = r.step_workload(Step(n, n, logits_rows=rows))
        t = schedule_workload(w, r.chip, simulate=self._simulate or _default_simulate(),
                              fusion=r.fusion, collective_time=r.collective_time)
        if self._blocks is None:
            self._blocks = [(b.name, b.repeat) for b in w.blocks]
        run = {b.name: 0.0 for b in w.blocks}       # all copies of each block
        energy = dict(run)
        parts = {b.name: EP.zero() for b in w.blocks}
        for rec in t["layers"]:
            if not any(_of_core(x) for x in rec.get("fused", [rec["op"]])):
                block = _origin(rec["block"], run)
                run[block] += (rec["seconds"] + rec["launch_s"]) * rec["repeat"]
                energy[block] += rec["energy_j"] * rec["repeat"]
                EP.add(parts[block], rec["energy_breakdown_j"], rec["repeat"])
        # the cores as the step timer times them (their table, one launch per node): the overlap
        # then also holds how the schedule's cores differ from the table at this vertex
        cores = self.core_seconds(self.dec_exact(n, n, 1)) + sum(
            rep * launch for rep, launch in zip(self.kind_repeats, self.launches(Step(n, n))))
        overlap = sum(run.values()) + cores + t["step_sync_s"] - t["seconds"]
        return tuple(x for b in w.blocks for x in (run[b.name] / b.repeat, 0.0,
                                                   energy[b.name] / b.repeat)) + (overlap,) \
            + _frame_parts(parts.items())

    @property
    def kinds(self) -> list[str]:
        """The layer blocks (one per layer kind), in the frame's order."""
        if self._kinds is None:
            r = self.replica
            w = frame(r.model, 1, 1, precision=r.precision, tp=r.tp, attention=r.attention)
            self._kinds = [b.name for b in w.blocks if b.name not in ("embedding", "head")]
        return self._kinds

    def core_ops(self, key: tuple) -> dict[str, tuple]:
        """Per layer kind, the op names of one group's cores: ``("d", queries)`` a decode
        batch, ``("p", has_past)`` a prefill chunk."""
        got = self._names.get(key)
        if got is None:
            r = self.replica
            m, p, a = r.model, r.precision, r.attention
            cores = (decode_cores(m, 1, 1 + key[1], key[1], precision=p, tp=r.tp,
                                  attention=a) if key[0] == "d" else
                     prefill_cores(m, 1, int(key[1]), 1, precision=p, tp=r.tp, attention=a))
            got = self._names[key] = {k: tuple(o.name for o in ops) for k, ops in cores.items()}
        return got

    def launches(self, step: Step) -> list[float]:
        """Per layer kind: launch seconds of the cores of ``step``: one per distinct op, the
        sequence groups' records of an op being one varlen kernel (in a schedule their
        launch group, :func:`~diptych.workloads.serving_step.lower_step`; in the summed model the
        stand-in of :func:`~diptych.sim.run.summed.block_costs`)."""
        r = self.replica
        if not r.fixed_costs:
            return [0.0] * len(self.kinds)
        keys = []
        if step.decode_batch:
            keys.append(("d", step.decode_queries))
        keys += [("p", past > 0) for _, past in step.prefill]
        keys = tuple(dict.fromkeys(keys))
        got = self._launches.get(keys)       # a function of the groups' kinds alone
        if got is None:
            op_s = launch_seconds(r.chip)[0]
            names = {k: set() for k in self.kinds}
            for key in keys:
                for k, ops in self.core_ops(key).items():
                    names[k] |= set(ops)
            got = self._launches[keys] = [len(names[k]) * op_s for k in self.kinds]
        return got

    def core(self, cores: dict, per_token: int = 0) -> tuple:
        """Per layer kind: (seconds of the non-fused ops, fused compute term, fused memory
        term, energy); with ``per_token`` the compute term and the energy divided by it;
        then the energy of every layer kind's cores by component (module docstring)."""
        got = self._core(cores, per_token)
        self.tick()
        return got

    def _core(self, cores: dict, per_token: int = 0) -> tuple:
        r = self.replica
        by = {b.name: b for b in block_costs(r.cores_workload(cores), r.chip, self._simulate,
                                             collective_time=r.collective_time)}
        out: list[float] = []
        parts = EP.zero()
        for name, rep in zip(self.kinds, self.kind_repeats):
            b = by[name]
            fused = max(b.attention_compute_s, b.attention_memory_s)
            c, e = b.attention_compute_s, b.energy_j
            if per_token:
                c, e = c / per_token, e / per_token
            out += [b.compute_s - fused, c, b.attention_memory_s, e]
            EP.add(parts, b.energy_breakdown_j, rep / per_token if per_token else rep)
        return tuple(out) + EP.as_vector(parts)

    def dec_at(self, batch: int, keys: int, q: int) -> tuple:
        """The decode cores at a vertex: ``keys`` per sequence."""
        return self.dec_exact(batch, batch * keys, q)

    def pf_at(self, chunk: int, past: int) -> tuple:
        k = (chunk, past)
        got = self._pf.get(k)
        if got is None:
            r = self.replica
            # per query token: compute and energy grow as chunk·(past + chunk/2)
            got = self._pf[k] = self.store.get("prefill", k, lambda: self._core(prefill_cores(
                r.model, chunk, past, 1, precision=r.precision, tp=r.tp,
                attention=r.attention), per_token=chunk))[0]
            self.tick()
        return got

    @property
    def kind_repeats(self) -> list[int]:
        """Layers of each layer kind (the frame's blocks' repeats)."""
        if self._kind_reps is None:
            blocks = self._blocks
            if blocks is None:        # no frame simulated yet: the lowering's layer counts
                r = self.replica
                w = frame(r.model, 1, 1, precision=r.precision, tp=r.tp,
                          attention=r.attention)
                blocks = [(b.name, b.repeat) for b in w.blocks]
            self._kind_reps = [rep for name, rep in blocks if name in self.kinds]
        return self._kind_reps

    def overlap(self, v: tuple) -> float:
        """A frame tuple's schedule overlap (0 for the summed model)."""
        return v[3 * len(self._blocks)] if self._scheduled else 0.0

    def frame_parts(self, v: tuple, head: bool) -> tuple:
        """A frame tuple's energy by component (:data:`~diptych.sim.energy_parts.VECTOR`,
        repeats included): of its head (``head``) or of its other blocks."""
        at = 3 * len(self._blocks) + (1 if self._scheduled else 0) + (_NV if head else 0)
        return v[at:at + _NV]

    def core_parts(self, v: tuple) -> tuple:
        """A core tuple's energy by component over every layer kind (per token when the
        tuple is)."""
        at = 4 * len(self.kinds)
        return v[at:at + _NV]

    def core_seconds(self, v, tokens: int = 1) -> float:
        """A core tuple's time over all layers (``tokens``: the chunk of a per-token tuple)."""
        return sum(rep * (v[4 * k] + max(v[4 * k + 1] * tokens, v[4 * k + 2]))
                   for k, rep in enumerate(self.kind_repeats))

    def frame_seconds(self, v: tuple) -> float:
        """A frame tuple's time without the head (the other blocks, repeats included, less
        a schedule's overlap): what the token axis's refinement compares."""
        t = sum(rep * (v[3 * i] + v[3 * i + 1]) for i, (name, rep) in enumerate(self._blocks)
                if name != "head")
        return t - self.overlap(v) if self._scheduled else t

    def head_seconds(self, v: tuple) -> float:
        """A frame tuple's head time: what the rows axis's refinement compares."""
        return sum(rep * (v[3 * i] + v[3 * i + 1]) for i, (name, rep) in enumerate(self._blocks)
                   if name == "head")

    def dec_exact(self, batch: int, keys: int, q: int) -> tuple:
        """The decode cores of ``batch`` sequences holding ``keys`` keys in all."""
        k = (batch, keys, q)
        got = self._dec.get(k)
        if got is None:
            r = self.replica
            got = self._dec[k] = self.store.get("decode", k, lambda: self._core(decode_cores(
                r.model, batch, keys, q, precision=r.precision, tp=r.tp,
                attention=r.attention)))[0]
            self.tick()
        return got


def _frame_parts(blocks) -> tuple:
    """The energy-by-component vectors of a frame (module docstring): ``(block name, its
    parts over all its copies)`` summed over the blocks but the head, then the head's."""
    body, head = EP.zero(), EP.zero()
    for name, parts in blocks:
        EP.add(head if name == "head" else body, parts)
    return EP.as_vector(body) + EP.as_vector(head)
