"""A parallelism plan: how a model's training step (or inference) is split over chips.

``tp × pp × dp × cp`` chips (Megatron-Core's decomposition): tensor parallel (``tp``, with
sequence parallelism by default), pipeline parallel (``pp`` stages, each ``v`` virtual stages
under the interleaved schedule), data parallel (``dp`` replicas) and context parallel (``cp``:
each sequence split over ``cp`` ranks, ring attention). Expert parallelism does **not**
multiply the chip count: as in Megatron-Core and DeepSpeed-MoE, the ``ep`` ranks of an expert
group are carved out of the ``cp × dp`` ranks (which are data-parallel for the dense weights),
so ``ep`` must divide ``cp × dp``; the experts are split ``experts / ep`` per rank and
replicated over the ``cp·dp/ep`` expert-data-parallel ranks.

``zero`` is the ZeRO stage over the data-parallel (``dp × cp``) ranks: 0 replicates the
training state, 1 shards the optimizer state, 2 also the gradients, 3 (FSDP) also the weights;
``zero_shards`` shards within groups of that many ranks and replicates across the groups
(hybrid sharding: PyTorch FSDP's ``HYBRID_SHARD``, Megatron's distributed-optimizer
instances), whose gradients are then all-reduced between replicas.

The global batch is ``dp × micro_batch × micro_batches`` sequences. ``schedule`` is
``gpipe``, ``1f1b`` or ``interleaved`` (``virtual_stages = v ≥ 2`` chunks per stage,
Narayanan et al. 2021); ``recompute`` is ``none``, ``selective`` (recompute norm and
activation-function outputs from their saved inputs, Megatron-Core's ``--recompute-modules
layernorm moe_act``; the attention core is already recomputed by FlashAttention's backward,
which is Korthikanti et al. 2022's selective recomputation) or ``full`` (keep each layer's
input, re-run its forward before its backward).

Uneven stages are allowed: by default the layers are spread over the ``pp × v`` model chunks
as evenly as possible, the remainder going to the middle chunks (the first stage also holds
the embedding and the last the head, as Llama 3 405B's 16-stage split does); or give
``layers_per_stage`` explicitly (one count per model chunk, in pipeline order).

``overlap_tp``, ``overlap_dp``, ``overlap_ep``, ``overlap_cp``: whether each kind of
communication hides behind compute (docs/cluster.md, "The step"); ``overlap_tp = None`` (the
default) overlaps tensor-parallel collectives in training only (:meth:`Plan.tp_overlapped`).

:func:`check_plan` validates a plan against a model, a chip count, a batch and a sequence
length, with messages naming the field and its value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..run.offload import OFFLOADS, check_offload  # noqa: F401 (OFFLOADS: plan --offload)

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
#: Rank orders, innermost first (Megatron-Core's ``order``; its default is ``tp-cp-ep-dp-pp``,
#: whose dense decomposition is ``tp-cp-dp-pp``). ``tp-cp-pp-dp`` puts data parallelism
#: outermost instead.
ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")


def check_positive(name: str, v) -> None:
    """Raise ValueError naming ``name`` and the value unless ``v`` is an integer >= 1."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One parallel layout (see the module docstring). Field checks run on construction."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    zero: int = 0
    schedule: str = "1f1b"
    virtual_stages: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    zero_shards: int | None = None
    sequence_parallel: bool = True
    layers_per_stage: tuple[int, ...] | None = None
    order: str = ORDERS[0]
    overlap_tp: bool | None = None
    overlap_dp: bool = True
    overlap_ep: bool = False
    overlap_cp: bool = True
    #: training state in the chip's second memory tier: none, optimizer or params
    #: (:mod:`diptych.sim.run.offload`)
    offload: str = "none"

    def __post_init__(self):
        for n in ("tp", "pp", "dp", "ep", "cp", "virtual_stages", "micro_batch"):
            check_positive(n, getattr(self, n))
        if self.zero_shards is not None:
            check_positive("zero_shards", self.zero_shards)
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be a ZeRO stage 0, 1, 2 or 3 (3 = FSDP), "
                             f"not {self.zero!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, "
                             f"not {self.schedule!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, "
                             f"not {self.recompute!r}")
        check_offload(self.offload)
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        if self.schedule == "interleaved":
            if self.virtual_stages < 2:
                raise ValueError(f"virtual_stages must be at least 2 for the interleaved "
                                 f"schedule, not {self.virtual_stages}")
            if self.pp < 2:
                raise ValueError(f"the interleaved schedule needs pp >= 2, not pp={self.pp}")
        elif self.virtual_stages != 1:
            raise ValueError(f"virtual_stages ({self.virtual_stages}) applies to the "
                             f"interleaved schedule only, not {self.schedule!r}")
        if self.layers_per_stage is not None:
            lps = tuple(self.layers_per_stage)
            if len(lps) != self.pp * self.virtual_stages:
                raise ValueError(f"layers_per_stage must list pp x virtual_stages = "
                                 f"{self.pp * self.virtual_stages} counts, not {len(lps)}")
            for x in lps:
                check_positive("layers_per_stage entry", x)
            object.__setattr__(self, "layers_per_stage", lps)

    def tp_overlapped(self, train: bool) -> bool:
        """Whether a layer's tensor-parallel collectives hide behind its compute:
        ``overlap_tp`` when given, else on for training (Megatron overlaps them with the
        neighbouring GEMMs through sequence-parallel communication overlap) and off for
        prefill and decode, where each all-reduce sits on the dependency chain between a
        layer's GEMMs and the next (the program scheduler of issue 9 is to replace this
        rule with the scheduled op graph)."""
        return train if self.overlap_tp is None else self.overlap_tp

    @property
    def chips(self) -> int:
        """Chips the plan occupies: ``tp × pp × dp × cp`` (EP is carved from dp × cp)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def shards(self) -> int:
        """Data-parallel ranks the ZeRO state is sharded over: ``zero_shards`` (hybrid
        sharding: shard within groups of that many ranks, replicate across them), else all
        ``dp × cp``."""
        return self.zero_shards or self.dp * self.cp

    @property
    def expert_shards(self) -> int:
        """Expert-data-parallel ranks the routed experts' state is sharded over."""
        return max(1, self.shards // self.ep)

    @property
    def chunks(self) -> int:
        """Model chunks (virtual pipeline stages): ``pp × v``."""
        return self.pp * self.virtual_stages

    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches per replica: ``global_batch / (dp × micro_batch)``."""
        per = self.dp * self.micro_batch
        if global_batch % per:
            raise ValueError(f"batch ({global_batch}) must be divisible by dp x micro_batch "
                             f"({self.dp} x {self.micro_batch} = {per}): the global batch is "
                             f"dp x micro_batch x micro_batches")
        return global_batch // per

    def to_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "cp": self.cp,
                "zero": self.zero, "schedule": self.schedule,
                "virtual_stages": self.virtual_stages, "micro_batch": self.micro_batch,
                "recompute": self.recompute, "zero_shards": self.zero_shards,
                "sequence_parallel": self.sequence_parallel,
                "layers_per_stage": list(self.layers_per_stage or ()) or None,
                "order": self.order, "overlap_tp": self.overlap_tp,
                "overlap_dp": self.overlap_dp, "overlap_ep": self.overlap_ep,
                "overlap_cp": self.overlap_cp, "offload": self.offload}

    def describe(self, train: bool = True) -> str:
        """One line: ``tp8 pp4 dp2 ep2, ZeRO-1, 1f1b, mb 1, recompute none``; inference
        (``train=False``) leaves out the training-only fields (``tp1 pp1 dp64 ep64, mb 16``)."""
        sched = (f"interleaved v={self.virtual_stages}" if self.schedule == "interleaved"
                 else self.schedule)
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if not train:
            return " ".join(parts) + f", mb {self.micro_batch}"
        return (" ".join(parts) + f", ZeRO-{self.zero}, {sched}, mb {self.micro_batch}, "
                f"recompute {self.recompute}"
                + (f", offload {self.offload}" if self.offload != "none" else ""))


def split_layers(layers: int, chunks: int) -> tuple[int, ...]:
    """``layers`` over ``chunks`` model chunks as evenly as possible; the remainder goes to the
    chunks nearest the middle (the ends also hold the embedding and the head)."""
    check_positive("chunks", chunks)
    if chunks > layers:
        raise ValueError(f"pp x virtual_stages ({chunks}) must be at most the number of "
                         f"layers ({layers}): every model chunk needs a layer")
    q, r = divmod(layers, chunks)
    mid = (chunks - 1) / 2
    extra = set(sorted(range(chunks), key=lambda i: (abs(i - mid), i))[:r])
    return tuple(q + (1 if i in extra else 0) for i in range(chunks))


def check_plan(plan: Plan, model, *, chips: int, batch: int, seq_len: int,
               phase: str = "train", cluster_chips: int | None = None) -> dict:
    """Validate ``plan`` for ``model`` on ``chips`` chips with a global ``batch`` of sequences
    of ``seq_len`` tokens; return ``{"micro_batches", "layers_per_chunk"}``.

    Raises ValueError naming the field and value: chip count, tensor split (heads, KV heads,
    FFN widths), experts per EP rank, EP within dp × cp, sequence over 2·cp chunks, layers per
    stage, batch over dp × micro_batch, the interleaved schedule's micro-batch multiple of pp,
    and a cluster smaller than the plan."""
    from ...workloads.lower import check_tp

    check_positive("chips", chips)
    check_positive("batch", batch)
    check_positive("seq_len", seq_len)
    if cluster_chips is not None and chips > cluster_chips:
        raise ValueError(f"chips ({chips}) exceeds the cluster's {cluster_chips} chips")
    if plan.chips != chips:
        raise ValueError(f"chips ({chips}) must equal tp x pp x dp x cp = {plan.tp} x "
                         f"{plan.pp} x {plan.dp} x {plan.cp} = {plan.chips}")
    check_tp(model, plan.tp)
    if plan.ep > 1:
        if not model.is_moe:
            raise ValueError(f"ep={plan.ep} needs a mixture-of-experts model; {model.name} is "
                             f"dense (use ep=1)")
        if model.experts % plan.ep:
            raise ValueError(f"ep={plan.ep} must divide the number of experts "
                             f"({model.experts} in {model.name})")
        if (plan.dp * plan.cp) % plan.ep:
            raise ValueError(f"ep={plan.ep} must divide dp x cp = {plan.dp * plan.cp}: expert "
                             f"parallel ranks are carved out of the data/context-parallel ranks")
    if plan.zero_shards is not None:
        d = plan.dp * plan.cp
        if d % plan.zero_shards:
            raise ValueError(f"zero_shards={plan.zero_shards} must divide dp x cp = {d}: the "
                             f"state is sharded within groups of zero_shards ranks")
        if plan.zero_shards % plan.ep:
            raise ValueError(f"zero_shards={plan.zero_shards} must be a multiple of "
                             f"ep={plan.ep} so that expert shards align with expert groups")
    if plan.cp > 1:
        if model.state_layers:
            raise ValueError(f"cp={plan.cp}: context parallelism of {model.name}'s "
                             f"linear-attention or Mamba-2 layers (their state passes from "
                             f"rank to rank) is not modelled; use cp=1")
        if model.sparse_attention:
            raise ValueError(f"cp={plan.cp}: context parallelism of {model.name}'s sparse "
                             f"attention (its indexer scores every rank's keys) is not "
                             f"modelled; use cp=1")
        if phase == "decode":
            raise ValueError(f"cp={plan.cp}: context parallelism splits a prompt or training "
                             f"sequence; decode generates one token per step (use cp=1)")
        if seq_len % (2 * plan.cp):
            raise ValueError(f"cp={plan.cp} splits each sequence into 2 x cp = {2 * plan.cp} "
                             f"load-balanced chunks: seq_len ({seq_len}) is not divisible "
                             f"by {2 * plan.cp}")
    if plan.layers_per_stage is not None:
        if sum(plan.layers_per_stage) != model.layers:
            raise ValueError(f"layers_per_stage {list(plan.layers_per_stage)} sums to "
                             f"{sum(plan.layers_per_stage)}, not {model.name}'s "
                             f"{model.layers} layers")
        lpc = plan.layers_per_stage
    else:
        lpc = split_layers(model.layers, plan.chunks)
    m = plan.micro_batches(batch)
    if plan.schedule == "interleaved" and m % plan.pp:
        raise ValueError(f"the interleaved schedule needs micro_batches ({m}) to be a "
                         f"multiple of pp ({plan.pp})")
    return {"micro_batches": m, "layers_per_chunk": lpc}
