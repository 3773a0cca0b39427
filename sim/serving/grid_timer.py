"""The grid step timer: a serving step's cost interpolated between lazily simulated pieces.

:class:`GridStepTimer` splits a step into its frame and its attention cores
(:func:`~diptych.workloads.serving_step.step_parts`), has their pieces simulated at the
vertices of grids (:class:`~diptych.sim.serving.step_pieces.StepPieces`), lazily (a vertex is
simulated the first time a step needs it), and interpolates
(:mod:`~diptych.sim.serving.lazy_grid`):

- frame, per block (compute, collectives, energy): piecewise linear in the step's tokens
  ``N`` (embedding and layer blocks) and, on an axis of its own, in its logits rows (the
  head), both refined where the engine's time is a staircase
  (:class:`~diptych.sim.serving.lazy_grid.RefinedAxis`);
- decode cores: bilinear in (decode batch, keys per sequence) per ``decode_queries``, the
  keys axis refined where a staircase could move the step (:meth:`GridStepTimer._decode_interp`);
- prefill cores: bilinear in (chunk, past), per chunk: the fused record's compute term
  divided by the chunk (exact for the causal ``chunk·(past + (chunk+1)/2)`` work), its
  memory term as is (exact for the linear K/V traffic);
- a core whose cell is rough (its simulated centre off the interpolant) where that could
  move the step by ``refine_tol`` is simulated at the query itself.

The pieces are recombined with the step's rule: the summed model's block rule
(:func:`~diptych.sim.run.summed.combine_parts`), or for ``execution="schedule"`` the frame's
scheduled nodes plus the cores' nodes (run + launch) less the schedule's overlap measured at
the frame's vertices. So with every quantity linear between vertices the timer equals direct
simulation (:class:`~diptych.sim.serving.step_time.DirectStepTimer`); docs/serving.md gives
the measured error. The energy by component (``StepCost.parts``) is interpolated with the
same weights as the energy (each piece carries it, :mod:`~diptych.sim.serving.step_pieces`),
so it sums to the interpolated energy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...workloads.serving_step import Step, core_op_names, step_parts
from ..run.precision_ops import with_precision_ops
from ..run.summed import (block_costs, combine_energy_parts, combine_parts, launch_seconds,
                          step_sync_seconds)
from .. import energy_parts as EP
from .lazy_grid import (Axis, RefinedAxis, bilinear, bilinear_in, centre_gap, coarse_start,
                        descend, geometric_axis, lerp)
from .step_pieces import StepPieces
from .step_time import DirectStepTimer, Replica, StepCost


@dataclass(frozen=True)
class GridSpec:
    """Vertex spacing of a :class:`GridStepTimer` (ratios between neighbouring vertices above
    the dense ranges). ``max_tokens`` bounds the token and chunk axes, ``max_keys`` the
    context axes, ``max_batch`` the decode-batch axis."""

    token_ratio: float = 1.06
    #: the decode batch: the engine's decode cores are linear in it (its sequences are copies
    #: of one GEMM shape; docs/serving.md "Interpolation error" measures the error), so a
    #: coarse axis (1 and 4, :attr:`batch_low_ratio`, then doubling) interpolates them as
    #: well as ×1.12 did, with a third of the vertices a serve needs (issue 24 item 4)
    batch_ratio: float = 2.0
    keys_ratio: float = 1.12
    chunk_ratio: float = 1.12
    past_ratio: float = 1.2
    token_dense: int = 32
    #: below ``token_dense`` the token and rows axes start coarse (1, 2, 4, …, ``token_dense``:
    #: this ratio) and are refined where a query lands (:class:`RefinedAxis`), instead of a
    #: vertex at every integer; with ``refine_tol`` None they are every integer there
    token_low_ratio: float = 2.0
    batch_dense: int = 4
    #: below ``batch_dense`` the batch axis starts coarse too (1, then ``batch_dense``: this
    #: ratio), its cells halved by their measured gap where that could move the step
    #: (:meth:`GridStepTimer._batch_gap`), instead of a vertex at every integer: each batch
    #: vertex is a column of keys vertices, and a lightly loaded serve (the examples' trace:
    #: 4,216 of its 5,636 step signatures have 1 to 3 sequences) paid a column per batch
    #: (issue 24 item 4); with ``refine_tol`` None the batch is every integer there
    batch_low_ratio: float = 4.0
    max_tokens: int = 1 << 20
    max_keys: int = 1 << 22
    max_batch: int = 1 << 16
    #: adaptive refinement of the token and rows axes (the frame, the head): a cell a query
    #: falls in is used only once its midpoint, simulated, agrees with the cell's linear
    #: interpolant to this fraction of the piece's time; otherwise it is halved, down to
    #: neighbouring integers. The same fraction of the step bounds the decode cores' keys
    #: cells (:meth:`GridStepTimer._decode_interp`) and the rough prefill cores
    #: (:meth:`GridStepTimer._trusted`). None: the fixed vertices only.
    refine_tol: float | None = 0.005

    def __post_init__(self):
        for f in ("token_ratio", "batch_ratio", "keys_ratio", "chunk_ratio", "past_ratio",
                  "token_low_ratio", "batch_low_ratio"):
            v = getattr(self, f)
            if not 1.0 < v <= 4.0:
                raise ValueError(f"{f} must be in (1, 4], not {v!r}")
        t = self.refine_tol
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not 0.0 < t < 0.5):
            raise ValueError(f"refine_tol must be None or a fraction in (0, 0.5), not {t!r}")


class GridStepTimer:
    """Interpolating step timer over lazily simulated grid vertices (module docstring)."""

    def __init__(self, replica: Replica, simulate: Callable | None = None,
                 grid: GridSpec | None = None, progress: Callable[[int], None] | None = None):
        if replica.execution == "schedule" and replica.attention != "fused":
            raise ValueError(f"the grid oracle times scheduled steps with fused attention "
                             f"(its cores are then nodes of their own); with attention "
                             f"{replica.attention!r} use the direct oracle (--oracle direct)")
        self.replica = replica
        self._scheduled = replica.execution == "schedule"
        self.pieces = pc = StepPieces(replica, simulate, progress)
        g = grid or GridSpec()
        self.grid = g
        tok = geometric_axis(g.token_dense, g.token_ratio, g.max_tokens)
        if g.refine_tol is not None:      # coarse below token_dense, refined where queried
            tok = coarse_start(tok, g.token_dense, g.token_low_ratio)
        self._tok = (Axis(tok, "step tokens") if g.refine_tol is None else
                     RefinedAxis(tok, "step tokens", pc.frame_at, pc.frame_seconds,
                                 g.refine_tol))
        # the head (logits rows) on an axis of its own: a step's rows are its decode queries
        # and completed prompts, mostly far fewer than its tokens, and the head's GEMM (the
        # vocabulary) is the largest of the frame
        self._rows = (Axis(list(tok), "logits rows") if g.refine_tol is None else
                      RefinedAxis(tok, "logits rows", pc.head_at, pc.head_seconds,
                                  g.refine_tol))
        bat = geometric_axis(g.batch_dense, g.batch_ratio, g.max_batch)
        if g.refine_tol is not None:      # coarse below batch_dense, halved where it matters
            bat = coarse_start(bat, g.batch_dense, g.batch_low_ratio)
        self._bat = Axis(bat, "decode batch")
        self._keys = Axis(geometric_axis(16, g.keys_ratio, g.max_keys), "keys per sequence")
        self._chunk = Axis(geometric_axis(16, g.chunk_ratio, g.max_tokens), "prefill chunk")
        self._past = Axis(geometric_axis(16, g.past_ratio, g.max_keys, start=0), "past")
        self._rough: dict = {}
        self._gaps: dict[tuple[int, int, int], float] = {}
        self._bgaps: dict[tuple[int, int, int], float] = {}
        self._gap_keys = min(self._keys.pts, key=lambda k: abs(k - self.BATCH_GAP_KEYS))
        self._noise: float | None = None
        self._memo: dict[tuple, StepCost] = {}

    @property
    def simulations(self) -> int:
        """Pieces simulated so far (vertices, cell centres, queries simulated exactly)."""
        return self.pieces.simulations

    @property
    def kinds(self) -> list[str]:
        """The layer blocks (one per layer kind), in the frame's order."""
        return self.pieces.kinds

    def _roughness(self, fn, cell, extra, per_token: bool) -> float:
        """How far a core cell is from bilinear: the relative gap, in the cores' time,
        between the cell's centre simulated and its interpolant (one simulation per cell,
        memoised; 0 for a cell without an interior point)."""
        key = (fn.__name__, cell, extra)
        got = self._rough.get(key)
        if got is None:
            got = self._rough[key] = centre_gap(fn, cell, extra, self.pieces.core_seconds,
                                                per_token)
        return got

    #: The prefill cells that measure the mapper's noise for :meth:`_trusted`: those
    #: holding these (chunk, past) points, short and long chunks after short and long pasts.
    NOISE_PROBES = ((256, 1024), (256, 8192), (1024, 1024), (1024, 8192))

    def _prefill_noise(self) -> float:
        """The roughest of the :data:`NOISE_PROBES` cells (:meth:`_roughness`): how far the
        chip's mapper takes a prefill core off any interpolant. Measured once, at fixed
        cells, whatever the load: at most 20 simulations."""
        if self._noise is None:
            fn = self.pieces.pf_at
            cells = []
            for chunk, past in self.NOISE_PROBES:
                x0, x1, _ = self._chunk.locate(chunk)
                y0, y1, _ = self._past.locate(past)
                cells.append((x0, x1, y0, y1))
            self._noise = max(self._roughness(fn, c, (), True) for c in cells)
        return self._noise

    def _trusted(self, v, cell, fn, extra, tokens: int, step_s: float) -> bool:
        """Whether an interpolated prefill core may be used (``step_s``: the step's frame, a
        lower bound of the step). Its cell's roughness times its time must stay within
        ``refine_tol`` of the step; and, since one centre cannot prove a cell smooth
        everywhere and the mapper's noise is a property of the chip, the chip's noise
        (:meth:`_prefill_noise`) times its time within ``3 × refine_tol`` (taking that one
        at ``refine_tol`` too simulated nearly every distinct prompt of a serving sweep on
        the h100 preset; docs/serving.md). Every term depends on the query alone and fixed
        cells, never on which queries came before (it was the roughest cell seen so far):
        the same step costs the same in any run (a test)."""
        tol = self.grid.refine_tol
        if tol is None:
            return True
        core_s = self.pieces.core_seconds(v, tokens)
        if core_s <= tol * step_s:          # however rough, it cannot move the step
            return True
        if self._roughness(fn, cell, extra, tokens > 1) * core_s > tol * step_s:
            return False
        return self._prefill_noise() * core_s <= 3 * tol * step_s

    def _frame_interp(self, n: int) -> list[float] | tuple:
        a, b, w = self._tok.locate(n)
        lo = self.pieces.frame_at(a)
        return lerp(lo, self.pieces.frame_at(b), w) if w else lo

    def _head_interp(self, rows: int) -> list[float] | tuple:
        a, b, w = self._rows.locate(rows)
        lo = self.pieces.head_at(a)
        return lerp(lo, self.pieces.head_at(b), w) if w else lo

    def _keys_gap(self, k0: int, k1: int, q: int) -> float:
        """How far the decode cores may stray from linear in the keys cell ``(k0, k1)``,
        relative to their time at ``k1``: the larger of the gap between the cell's midpoint
        simulated and its interpolant, and the gap at ``k1`` between the cell's secant and
        the slope at ``k0`` (``k0 → k0 + 1``) carried across the cell, i.e. the jumps the
        cell holds. A periodic staircase (one jump per array tile of keys) agrees with the
        interpolant at the midpoint of a cell holding two jumps; the slope is not fooled so.
        Measured once per cell (up to four simulations) at one batch, the last of the batch
        axis's dense range (``GridSpec.batch_dense``, 4 sequences), whichever batch asks:
        the engine's decode cores are linear in the batch (its sequences are copies of one
        shape; measured on h100 and tpu-v5e to 0.3 %), so a cell's relative gap holds for
        every batch, and measuring it at the batch that happened to ask first made a step's
        cost depend on the steps before it."""
        key = (k0, k1, q)
        got = self._gaps.get(key)
        if got is None:
            f = self._dec_seconds
            batch = self.grid.batch_dense
            m = (k0 + k1) // 2
            a, b = f(batch, k0, q), f(batch, k1, q)
            slope = f(batch, k0 + 1, q) - a
            mid = abs(f(batch, m, q) - (a + (b - a) * (m - k0) / (k1 - k0)))
            got = self._gaps[key] = max(mid, abs(b - a - slope * (k1 - k0))) / b
        return got

    #: Keys per sequence near which a batch cell's gap is measured (:meth:`_batch_gap`): the
    #: keys axis's vertex nearest this.
    BATCH_GAP_KEYS = 1024

    def _batch_gap(self, b0: int, b1: int, q: int) -> float:
        """How far the decode cores may stray from linear in the batch cell ``(b0, b1)``,
        relative to their time at ``b1``: the gap between the cell's midpoint simulated and
        its interpolant, at one keys per sequence (the keys axis's vertex nearest
        :data:`BATCH_GAP_KEYS`), whichever keys the query has. The engine's decode cores are
        close to linear in the batch (its sequences are copies of one shape), which is why
        the batch axis doubles (:class:`GridSpec`; h100, llama-3-8b, 1,060 keys: the cell
        (16, 32)'s midpoint 0.34 % off its lerp); where a cell is not, and that could move
        the step by ``refine_tol``, it is halved like a keys cell. A midpoint cannot see a
        single jump elsewhere in the cell (h100, 700 keys: +7 % from 23 to 24 sequences,
        the mapper's choice, so 23 sequences are 2.6 % of the cores off the cell's lerp; the
        old ×1.12 axis's cell (22, 25) held it too): that stays an interpolation error,
        measured (docs/serving.md). Measured once per cell (one simulation beside its two
        ends), and a function of the cell alone."""
        key = (b0, b1, q)
        got = self._bgaps.get(key)
        if got is None:
            f = self._dec_seconds
            k = self._gap_keys
            m = (b0 + b1) // 2
            a, b = f(b0, k, q), f(b1, k, q)
            got = self._bgaps[key] = abs(f(m, k, q) - (a + (b - a) * (m - b0) / (b1 - b0))) / b
        return got

    def _dec_seconds(self, batch: int, keys: int, q: int) -> float:
        return self.pieces.core_seconds(self.pieces.dec_at(batch, keys, q))

    def _decode_interp(self, batch: int, keys: int, q: int, step_s: float) -> list[float]:
        """The decode cores of ``batch`` sequences of ``keys`` keys each (after the step's
        ``q`` tokens), bilinear in (batch, keys) on a keys axis refined where it matters.

        The engine's decode attention is close to linear in the batch (sequences are
        independent copies of one GEMM shape) but a staircase in the keys on arrays that
        tile the keys dimension (tpu-v5e: +8 % of the cores at every 128 keys). A keys cell
        is used once its relative gap (:meth:`_keys_gap`) times the cores' time at the upper batch
        corner (the larger of its values at the fixed axis's cell's ends) is within
        ``refine_tol`` of ``step_s`` (the step's frame, a lower bound of
        the step); otherwise the half holding the query is examined the same way, down to
        neighbouring integers (exact: the lowering rounds the keys up to an integer). Only
        cells where a jump could move a step by ``refine_tol`` are halved. The halving
        starts from the fixed axis's cell for every query (:func:`~.lazy_grid.descend`): a
        cell one query halved is not another's, so a step's cost does not depend on the
        steps timed before it. The batch cell (a doubling axis) is halved the same way by its
        own gap (:meth:`_batch_gap`: the waves in which a chip deals the batch to its
        arrays)."""
        x0, x1, wx = self._bat.locate(batch)
        k0, k1, wk = self._keys.locate(keys)
        tol = self.grid.refine_tol

        if tol is not None and (wk or wx):
            # the cores' time at the upper batch corner, over the axis's cell (the cell's
            # halves hold no more: the cores grow with the keys and the batch)
            core_s = max(self._dec_seconds(x1, k0, q), self._dec_seconds(x1, k1, q))
            if core_s > tol * step_s:     # else however rough, they cannot move the step
                if wk:
                    def settled(a: int, b: int) -> bool:     # or the cell is linear enough
                        return self._keys_gap(a, b, q) * core_s <= tol * step_s
                    # the halving's cell; the axis itself stays as built
                    k0, k1, wk = descend(k0, k1, keys, settled)
                if wx:                    # the batch cell likewise (:meth:`_batch_gap`)
                    x0, x1, wx = descend(x0, x1, batch, lambda a, b: self._batch_gap(
                        a, b, q) * core_s <= tol * step_s)
        return bilinear_in(self.pieces.dec_at, (x0, x1, wx), (k0, k1, wk), q)[0]

    def block_costs(self, step: Step) -> tuple[list[tuple[str, int, float, float, float]],
                                                list[float], tuple]:
        """``step``'s interpolated blocks (name, repeat, compute seconds with the cores,
        collective seconds, energy per copy), its energy by component and the frame's
        interpolated vertex (see the module docstring; :meth:`cost` combines them)."""
        kinds = self.kinds
        nk = len(kinds)
        pc = self.pieces
        cores = [0.0] * nk
        core_e = [0.0] * nk
        body = self._frame_interp(step.tokens)
        head = self._head_interp(step.rows)
        frame_s = pc.frame_seconds(body)
        # the energy by component, interpolated as the energy is (module docstring)
        parts = [a + b for a, b in zip(pc.frame_parts(body, False), pc.frame_parts(head, True))]
        if step.decode_batch:
            b, q = step.decode_batch, step.decode_queries
            # the lowering's keys per sequence: the mean, rounded up (decode_cores)
            v = self._decode_interp(b, -(-step.decode_keys // b), q, frame_s)
            for k in range(nk):
                o, c, m, e = v[4 * k:4 * k + 4]
                cores[k] += o + max(c, m)
                core_e[k] += e
            parts = [a + x for a, x in zip(parts, pc.core_parts(v))]
        for chunk, past in step.prefill:
            v, cell = bilinear(pc.pf_at, self._chunk, self._past, chunk, past)
            if not self._trusted(v, cell, pc.pf_at, (), chunk, frame_s):
                v = pc.pf_at(chunk, past)         # simulated at the query itself
            for k in range(nk):
                o, c, m, e = v[4 * k:4 * k + 4]
                cores[k] += o + max(c * chunk, m)
                core_e[k] += e * chunk
            parts = [a + x * chunk for a, x in zip(parts, pc.core_parts(v))]
        # launches spend static power in the summed stand-in; a schedule's energy is its ops'
        static = 0.0 if self._scheduled else self.replica.chip.energy.static_w
        for k, launch in enumerate(pc.launches(step)):
            cores[k] += launch
            core_e[k] += static * launch
            parts[EP.STATIC] += pc.kind_repeats[k] * static * launch
        out = []
        k = 0
        for i, (name, rep) in enumerate(self.pieces.blocks):
            src = head if name == "head" else body
            comp, comm, e = src[3 * i], src[3 * i + 1], src[3 * i + 2]
            if k < nk and name == kinds[k]:
                comp += cores[k]
                e += core_e[k]
                k += 1
            out.append((name, rep, comp, comm, e))
        return out, parts, body

    #: The most step signatures :meth:`cost` remembers (then it starts afresh: forgetting
    #: changes no result, the memo only saves recomputing).
    MEMO_STEPS = 1 << 16

    def cost(self, step: Step) -> StepCost:
        """Interpolated cost of ``step`` (see the module docstring), memoised on what it
        depends on: the decode batch, its keys per sequence (the mean rounded up, as the
        lowering and :meth:`uncached_cost` use it), queries per sequence, tokens, logits rows
        and prefill chunks. Every term of a step's cost is a function of the query alone
        (docs/serving.md, "Determinism"), so the memo returns what :meth:`uncached_cost`
        would, bit for bit (a test); a serve repeats few signatures' worth of steps (10,000
        requests of llama-3-8b on h100 at 4 req/s: 349,763 steps, 2,385 signatures)."""
        b = step.decode_batch
        key = (b, -(-step.decode_keys // b) if b else 0, step.decode_queries, step.tokens,
               step.rows, step.prefill)
        got = self._memo.get(key)
        if got is None:
            if len(self._memo) >= self.MEMO_STEPS:
                self._memo.clear()
            got = self._memo[key] = self.uncached_cost(step)
        return got

    def uncached_cost(self, step: Step) -> StepCost:
        """Interpolated cost of ``step``, computed afresh (the reference :meth:`cost`'s memo
        is tested against)."""
        blocks, parts, body = self.block_costs(step)
        secs = energy = 0.0
        overlap = self.replica.overlap
        for _, rep, comp, comm, e in blocks:
            secs += rep * (max(comp, comm) if overlap else comp + comm)
            energy += rep * e
        if self._scheduled:
            # the nodes' times add up along the step's dependency chain; what the schedule
            # overlaps (prefetches, independent work) is measured at the frame's vertices
            return StepCost(secs + step_sync_seconds(self.replica.chip)
                            - self.pieces.overlap(body),
                            energy, tuple(parts))
        return self.replica.with_sync(secs, energy, tuple(parts))


def exact_parts_cost(replica: Replica, step: Step, simulate: Callable | None = None
                     ) -> StepCost:
    """The step's cost from its pieces simulated exactly (no interpolation): equals
    :class:`~diptych.sim.serving.step_time.DirectStepTimer` up to rounding (a test holds the
    decomposition to that)."""
    r = replica
    fr, groups = step_parts(r.model, step, precision=r.precision, tp=r.tp,
                            attention=r.attention, experts=r.experts, sampler=r.sampler)
    comp: dict[str, float] = {}
    energy: dict[str, float] = {}
    parts: dict[str, dict] = {}
    names: dict[str, set] = {}
    fr = with_precision_ops(fr, r.chip)
    for g in groups:
        for b in block_costs(r.cores_workload(g), r.chip, simulate):
            comp[b.name] = comp.get(b.name, 0.0) + b.compute_s
            energy[b.name] = energy.get(b.name, 0.0) + b.energy_j
            EP.add(parts.setdefault(b.name, EP.zero()), b.energy_breakdown_j)
        for k, ns in core_op_names(g).items():
            names.setdefault(k, set()).update(ns)
    if r.fixed_costs:
        op_s = launch_seconds(r.chip)[0]
        for k, ns in names.items():
            comp[k] += len(ns) * op_s
            energy[k] += r.chip.energy.static_w * len(ns) * op_s
            parts[k]["static"] += r.chip.energy.static_w * len(ns) * op_s
    frame_blocks = block_costs(fr, r.chip, simulate, fixed_costs=r.fixed_costs)
    s, e = combine_parts(frame_blocks, comp, energy, overlap=r.overlap)
    return r.with_sync(s, e, EP.as_vector(combine_energy_parts(frame_blocks, parts)))


def interpolation_error(oracle: GridStepTimer, steps, simulate: Callable | None = None
                        ) -> list[float]:
    """Relative error of ``oracle`` against direct simulation on ``steps``."""
    direct = DirectStepTimer(oracle.replica, simulate)
    out = []
    for s in steps:
        d = direct.cost(s).seconds
        out.append(abs(oracle.cost(s).seconds - d) / d)
    return out
