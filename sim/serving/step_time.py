"""Step timers: the one narrow interface between the serving event loop and the simulator.

The event loop asks a :class:`StepTimer` ``timer.cost(step)`` for the time and energy (per
chip) of a :class:`~diptych.workloads.serving_step.Step`; it knows nothing else about how
steps are timed. A :class:`Replica` is what every step of one engine runs on (a model on
``tp`` chips of one kind, its precision and execution). Two timers:

* :class:`DirectStepTimer` lowers every distinct step
  (:func:`~diptych.workloads.serving_step.lower_step`) and simulates it
  (:func:`~diptych.sim.run.summed.simulate_workload`, or
  :func:`~diptych.sim.run.scheduled.schedule_workload` for ``execution="schedule"``),
  memoised on the step. Exact, and slow for long runs (every new step shape is a
  simulation).
* :class:`~diptych.sim.serving.grid_timer.GridStepTimer` interpolates a step's cost between
  its pieces simulated lazily at grid vertices (its module says how, and what it costs in
  accuracy).

Both charge each GEMM's precision ops (block scales' stream, rescale, weight
dequantisation: :func:`~diptych.sim.run.precision_ops.with_precision_ops`, as ``diptych run``
does): the frame's GEMMs' with the frame, the cores' (MLA's absorbed and expansion GEMMs,
unfused attention's) with the cores; they launch nothing of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ...arch import Chip, load_chip
from ...workloads import load_model
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.precision import Precision
from ...workloads.serving_step import NO_EP, Experts, Step, core_workload, frame, lower_step
from ..run.precision_ops import with_precision_ops
from ..run.scenario import Scenario
from ..run.summed import block_costs, combine_energy_parts, combine_parts, step_sync_seconds
from .. import energy_parts as EP
from .afd_split import split_workload
from ..run.variant import Variant, collective_timer, variant_chip, variant_timer
from ...arch.engine_allreduce import check_engine
from ...arch.sampler import check_sampler
from .engine_allreduce import engine_timer


class StepCost(NamedTuple):
    """Time of one step and the energy one chip of the tensor-parallel group spends in it;
    ``parts``: that energy by component, a vector in the order of
    :data:`diptych.sim.energy_parts.VECTOR` (sums to ``energy_j``; empty when a timer does
    not give it)."""

    seconds: float
    energy_j: float
    parts: tuple = ()


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
    block, per collective, and a synchronisation per step); a schedule charges them itself.
    ``variant`` leaves mechanisms out (:class:`~diptych.sim.run.variant.Variant`: the serving
    waterfall's levels): its chip is ``variant_chip`` of the one given, its step timers
    free the ops and collectives it frees."""

    chip: Chip
    model: ModelConfig
    tp: int
    precision: Precision
    attention: str = "fused"
    overlap: bool = True
    fixed_costs: bool = True
    execution: str | None = None
    fusion: bool = True
    variant: Variant = Variant()
    #: expert parallelism (:class:`~diptych.workloads.serving_step.Experts`; docs/serving.md
    #: "Expert parallelism") and ``dp`` data-parallel attention ranks running in lockstep (each
    #: its own requests and KV, the MoE layers' all-to-alls joining them every step; a step
    #: of the replica is timed as its busiest rank's, :mod:`~diptych.sim.serving.ep`)
    experts: Experts = NO_EP
    dp: int = 1
    #: attention–FFN disaggregation (:mod:`~diptych.sim.serving.afd`): ``"attention"``, the
    #: replica's steps without their FFN ops (the attention pool's part,
    #: :func:`~diptych.sim.serving.afd_split.split_workload`); ``""``, the whole step
    afd_side: str = ""
    #: the engine's tensor-parallel all-reduce (a runtime profile's ``all_reduce``): "nccl",
    #: or the engine's custom kernels where its source takes them (:mod:`.engine_allreduce`)
    all_reduce: str = "nccl"
    #: the engine's sampling kernels after the head (a runtime profile's ``sampler``,
    #: :data:`~diptych.arch.sampler.SAMPLERS`; device work, :mod:`~diptych.workloads.sampling`)
    sampler: str = "none"

    def __post_init__(self):
        from ..run.scenario import EXECUTIONS, default_execution
        check_engine(self.all_reduce)
        check_sampler(self.sampler)
        if isinstance(self.dp, bool) or not isinstance(self.dp, int) or self.dp < 1:
            raise ValueError(f"dp (data-parallel attention ranks) must be a positive integer, "
                             f"not {self.dp!r}")
        if self.afd_side not in ("", "attention"):
            raise ValueError(f"afd_side must be '' or 'attention', not {self.afd_side!r}")
        if not self.variant.is_default:   # launches and links as the variant has them
            object.__setattr__(self, "chip", variant_chip(self.chip, self.variant))
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
    def chips(self) -> int:
        """Chips of one replica: ``tp`` × ``dp``."""
        return self.tp * self.dp

    @property
    def name(self) -> str:
        ep = self.experts.ep
        par = (f" (ep {ep}, attention {'dp' if self.dp > 1 else 'tp'})" if ep > 1 else
               f" (dp {self.dp})" if self.dp > 1 else "")
        return f"{self.model.name} on {self.chip.name} x{self.chips}{par}"

    def timer(self, simulate: Callable | None) -> Callable | None:
        """``simulate`` with the ops the replica's variant frees costing nothing."""
        return variant_timer(simulate, self.variant)

    @property
    def collective_time(self) -> Callable | None:
        """The collective timer of the replica's variant and engine all-reduce (None: the
        chip's links)."""
        if self.variant.free_comm or self.all_reduce == "nccl":
            return collective_timer(self.variant)
        return engine_timer(self.all_reduce, self.chip)

    # the workloads the oracles and the profile export time: lowered for this replica, with
    # the chip's precision ops beside their GEMMs (sim/run/precision_ops.py), as ``diptych run``
    def step_workload(self, step: Step) -> Workload:
        """``step`` lowered (:func:`~diptych.workloads.serving_step.lower_step`)."""
        return self._side(with_precision_ops(
            lower_step(self.model, step, precision=self.precision, tp=self.tp,
                       attention=self.attention, experts=self.experts,
                       sampler=self.sampler), self.chip))

    def frame_workload(self, tokens: int, rows: int) -> Workload:
        """The frame of ``tokens`` tokens and ``rows`` logits rows
        (:func:`~diptych.workloads.serving_step.frame`)."""
        return self._side(with_precision_ops(
            frame(self.model, tokens, rows, precision=self.precision, tp=self.tp,
                  attention=self.attention, experts=self.experts, sampler=self.sampler),
            self.chip))

    def _side(self, w: Workload) -> Workload:
        """``w``, or its attention-pool part when the replica is one (``afd_side``)."""
        return split_workload(w, self.afd_side) if self.afd_side else w

    def cores_workload(self, cores: dict) -> Workload:
        """Attention cores (:func:`~diptych.workloads.serving_step.core_workload`)."""
        return with_precision_ops(core_workload(cores), self.chip)

    @property
    def step_sync_s(self) -> float:
        return step_sync_seconds(self.chip) if self.fixed_costs else 0.0

    def with_sync(self, seconds: float, energy_j: float, parts=()) -> "StepCost":
        """A step's cost with the per-step synchronisation (static power meanwhile);
        ``parts``: the energy by component (a :data:`~diptych.sim.energy_parts.VECTOR`),
        its ``static`` charged the same."""
        sync = self.step_sync_s
        static_j = self.chip.energy.static_w * sync
        if parts:
            parts = list(parts)
            parts[EP.STATIC] += static_j
            parts = tuple(parts)
        return StepCost(seconds + sync, energy_j + static_j, parts)


def make_replica(chip, model, scenario: Scenario | None = None, *,
                 fixed_costs: bool = True) -> Replica:
    """A :class:`Replica` of ``scenario``: its tensor-parallel degree (``parallelism.tp``,
    default 1), the precision ``diptych run`` would use for inference with its dtypes, its
    attention, execution, fusion and overlap (None: an inference scenario's defaults). A
    serving replica is tensor-parallel only: the scenario's other degrees must be unset and
    its phase an inference one (a step mixes prefill and decode)."""
    from ...workloads.lower import check_tp
    from ..run.node import default_precision
    from ..support import check_supported

    s = scenario if scenario is not None else Scenario(phase="decode")
    if s.phase == "train":
        raise ValueError("a serving replica runs inference: scenario.phase must be prefill "
                         "or decode, not 'train'")
    par = s.parallelism
    for name in ("chips", "dp", "pp", "cp", "ep"):
        if getattr(par, name) not in (None, 1) and not (name == "chips" and
                                                        par.chips == par.tp):
            raise ValueError(f"a serving replica is tensor-parallel only: {name} must be "
                             f"unset, not {getattr(par, name)}")
    tp = par.tp or 1
    chip = load_chip(chip)
    model = load_model(model)
    check_tp(model, tp)
    p = default_precision(chip, "decode", s.weights_dtype, s.act_dtype, s.kv_dtype, s.recipe)
    check_supported(chip, p)
    return Replica(chip=chip, model=model, tp=tp, precision=p, attention=s.attention,
                   overlap=s.overlap, fixed_costs=fixed_costs, execution=s.execution,
                   fusion=s.fusion, variant=Variant(no_power_limit=not s.power_limit))


class DirectStepTimer:
    """Every distinct step lowered and simulated once (exact; see the module docstring)."""

    def __init__(self, replica: Replica, simulate: Callable | None = None):
        self.replica = replica
        self._simulate = replica.timer(simulate)
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
                                      fusion=r.fusion, collective_time=r.collective_time)
                got = self._memo[step] = StepCost(t["seconds"], t["energy_j"],
                                                  EP.as_vector(t["energy_breakdown_j"]))
            else:
                bc = block_costs(w, r.chip, self._simulate, fixed_costs=r.fixed_costs,
                                 collective_time=r.collective_time)
                s, e = combine_parts(bc, {}, {}, overlap=r.overlap)
                got = self._memo[step] = r.with_sync(
                    s, e, EP.as_vector(combine_energy_parts(bc, {})))
            self.simulations += 1
        return got
