"""Step timers: the one narrow interface between the serving event loop and the simulator.

The event loop asks a :class:`StepTimer` ``timer.cost(step)`` for the time and energy (per
chip) of a :class:`~diptych.workloads.serving_step.Step`; it knows nothing else about how steps are timed. Two
implementations:

* :class:`DirectStepTimer` lowers every distinct step
  (:func:`~diptych.workloads.serving_step.lower_step`) and simulates it (:func:`~diptych.sim.run.summed.simulate_workload`, or
  :func:`~diptych.sim.run.scheduled.schedule_workload` for ``execution="schedule"``),
  memoised on the step. Exact, and slow for long runs (every new step shape is a
  simulation).
* :class:`GridStepTimer` splits a step into its frame and its attention cores
  (:func:`~diptych.workloads.serving_step.step_parts`), simulates those pieces at the vertices of
  grids, lazily (a vertex is simulated the first time a step needs it) and interpolates:

  - frame, per block (compute, collectives, energy): piecewise linear in the step's tokens
    ``N`` (embedding and layer blocks) and, on an axis of its own, in its logits rows (the
    head), both refined where the engine's time is a staircase (:class:`_RefinedAxis`);
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
  the frame's vertices. So with every quantity linear between vertices the oracle equals
  direct simulation; docs/serving.md gives the measured error.

Both oracles charge each GEMM's precision ops (block scales' stream, rescale, weight
dequantisation: :func:`~diptych.sim.run.precision_ops.with_precision_ops`, as ``diptych run`` does):
the frame's GEMMs' with the frame, the cores' (MLA's absorbed and expansion GEMMs, unfused
attention's) with the cores; they launch nothing of their own.

The event loop only calls ``cost``; it knows nothing of how steps are timed.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ...arch import Chip, load_chip
from ...workloads import load_model
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.precision import Precision
from ..run.precision_ops import with_precision_ops
from ...workloads.serving_step import (CORE_OPS, Step, base_name, core_op_names, core_workload,
                               decode_cores, frame, lower_step, prefill_cores)
from ..run.summed import block_costs, combine_parts, launch_seconds, step_sync_seconds


class StepCost(NamedTuple):
    """Time of one step and the energy one chip of the tensor-parallel group spends in it."""

    seconds: float
    energy_j: float


class StepTimer(Protocol):
    """What the event loop needs: the cost of a step (see the module docstring)."""

    def cost(self, step: Step) -> StepCost: ...


@dataclass(frozen=True)
class Replica:
    """A model served on ``tp`` chips of one kind: what every step of one engine runs on.

    ``execution``: "sum" (every op timed alone, the times added per block) or "schedule" (the
    step's program list-scheduled on the chip's resources with its fixed costs,
    :func:`~diptych.sim.run.scheduled.schedule_workload`; ``fusion`` as ``diptych run
    --no-fusion``); the default is ``diptych run``'s
    (:func:`diptych.sim.run.scenario.default_execution`).
    ``fixed_costs`` (sum only): charge the chip's ``[overheads]`` as the stand-in of
    :func:`~diptych.sim.run.summed.block_costs` (a launch per distinct op of each layer
    block, per collective, and a synchronisation per step); a schedule charges them itself."""

    chip: Chip
    model: ModelConfig
    tp: int
    precision: Precision
    attention: str = "fused"
    overlap: bool = True
    fixed_costs: bool = True
    execution: str | None = None
    fusion: bool = True

    def __post_init__(self):
        from ..run.scenario import EXECUTIONS, default_execution
        if self.execution is None:
            object.__setattr__(self, "execution", default_execution())
        if self.execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {', '.join(EXECUTIONS)}, not "
                             f"{self.execution!r}")
        if self.execution == "schedule" and not self.fixed_costs:
            raise ValueError("fixed_costs=False turns off the summed model's stand-in for the "
                             "chip's [overheads]; with execution='schedule' the scheduler "
                             "charges them itself (use execution='sum')")

    @property
    def name(self) -> str:
        return f"{self.model.name} on {self.chip.name} x{self.tp}"

    # the workloads the oracles and the profile export time: lowered for this replica, with
    # the chip's precision ops beside their GEMMs (sim/run/precision_ops.py), as ``diptych run``
    def step_workload(self, step: Step) -> Workload:
        """``step`` lowered (:func:`~diptych.workloads.serving_step.lower_step`)."""
        return with_precision_ops(lower_step(self.model, step, precision=self.precision,
                                             tp=self.tp, attention=self.attention), self.chip)

    def frame_workload(self, tokens: int, rows: int) -> Workload:
        """The frame of ``tokens`` tokens and ``rows`` logits rows
        (:func:`~diptych.workloads.serving_step.frame`)."""
        return with_precision_ops(frame(self.model, tokens, rows, precision=self.precision,
                                        tp=self.tp, attention=self.attention), self.chip)

    def cores_workload(self, cores: dict) -> Workload:
        """Attention cores (:func:`~diptych.workloads.serving_step.core_workload`)."""
        return with_precision_ops(core_workload(cores), self.chip)

    @property
    def step_sync_s(self) -> float:
        return step_sync_seconds(self.chip) if self.fixed_costs else 0.0

    def with_sync(self, seconds: float, energy_j: float) -> "StepCost":
        """A step's cost with the per-step synchronisation (static power meanwhile)."""
        sync = self.step_sync_s
        return StepCost(seconds + sync, energy_j + self.chip.energy.static_w * sync)


def make_replica(chip, model, *, tp: int = 1, weights_dtype: str | None = None,
                 act_dtype: str | None = None, kv_dtype: str | None = None,
                 attention: str = "fused", fixed_costs: bool = True,
                 execution: str | None = None, fusion: bool = True) -> Replica:
    """A :class:`Replica` with the precision ``diptych run`` would use for inference;
    ``execution`` None: :func:`diptych.sim.run.scenario.default_execution`."""
    from ...workloads.lower import check_attention, check_tp
    from ..support import check_supported
    from ..run.node import default_precision

    chip = load_chip(chip)
    model = load_model(model)
    check_tp(model, tp)
    check_attention(attention)
    p = default_precision(chip, "decode", weights_dtype, act_dtype, kv_dtype)
    check_supported(chip, p)
    return Replica(chip=chip, model=model, tp=tp, precision=p, attention=attention,
                   fixed_costs=fixed_costs, execution=execution, fusion=fusion)


class DirectStepTimer:
    """Every distinct step lowered and simulated once (exact; see the module docstring)."""

    def __init__(self, replica: Replica, simulate: Callable | None = None):
        self.replica = replica
        self._simulate = simulate
        self._memo: dict[Step, StepCost] = {}
        self.simulations = 0

    def cost(self, step: Step) -> StepCost:
        got = self._memo.get(step)
        if got is None:
            r = self.replica
            w = r.step_workload(step)
            if r.execution == "schedule":
                from ..run.scheduled import schedule_workload
                from ..run.node import _default_simulate

                t = schedule_workload(w, r.chip, simulate=self._simulate or _default_simulate(),
                                      fusion=r.fusion)
                got = self._memo[step] = StepCost(t["seconds"], t["energy_j"])
            else:
                s, e = combine_parts(block_costs(w, r.chip, self._simulate,
                                                 fixed_costs=r.fixed_costs), {}, {},
                                     overlap=r.overlap)
                got = self._memo[step] = r.with_sync(s, e)
            self.simulations += 1
        return got


def geometric_axis(dense_to: int, ratio: float, limit: int, start: int = 1) -> list[int]:
    """Integers ``start..dense_to`` then a geometric progression of ``ratio`` (rounded,
    strictly increasing) up to and including ``limit``."""
    pts = list(range(start, dense_to + 1))
    x = float(dense_to)
    while pts[-1] < limit:
        x *= ratio
        v = min(limit, int(round(x)))
        if v > pts[-1]:
            pts.append(v)
    return pts


@dataclass(frozen=True)
class GridSpec:
    """Vertex spacing of a :class:`GridStepTimer` (ratios between neighbouring vertices above
    the dense ranges). ``max_tokens`` bounds the token and chunk axes, ``max_keys`` the
    context axes, ``max_batch`` the decode-batch axis."""

    token_ratio: float = 1.06
    batch_ratio: float = 1.12
    keys_ratio: float = 1.12
    chunk_ratio: float = 1.12
    past_ratio: float = 1.2
    token_dense: int = 32
    batch_dense: int = 16
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
        for f in ("token_ratio", "batch_ratio", "keys_ratio", "chunk_ratio", "past_ratio"):
            v = getattr(self, f)
            if not 1.0 < v <= 4.0:
                raise ValueError(f"{f} must be in (1, 4], not {v!r}")
        t = self.refine_tol
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not 0.0 < t < 0.5):
            raise ValueError(f"refine_tol must be None or a fraction in (0, 0.5), not {t!r}")


class _Axis:
    __slots__ = ("pts", "name")

    def __init__(self, pts: list[int], name: str):
        self.pts = pts
        self.name = name

    def locate(self, x: float) -> tuple[int, int, float]:
        """(lower vertex, upper vertex, weight of the upper one)."""
        pts = self.pts
        i = bisect_right(pts, x) - 1
        if i < 0:
            raise ValueError(f"{self.name} {x} is below the grid's first vertex {pts[0]}")
        a = pts[i]
        if a == x or i + 1 == len(pts):
            if a != x:
                raise ValueError(f"{self.name} {x} is beyond the grid's last vertex {a}")
            return a, a, 0.0
        b = pts[i + 1]
        return a, b, (x - a) / (b - a)


def _lerp(u: tuple, v: tuple, w: float) -> list[float]:
    return [a + (b - a) * w for a, b in zip(u, v)]


class _RefinedAxis(_Axis):
    """An integer axis whose cells are halved where the tabulated function is not linear
    (:attr:`GridSpec.refine_tol`).

    A query in a cell ``(a, b)`` not yet certified simulates its midpoint ``m`` (which becomes
    a vertex): if ``|f(m) − lerp(f(a), f(b))(m)| ≤ tol·f(m)`` (``f`` the scalar ``measure``
    of the tabulated tuple) both halves are certified linear; otherwise the half holding the
    query is examined the same way, down to a cell of two neighbouring integers (exact: no
    integer lies between). A jump ``J`` of a staircase inside a cell shows at its midpoint as
    ``J/2``, so every jump larger than ``2·tol`` is isolated between neighbouring integers
    in ``log2(width)`` simulations. What a midpoint cannot see — a narrow spike between two
    agreeing points — is not hidden either: it stays an interpolation error (measured,
    docs/serving.md). Simulations are bounded by the integers of the cells queried."""

    __slots__ = ("value", "measure", "tol", "ok")

    def __init__(self, pts: list[int], name: str, value, measure, tol: float):
        super().__init__(list(pts), name)
        self.value, self.measure, self.tol = value, measure, tol
        self.ok: set[tuple[int, int]] = set()

    def locate(self, x: float) -> tuple[int, int, float]:
        a, b, w = super().locate(x)
        while w and (a, b) not in self.ok and b - a >= 2:
            m = (a + b) // 2
            fa, fb = self.measure(self.value(a)), self.measure(self.value(b))
            fm = self.measure(self.value(m))
            insort(self.pts, m)
            if abs(fm - (fa + (fb - fa) * (m - a) / (b - a))) <= self.tol * abs(fm):
                self.ok.update(((a, m), (m, b)))
            if x == m:
                return m, m, 0.0
            a, b = (a, m) if x < m else (m, b)
            w = (x - a) / (b - a)
        return a, b, w


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


class GridStepTimer:
    """Interpolating oracle over lazily simulated grid vertices (module docstring)."""

    def __init__(self, replica: Replica, simulate: Callable | None = None,
                 grid: GridSpec | None = None, progress: Callable[[int], None] | None = None):
        if replica.execution == "schedule" and replica.attention != "fused":
            raise ValueError(f"the grid oracle times scheduled steps with fused attention "
                             f"(its cores are then nodes of their own); with attention "
                             f"{replica.attention!r} use the direct oracle (--oracle direct)")
        self.replica = replica
        self._scheduled = replica.execution == "schedule"
        self._simulate = simulate
        g = grid or GridSpec()
        self.grid = g
        tok = geometric_axis(g.token_dense, g.token_ratio, g.max_tokens)
        self._tok = (_Axis(tok, "step tokens") if g.refine_tol is None else
                     _RefinedAxis(tok, "step tokens", self._frame_at, self._frame_seconds,
                                  g.refine_tol))
        # the head (logits rows) on an axis of its own: a step's rows are its decode queries
        # and completed prompts, mostly far fewer than its tokens, and the head's GEMM (the
        # vocabulary) is the largest of the frame
        self._rows = (_Axis(list(tok), "logits rows") if g.refine_tol is None else
                      _RefinedAxis(tok, "logits rows", self._head_at, self._head_seconds,
                                   g.refine_tol))
        self._bat = _Axis(geometric_axis(g.batch_dense, g.batch_ratio, g.max_batch),
                          "decode batch")
        self._keys = _Axis(geometric_axis(16, g.keys_ratio, g.max_keys), "keys per sequence")
        self._chunk = _Axis(geometric_axis(16, g.chunk_ratio, g.max_tokens), "prefill chunk")
        self._past = _Axis(geometric_axis(16, g.past_ratio, g.max_keys, start=0), "past")
        self._frame: dict[tuple[int, int], tuple] = {}
        self._dec: dict[tuple[int, int, int], tuple] = {}
        self._pf: dict[tuple[int, int], tuple] = {}
        self._rough: dict = {}
        self._gaps: dict[tuple[int, int, int], float] = {}
        self._roughest: dict[str, float] = {}
        self._kind_reps: list[int] | None = None
        self._progress = progress
        self.simulations = 0
        self._blocks: list[tuple[str, int]] | None = None
        self._kinds: list[str] | None = None
        self._names: dict = {}
        self._head_precision: bool | None = None

    # -- vertices (each one simulation of a piece) --------------------------------------------

    def _tick(self):
        self.simulations += 1
        if self._progress is not None:
            self._progress(self.simulations)

    def _frame_at(self, n: int, rows: int = 1) -> tuple:
        """The frame at ``n`` tokens and ``rows`` logits rows: a vertex of the token axis
        with one row (its head is not used: the head's rows have their own axis,
        :meth:`_head_at`; the other blocks do not depend on the rows, in a schedule
        either, residency included: tests)."""
        if self._scheduled and rows != n and self._head_has_precision_ops():
            rows = n
        got = self._frame.get((n, rows))
        if got is None:
            r = self.replica
            if self._scheduled:
                got = self._scheduled_frame(n, rows)
            else:
                w = r.frame_workload(n, rows)
                bc = block_costs(w, r.chip, self._simulate, fixed_costs=r.fixed_costs)
                if self._blocks is None:
                    self._blocks = [(b.name, b.repeat) for b in bc]
                got = tuple(x for b in bc for x in (b.compute_s, b.comm_s, b.energy_j))
            self._frame[(n, rows)] = got
            self._tick()
        return got

    def _head_has_precision_ops(self) -> bool:
        """Whether the chip runs precision ops beside the head (block scales, quantisation,
        dequantisation: :func:`~diptych.sim.run.precision_ops.with_precision_ops`). In a schedule
        they may overlap the layers' work by an amount that grows with the logits rows, so
        the schedule's overlap then depends on the rows and a token-axis vertex is the
        frame of ``n`` tokens and ``n`` rows (exact for decode-only steps, as before the
        rows axis); without them the overlap does not depend on the rows (measured on h100,
        tpu-v5e, infer-2026) and a vertex has one row."""
        if self._head_precision is None:
            r = self.replica
            w = frame(r.model, 1, 1, precision=r.precision, tp=r.tp, attention=r.attention)
            wp = with_precision_ops(w, r.chip)
            self._head_precision = any(a is not b for a, b in zip(w.blocks, wp.blocks)
                                       if a.name == "head")
        return self._head_precision

    def _head_at(self, rows: int) -> tuple:
        """A vertex of the logits-rows axis: the frame of ``rows`` tokens and rows (its
        head entries are used; its other ops are those of the token axis's vertex at
        ``rows``, memoised per op)."""
        return self._frame_at(rows, rows)

    def _scheduled_frame(self, n: int, rows: int) -> tuple:
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
                              fusion=r.fusion)
        if self._blocks is None:
            self._blocks = [(b.name, b.repeat) for b in w.blocks]
        run = {b.name: 0.0 for b in w.blocks}       # all copies of each block
        energy = dict(run)
        for rec in t["layers"]:
            if not any(_of_core(x) for x in rec.get("fused", [rec["op"]])):
                block = _origin(rec["block"], run)
                run[block] += (rec["seconds"] + rec["launch_s"]) * rec["repeat"]
                energy[block] += rec["energy_j"] * rec["repeat"]
        # the cores as the oracle times them (their table, one launch per node): the overlap
        # then also holds how the schedule's cores differ from the table at this vertex
        cores = self._core_seconds(self._dec_exact(n, n, 1)) + sum(
            rep * launch for rep, launch in zip(self._kind_repeats, self._launches(Step(n, n))))
        overlap = sum(run.values()) + cores + t["step_sync_s"] - t["seconds"]
        return tuple(x for b in w.blocks for x in (run[b.name] / b.repeat, 0.0,
                                                   energy[b.name] / b.repeat)) + (overlap,)

    @property
    def kinds(self) -> list[str]:
        """The layer blocks (one per layer kind), in the frame's order."""
        if self._kinds is None:
            r = self.replica
            w = frame(r.model, 1, 1, precision=r.precision, tp=r.tp, attention=r.attention)
            self._kinds = [b.name for b in w.blocks if b.name not in ("embedding", "head")]
        return self._kinds

    def _core_ops(self, key: tuple) -> dict[str, tuple]:
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

    def _launches(self, step: Step) -> list[float]:
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
        op_s = launch_seconds(r.chip)[0]
        names = {k: set() for k in self.kinds}
        for key in dict.fromkeys(keys):
            for k, ops in self._core_ops(key).items():
                names[k] |= set(ops)
        return [len(names[k]) * op_s for k in self.kinds]

    def _core(self, cores: dict, per_token: int = 0) -> tuple:
        """Per layer kind: (seconds of the non-fused ops, fused compute term, fused memory
        term, energy); with ``per_token`` the compute term and the energy divided by it."""
        r = self.replica
        by = {b.name: b for b in block_costs(r.cores_workload(cores), r.chip, self._simulate)}
        out: list[float] = []
        for name in self.kinds:
            b = by[name]
            fused = max(b.attention_compute_s, b.attention_memory_s)
            c, e = b.attention_compute_s, b.energy_j
            if per_token:
                c, e = c / per_token, e / per_token
            out += [b.compute_s - fused, c, b.attention_memory_s, e]
        self._tick()
        return tuple(out)

    def _dec_at(self, batch: int, keys: int, q: int) -> tuple:
        """The decode cores at a vertex: ``keys`` per sequence."""
        return self._dec_exact(batch, batch * keys, q)

    def _pf_at(self, chunk: int, past: int) -> tuple:
        k = (chunk, past)
        got = self._pf.get(k)
        if got is None:
            r = self.replica
            # per query token: compute and energy grow as chunk·(past + chunk/2)
            got = self._pf[k] = self._core(prefill_cores(
                r.model, chunk, past, 1, precision=r.precision, tp=r.tp,
                attention=r.attention), per_token=chunk)
        return got

    # -- interpolation ------------------------------------------------------------------------

    def _bilinear(self, fn, ax, ay, x: float, y: float, *extra
                  ) -> tuple[list[float], tuple[int, int, int, int]]:
        """The interpolated tuple at ``(x, y)`` and its cell ``(x0, x1, y0, y1)``."""
        x0, x1, wx = ax.locate(x)
        y0, y1, wy = ay.locate(y)
        lo = fn(x0, y0, *extra)
        if wx:
            lo = _lerp(lo, fn(x1, y0, *extra), wx)
        if not wy:
            return list(lo), (x0, x1, y0, y1)
        hi = fn(x0, y1, *extra)
        if wx:
            hi = _lerp(hi, fn(x1, y1, *extra), wx)
        return _lerp(lo, hi, wy), (x0, x1, y0, y1)

    @property
    def _kind_repeats(self) -> list[int]:
        """Layers of each layer kind (once a frame has been simulated)."""
        if self._kind_reps is None:
            self._kind_reps = [rep for name, rep in self._blocks if name in self.kinds]
        return self._kind_reps

    def _core_seconds(self, v, tokens: int = 1) -> float:
        """A core tuple's time over all layers (``tokens``: the chunk of a per-token tuple)."""
        return sum(rep * (v[4 * k] + max(v[4 * k + 1] * tokens, v[4 * k + 2]))
                   for k, rep in enumerate(self._kind_repeats))

    def _roughness(self, fn, cell, extra, per_token: bool) -> float:
        """How far a core cell is from bilinear: the relative gap, in the cores' time,
        between the cell's centre simulated and its interpolant (one simulation per cell,
        memoised; 0 for a cell without an interior point)."""
        key = (fn.__name__, cell, extra)
        got = self._rough.get(key)
        if got is None:
            x0, x1, y0, y1 = cell
            if x1 - x0 < 2 and y1 - y0 < 2:
                got = 0.0
            else:
                xm, ym = (x0 + x1) // 2, (y0 + y1) // 2
                wx = (xm - x0) / (x1 - x0) if x1 > x0 else 0.0
                wy = (ym - y0) / (y1 - y0) if y1 > y0 else 0.0
                lo = _lerp(fn(x0, y0, *extra), fn(x1, y0, *extra), wx)
                hi = _lerp(fn(x0, y1, *extra), fn(x1, y1, *extra), wx)
                t = xm if per_token else 1
                want = self._core_seconds(fn(xm, ym, *extra), t)
                got = abs(self._core_seconds(_lerp(lo, hi, wy), t) - want) / want
            self._rough[key] = got
            kind = fn.__name__
            self._roughest[kind] = max(self._roughest.get(kind, 0.0), got)
        return got

    def _trusted(self, v, cell, fn, extra, tokens: int, step_s: float) -> bool:
        """Whether an interpolated core may be used (``step_s``: the step's frame, a lower
        bound of the step). Its cell's roughness times its time must stay within
        ``refine_tol`` of the step; and, since one centre cannot prove a cell smooth
        everywhere and the mapper's noise is a property of the chip, the roughest cell seen
        for this kind of core times its time within ``3 × refine_tol`` (taking that one at
        ``refine_tol`` too simulated nearly every distinct prompt of a serving sweep on the
        h100 preset; docs/serving.md)."""
        tol = self.grid.refine_tol
        if tol is None:
            return True
        core_s = self._core_seconds(v, tokens)
        if core_s <= tol * step_s:          # however rough, it cannot move the step
            return True
        if self._roughness(fn, cell, extra, tokens > 1) * core_s > tol * step_s:
            return False
        return self._roughest.get(fn.__name__, 0.0) * core_s <= 3 * tol * step_s

    def _frame_seconds(self, v: tuple) -> float:
        """A frame tuple's time without the head (the other blocks, repeats included, less
        a schedule's overlap): what the token axis's refinement compares."""
        t = sum(rep * (v[3 * i] + v[3 * i + 1]) for i, (name, rep) in enumerate(self._blocks)
                if name != "head")
        return t - v[-1] if self._scheduled else t

    def _head_seconds(self, v: tuple) -> float:
        """A frame tuple's head time: what the rows axis's refinement compares."""
        return sum(rep * (v[3 * i] + v[3 * i + 1]) for i, (name, rep) in enumerate(self._blocks)
                   if name == "head")

    def _frame_interp(self, n: int) -> list[float] | tuple:
        a, b, w = self._tok.locate(n)
        lo = self._frame_at(a)
        return _lerp(lo, self._frame_at(b), w) if w else lo

    def _head_interp(self, rows: int) -> list[float] | tuple:
        a, b, w = self._rows.locate(rows)
        lo = self._head_at(a)
        return _lerp(lo, self._head_at(b), w) if w else lo

    def _dec_exact(self, batch: int, keys: int, q: int) -> tuple:
        """The decode cores of ``batch`` sequences holding ``keys`` keys in all."""
        k = (batch, keys, q)
        got = self._dec.get(k)
        if got is None:
            r = self.replica
            got = self._dec[k] = self._core(decode_cores(
                r.model, batch, keys, q, precision=r.precision, tp=r.tp, attention=r.attention))
        return got

    def _keys_gap(self, batch: int, k0: int, k1: int, q: int) -> float:
        """How far the decode cores may stray from linear in the keys cell ``(k0, k1)``,
        relative to their time at ``k1``: the larger of the gap between the cell's midpoint
        simulated and its interpolant, and the gap at ``k1`` between the cell's secant and
        the slope at ``k0`` (``k0 → k0 + 1``) carried across the cell, i.e. the jumps the
        cell holds. A periodic staircase (one jump per array tile of keys) agrees with the
        interpolant at the midpoint of a cell holding two jumps; the slope is not fooled so.
        Measured once per cell (two simulations) at the first batch vertex that needs it:
        the engine's decode cores are linear in the batch (its sequences are copies of one
        shape; measured on h100 and tpu-v5e to 0.3 %), so a cell's relative gap holds for
        every batch."""
        key = (k0, k1, q)
        got = self._gaps.get(key)
        if got is None:
            f = self._dec_seconds
            m = (k0 + k1) // 2
            a, b = f(batch, k0, q), f(batch, k1, q)
            slope = f(batch, k0 + 1, q) - a
            mid = abs(f(batch, m, q) - (a + (b - a) * (m - k0) / (k1 - k0)))
            got = self._gaps[key] = max(mid, abs(b - a - slope * (k1 - k0))) / b
        return got

    def _dec_seconds(self, batch: int, keys: int, q: int) -> float:
        return self._core_seconds(self._dec_at(batch, keys, q))

    def _decode_interp(self, batch: int, keys: int, q: int, step_s: float) -> list[float]:
        """The decode cores of ``batch`` sequences of ``keys`` keys each (after the step's
        ``q`` tokens), bilinear in (batch, keys) on a keys axis refined where it matters.

        The engine's decode attention is linear in the batch (sequences are independent
        copies of one GEMM shape) but a staircase in the keys on arrays that tile the keys
        dimension (tpu-v5e: +8 % of the cores at every 128 keys). A keys cell is used once
        its relative gap (:meth:`_keys_gap`) times the cores' time at the upper batch
        corner is within ``refine_tol`` of ``step_s`` (the step's frame, a lower bound of
        the step); otherwise the half holding the query is examined the same way, down to
        neighbouring integers (exact: the lowering rounds the keys up to an integer). Only
        cells where a jump could move a step by ``refine_tol`` are halved."""
        x0, x1, wx = self._bat.locate(batch)
        k0, k1, wk = self._keys.locate(keys)
        tol = self.grid.refine_tol
        while wk and tol is not None and k1 - k0 >= 2:
            core_s = max(self._dec_seconds(x1, k0, q), self._dec_seconds(x1, k1, q))
            if core_s <= tol * step_s:      # however rough, the cores cannot move the step
                break
            if self._keys_gap(x1, k0, k1, q) * core_s <= tol * step_s:
                break
            m = (k0 + k1) // 2          # strictly between two neighbouring vertices
            insort(self._keys.pts, m)
            if keys == m:
                break
            k0, k1 = (k0, m) if keys < m else (m, k1)
            wk = (keys - k0) / (k1 - k0)
        # the refined axis now locates ``keys`` in the cell the loop settled on
        return self._bilinear(self._dec_at, self._bat, self._keys, batch, keys, q)[0]

    def cost(self, step: Step) -> StepCost:
        """Interpolated cost of ``step`` (see the module docstring)."""
        kinds = self.kinds
        nk = len(kinds)
        cores = [0.0] * nk
        core_e = [0.0] * nk
        body = self._frame_interp(step.tokens)
        head = self._head_interp(step.rows)
        frame_s = self._frame_seconds(body)
        if step.decode_batch:
            b, q = step.decode_batch, step.decode_queries
            # the lowering's keys per sequence: the mean, rounded up (decode_cores)
            v = self._decode_interp(b, -(-step.decode_keys // b), q, frame_s)
            for k in range(nk):
                o, c, m, e = v[4 * k:4 * k + 4]
                cores[k] += o + max(c, m)
                core_e[k] += e
        for chunk, past in step.prefill:
            v, cell = self._bilinear(self._pf_at, self._chunk, self._past, chunk, past)
            if not self._trusted(v, cell, self._pf_at, (), chunk, frame_s):
                v = self._pf_at(chunk, past)         # simulated at the query itself
            for k in range(nk):
                o, c, m, e = v[4 * k:4 * k + 4]
                cores[k] += o + max(c * chunk, m)
                core_e[k] += e * chunk
        # launches spend static power in the summed stand-in; a schedule's energy is its ops'
        static = 0.0 if self._scheduled else self.replica.chip.energy.static_w
        for k, launch in enumerate(self._launches(step)):
            cores[k] += launch
            core_e[k] += static * launch
        secs = energy = 0.0
        overlap = self.replica.overlap
        k = 0
        for i, (name, rep) in enumerate(self._blocks):
            src = head if name == "head" else body
            comp, comm, e = src[3 * i], src[3 * i + 1], src[3 * i + 2]
            if k < nk and name == kinds[k]:
                comp += cores[k]
                e += core_e[k]
                k += 1
            secs += rep * (max(comp, comm) if overlap else comp + comm)
            energy += rep * e
        if self._scheduled:
            # the nodes' times add up along the step's dependency chain; what the schedule
            # overlaps (prefetches, independent work) is measured at the frame's vertices
            return StepCost(secs + step_sync_seconds(self.replica.chip) - body[-1], energy)
        return self.replica.with_sync(secs, energy)


def exact_parts_cost(replica: Replica, step: Step, simulate: Callable | None = None
                     ) -> StepCost:
    """The step's cost from its pieces simulated exactly (no interpolation): equals
    :class:`DirectStepTimer` up to rounding (a test holds the decomposition to that)."""
    from ...workloads.serving_step import step_parts

    r = replica
    fr, groups = step_parts(r.model, step, precision=r.precision, tp=r.tp,
                            attention=r.attention)
    comp: dict[str, float] = {}
    energy: dict[str, float] = {}
    names: dict[str, set] = {}
    fr = with_precision_ops(fr, r.chip)
    for g in groups:
        for b in block_costs(r.cores_workload(g), r.chip, simulate):
            comp[b.name] = comp.get(b.name, 0.0) + b.compute_s
            energy[b.name] = energy.get(b.name, 0.0) + b.energy_j
        for k, ns in core_op_names(g).items():
            names.setdefault(k, set()).update(ns)
    if r.fixed_costs:
        op_s = launch_seconds(r.chip)[0]
        for k, ns in names.items():
            comp[k] += len(ns) * op_s
            energy[k] += r.chip.energy.static_w * len(ns) * op_s
    s, e = combine_parts(block_costs(fr, r.chip, simulate, fixed_costs=r.fixed_costs), comp,
                         energy, overlap=r.overlap)
    return r.with_sync(s, e)


def interpolation_error(oracle: GridStepTimer, steps, simulate: Callable | None = None
                        ) -> list[float]:
    """Relative error of ``oracle`` against direct simulation on ``steps``."""
    direct = DirectStepTimer(oracle.replica, simulate)
    out = []
    for s in steps:
        d = direct.cost(s).seconds
        out.append(abs(oracle.cost(s).seconds - d) / d)
    return out

