"""What a run simulates, as one validated value: the :class:`Scenario`.

A scenario is everything about a run except the chip, the model and (on a cluster) the
cluster and its plan: the phase and its sizes, the precision asked for, the parallel degrees,
the attention kernel, how the program is timed and the runtime knobs. It is frozen and
checked once, when it is made (every message names the field, the value and what was
expected); the run layer (:func:`diptych.sim.run.run_workload`), the cluster step
(:func:`diptych.sim.cluster.run.run_cluster_step`,
:func:`~diptych.sim.cluster.step.simulate_cluster_step`, the plan search), the serving
replicas (:func:`diptych.sim.serving.step_time.make_replica`), the sweep evaluator and the
facade all take one; a re-run with one field changed is ``dataclasses.replace(scenario, ...)`` (the
power-limited re-run, the batches of a batching curve).

``None`` in a size, dtype or degree means "the run's default": the precision the chip runs by
default (:func:`~diptych.sim.run.node.default_precision`), the degrees that fill ``chips``
(:func:`~diptych.sim.run.node.resolve_parallelism`), ``diptych run``'s micro-batch. What
needs the model or the chip (a degree that does not split the model, a dtype the chip cannot
compute) is checked by the run that receives it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...arch.dtypes import check_dtype
from ...workloads.lower import ATTENTION_MODES, check_attention
from ...workloads.moe import Routing
from ...workloads.tp2d import INFERENCE_ONLY, LAYOUTS as TP_LAYOUTS
from ...workloads.loss import DEFAULT as LOSS_DEFAULT, check_implementation
from ...workloads import dropout
from ...workloads.precision import check_inference_recipe, recipe_for
from ..limits import check_sizes
from .offload import check_offload
from .stack import check_stack

#: The phases a scenario can simulate.
PHASES: tuple[str, ...] = ("prefill", "decode", "train")
#: How a run times its program (docs/program.md).
EXECUTIONS: tuple[str, ...] = ("sum", "schedule")
#: Activation recomputation of a training step.
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


def default_execution() -> str:
    """The execution a run gets when none is given: "schedule" (the program's list schedule
    with residency, fusion and fixed costs) on every chip; a cluster step composes its layer
    kinds' scheduled programs over its pipeline (:mod:`diptych.sim.cluster.timing`); serving
    steps are timed the same way (:class:`diptych.sim.serving.step_time.Replica`)."""
    return "schedule"


def recompute_mode(recompute) -> str:
    """``none``, ``selective`` or ``full`` from a mode or a bool (True: full, the old
    ``--recompute`` flag); raises ValueError naming ``recompute`` otherwise."""
    if recompute is True:
        return "full"
    if recompute is False or recompute is None:
        return "none"
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)} (or a bool: "
                         f"True = full), not {recompute!r}")
    return recompute


def _degree(name: str, v) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


def _flag(name: str, v) -> None:
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be True or False, not {v!r}")


_SP_TP1 = ("sequence_parallel=True needs tensor parallelism (tp > 1), not tp=1: "
           "Megatron-Core splits the sequence over the tensor-parallel ranks")


def sequence_parallel_on(s: "Scenario", tp: int) -> bool:
    """Whether scenario ``s`` runs Megatron-Core's sequence parallelism over ``tp``
    tensor-parallel ranks (the degree the run resolved): ``s.sequence_parallel`` when given,
    else on for training at ``tp > 1`` (as a cluster plan's default,
    :attr:`diptych.sim.cluster.plan.Plan.sequence_parallel`: the NeMo configurations the
    system checks read set ``sequence_parallel: true``, benchmarks/validate_system.py) and
    off otherwise. Raises ValueError naming the field when
    it is asked for at ``tp = 1``."""
    if s.sequence_parallel is None:
        return s.phase == "train" and tp > 1
    if s.sequence_parallel and tp < 2:
        raise ValueError(_SP_TP1)
    return s.sequence_parallel


#: Flat keywords of :meth:`Scenario.of` that make its :class:`~diptych.workloads.moe.Routing`.
MOE_KEYWORDS: tuple[str, ...] = ("moe_skew", "moe_capacity_factor", "moe_pad",
                                  "moe_dispatcher")

#: The degrees of :class:`Parallelism`, in the order ``tp × pp × dp × cp`` fills ``chips``.
DEGREES: tuple[str, ...] = ("chips", "tp", "dp", "pp", "cp", "ep")


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """The parallel degrees a run asks for (None: the default, see the module docstring).

    ``chips`` in all; ``tp`` tensor-parallel; ``dp`` data-parallel (training, or replicas on a
    cluster); ``pp`` pipeline stages, ``cp`` context-parallel and ``ep`` expert-parallel
    ranks (a parallel plan's only: :mod:`diptych.sim.cluster`)."""

    chips: int | None = None
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None

    def __post_init__(self):
        for n in DEGREES:
            _degree(n, getattr(self, n))

    @property
    def plan_only(self) -> bool:
        """True when a degree only a parallel plan has (pp, cp, ep) is above 1."""
        return any(v not in (None, 1) for v in (self.pp, self.cp, self.ep))


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One run's scenario (module docstring).

    ``phase``: prefill (``prompt``: the prompt; the time to first token), decode
    (``prompt``: the context before generation, ``gen`` generated tokens, default 1; the
    time per output token) or train (``seq``: the sequence length, or ``prompt``; one
    optimizer step). ``batch``: sequences (the global batch in training, split over dp).
    ``weights_dtype``/``act_dtype``/``kv_dtype``: the precision asked for (None: the chip's
    default for inference, BF16 for training); ``recipe``: a training precision recipe
    (:data:`~diptych.workloads.precision.RECIPES`; FP8 weights and activations alone mean
    ``fp8-delayed``) or, in prefill and decode, an inference one
    (:data:`~diptych.workloads.precision.INFERENCE_RECIPES`: FP8 linear layers over 16-bit
    activations). ``parallelism``: the degrees.
    ``attention``: ``fused`` (FlashAttention-style) or ``unfused``. ``execution``:
    ``schedule`` (the program's list schedule) or ``sum`` (every op alone from DRAM, times
    added); ``fusion``: fuse elementwise ops into GEMMs (schedule only); ``overlap``: overlap
    collectives with compute. ``recompute``: ``none``, ``selective`` (a parallel plan only)
    or ``full`` (a bool is read as full/none). ``micro_batch``: sequences per training
    micro-batch. ``power_limit``: report a chip with a ``[power]`` table at the clock its TDP
    sustains. ``routing``: a mixture-of-experts model's routing (popularity skew, capacity
    factor; :class:`~diptych.workloads.moe.Routing`, default balanced and dropless).
    ``nvls``, ``attention_kernel``, ``tp_comm_overlap``, ``collective_algorithms``,
    ``elementwise_kernels``, ``kernel_order``, ``tp_overlap_config``: the software stack's settings
    (:mod:`~diptych.sim.run.stack`: NCCL's in-switch all-reduce, the fused-attention kernel,
    Transformer Engine's userbuffers overlap, ``NCCL_ALGO``, whose elementwise kernels, the
    compute kernels on one in-order stream or not),
    applied to the chip before anything is timed.
    ``cross_entropy``: the training loss's implementation (``fused`` or ``unfused``,
    :data:`~diptych.workloads.loss.IMPLEMENTATIONS`: Megatron-Core's
    ``cross_entropy_loss_fusion`` on or off), lowered into the step's passes.
    ``hidden_dropout``, ``attention_dropout``: the training step's dropout probabilities, as
    NeMo's model config names them (:mod:`~diptych.workloads.dropout`: the
    bias-dropout-adds' masks, the attention kernel's in-kernel draw), each in [0, 1); 0, the
    default, lowers none. Training only; attention dropout needs fused attention.
    ``offload``: training state placed in the chip's second memory tier, ``none``,
    ``optimizer`` or ``params`` (:mod:`~diptych.sim.run.offload`, ZeRO-Offload-style).
    ``sequence_parallel``: Megatron-Core's sequence parallelism over the tensor-parallel
    ranks (training only): None, the default, is on for training at ``tp > 1`` (as
    Megatron-Core runs it with Transformer Engine) and off otherwise
    (:func:`sequence_parallel_on`); True asks for it (ValueError in prefill or decode, or
    at ``tp = 1``), False turns it off."""

    phase: str
    batch: int = 1
    prompt: int | None = None
    gen: int | None = None
    seq: int | None = None
    weights_dtype: str | None = None
    act_dtype: str | None = None
    kv_dtype: str | None = None
    recipe: str | None = None
    parallelism: Parallelism = field(default_factory=Parallelism)
    attention: str = "fused"
    execution: str = field(default_factory=default_execution)
    fusion: bool = True
    overlap: bool = True
    recompute: str = "none"
    micro_batch: int | None = None
    power_limit: bool = True
    routing: Routing = field(default_factory=Routing)
    nvls: bool = True
    attention_kernel: str = "default"
    tp_comm_overlap: bool = True
    offload: str = "none"
    collective_algorithms: str | None = None
    cross_entropy: str = LOSS_DEFAULT
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    elementwise_kernels: str = "default"
    kernel_order: str = "default"
    #: the run's own TE userbuffers settings over the chip's ``[tp_overlap]`` table
    #: (:func:`~diptych.sim.run.stack.tp_overlap_settings`; None: the table's)
    tp_overlap_config: str | None = None
    sequence_parallel: bool | None = None
    #: the tensor-parallel layout: Megatron's ``1d`` or Pope et al.'s ``2d`` weight-stationary
    #: FFN split over a torus (:mod:`~diptych.workloads.tp2d`; inference on a torus chip)
    tp_layout: str = "1d"

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {self.phase!r}")
        if self.execution is None:
            object.__setattr__(self, "execution", default_execution())
        if self.execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {', '.join(EXECUTIONS)}, not "
                             f"{self.execution!r}")
        object.__setattr__(self, "recompute", recompute_mode(self.recompute))
        check_attention(self.attention)
        if not isinstance(self.parallelism, Parallelism):
            raise ValueError(f"parallelism must be a Parallelism, not "
                             f"{type(self.parallelism).__name__}")
        for n in ("weights_dtype", "act_dtype", "kv_dtype"):
            if getattr(self, n) is not None:
                check_dtype(getattr(self, n))
        if self.phase != "train":     # ValueError if a recipe is a training one or clashes
            check_inference_recipe(self.recipe, self.weights_dtype, self.act_dtype)
        else:
            recipe_for(self.weights_dtype, self.act_dtype, self.recipe)
        if not isinstance(self.routing, Routing):
            raise ValueError(f"routing must be a Routing, not {type(self.routing).__name__}")
        for n in ("fusion", "overlap", "power_limit"):
            _flag(n, getattr(self, n))
        check_stack(nvls=self.nvls, attention_kernel=self.attention_kernel,
                    tp_comm_overlap=self.tp_comm_overlap,
                    collective_algorithms=self.collective_algorithms,
                    elementwise_kernels=self.elementwise_kernels,
                    kernel_order=self.kernel_order,
                    tp_overlap_config=self.tp_overlap_config)
        check_offload(self.offload, phase=self.phase)
        if self.sequence_parallel is not None:
            _flag("sequence_parallel", self.sequence_parallel)
            if self.sequence_parallel and self.phase != "train":
                raise ValueError(f"sequence_parallel=True applies to training; {self.phase} "
                                 f"lowers no sequence parallelism (leave it None or False)")
            if self.sequence_parallel and self.parallelism.tp == 1:
                raise ValueError(_SP_TP1)
        if self.tp_layout not in TP_LAYOUTS:
            raise ValueError(f"tp_layout must be one of {', '.join(TP_LAYOUTS)}, not "
                             f"{self.tp_layout!r}")
        if self.tp_layout == "2d" and self.phase == "train":
            raise ValueError(INFERENCE_ONLY)
        check_implementation(self.cross_entropy)
        self._check_dropout()
        _degree("batch", self.batch)
        for n in ("prompt", "gen", "seq", "micro_batch"):
            _degree(n, getattr(self, n))
        check_sizes(batch=self.batch, micro_batch=self.micro_batch, prompt=self.prompt,
                    gen=self.gen, seq=self.seq)

    def _check_dropout(self) -> None:
        """ValueError naming the field unless each dropout probability is in [0, 1), and
        nonzero only in training (and, for ``attention_dropout``, with fused attention)."""
        for n in dropout.FIELDS:
            p = dropout.check_probability(n, getattr(self, n))
            object.__setattr__(self, n, p)      # a NumPy number stored as the float it is
            if p and self.phase != "train":
                raise ValueError(f"{n}={p!r} applies to training; {self.phase} drops nothing "
                                 f"(leave it 0)")
        if self.attention_dropout and self.attention != "fused":
            raise ValueError(f"attention_dropout={self.attention_dropout!r} is modelled in the "
                             f"fused attention kernel only, not with attention "
                             f"{self.attention!r}")

    @classmethod
    def of(cls, **fields) -> "Scenario":
        """A scenario from flat keywords, as the command line and the facade spell it: the
        degrees (``chips``, ``tp``, ``dp``, ``pp``, ``cp``, ``ep``) go into its
        :class:`Parallelism`, the MoE routing's (``moe_skew``, ``moe_capacity_factor``,
        ``moe_pad``, ``moe_dispatcher``; None: the default) into its
        :class:`~diptych.workloads.moe.Routing`, every other keyword is a field
        (``recompute`` may be a bool; ``execution`` None is the default)."""
        par = {k: fields.pop(k) for k in DEGREES if k in fields}
        moe = {k[4:]: fields.pop(k) for k in MOE_KEYWORDS if k in fields}
        moe = {k: v for k, v in moe.items() if v is not None}
        if moe:
            if "routing" in fields:
                raise ValueError("give the MoE routing either as routing= or as moe_* "
                                 "keywords, not both")
            fields["routing"] = Routing(**moe)
        if "parallelism" in fields and par:
            raise ValueError("give the degrees either as parallelism= or as keywords, "
                             "not both")
        if par:
            fields["parallelism"] = Parallelism(**par)
        if fields.get("execution", "") is None:
            fields.pop("execution")
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown scenario field(s): {', '.join(sorted(unknown))}")
        return cls(**fields)

    @property
    def tp(self) -> int | None:
        return self.parallelism.tp

    @property
    def context(self) -> int | None:
        """The tokens the run's KV cache (or sequence) reaches: the prompt (prefill), the
        context after ``gen`` tokens (decode), the sequence (train)."""
        if self.phase == "decode":
            return None if self.prompt is None else self.prompt + (self.gen or 1)
        if self.phase == "prefill":
            return self.prompt
        return self.seq if self.seq is not None else self.prompt


__all__ = ["ATTENTION_MODES", "DEGREES", "EXECUTIONS", "PHASES", "Parallelism",
           "RECOMPUTE_MODES", "Scenario", "default_execution", "recompute_mode",
           "sequence_parallel_on"]
