"""What serves: pools of model replicas, colocated or disaggregated, and the KV transfer
between a prefill pool and a decode pool (docs/serving.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ...arch.runtime import IDEAL, RuntimeProfile, load_runtime
from ...workloads.params import (kv_bytes_per_token, kv_cache_bytes, kv_groups,
                                 state_bytes_per_sequence)
from ...workloads.mtp import mtp_module
from ..limits import MAX_REPLICAS
from .afd import AfdLayout, AfdSpec
from .config import ServeConfig
from .kv import kv_budget
from ..run.scenario import Scenario
from ..run.variant import IDEAL as IDEAL_VARIANT
from .step_time import Replica, make_replica


@dataclass(frozen=True)
class Pool:
    """``replicas`` copies of one replica kind (``replica.chips`` chips each)."""

    replica: Replica
    replicas: int = 1

    def __post_init__(self):
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) \
                or self.replicas < 1:
            raise ValueError(f"replicas must be a positive integer, not {self.replicas!r}")
        if self.replicas > MAX_REPLICAS:
            raise ValueError(f"replicas must be at most {MAX_REPLICAS:,} per pool "
                             f"(sim/limits.py), not {self.replicas:,}")

    @property
    def chips(self) -> int:
        return self.replica.chips * self.replicas

    def to_dict(self, role: str) -> dict:
        """The pool as a serving result states it (``info.pools``): ``role`` (mixed, prefill
        or decode), ``chip``, ``tp`` (chips per replica), ``replicas``, ``chips`` (in the
        pool), ``precision`` (the dtypes of the weights, activations, KV cache and
        accumulation; under an inference recipe its name, ``linear`` and
        ``unquantized_weights``) and ``ep``, ``attention``, ``moe_skew`` (the experts' load
        spread after any redundant experts; docs/serving.md "Expert parallelism"),
        ``expert_slots``, and ``variant`` (what the replica leaves out,
        :class:`~diptych.sim.run.variant.Variant`'s fields) when it leaves anything out
        (``serve --ideal``, :mod:`.ideal`)."""
        r, p = self.replica, self.replica.precision
        x = r.experts
        return {"role": role, "chip": r.chip.name, "tp": r.tp, "replicas": self.replicas,
                "chips": self.chips, "ep": x.ep,
                "attention": "dp" if r.dp > 1 else "tp",
                **({"moe_skew": x.routing.skew, "expert_slots": r.model.experts}
                   if r.model.is_moe else {}),
                "precision": {"weights": p.weights, "activations": p.activations, "kv": p.kv,
                              "accumulation": p.accumulation,
                              **({"recipe": p.recipe, "linear": p.linear,
                                  "unquantized_weights": p.unquantized_weights}
                                 if p.inference_recipe else {})},
                **({} if r.variant.is_default else {"variant": asdict(r.variant)})}


@dataclass(frozen=True)
class Deployment:
    """Colocated (``pool``) or disaggregated (``prefill`` and ``decode`` pools)."""

    pool: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None
    #: attention–FFN disaggregation (:mod:`.afd`): ``pool`` is then the attention pool (one
    #: replica, ``afd_side="attention"``) and this the FFN pool and the micro-batches
    afd: AfdLayout | None = None

    def __post_init__(self):
        if (self.pool is None) == (self.prefill is None or self.decode is None):
            raise ValueError("a deployment is one pool, or a prefill pool and a decode pool")
        if self.afd is not None and (self.pool is None or self.pool.replicas != 1
                                     or self.pool.replica.afd_side != "attention"):
            raise ValueError("attention-FFN disaggregation serves one attention replica "
                             "(afd_side='attention') beside its FFN pool; prefill/decode "
                             "disaggregation and --replicas are not combined with it")
        if self.pool is None and self.prefill.replica.model.name != \
                self.decode.replica.model.name:
            raise ValueError("the prefill and decode pools must serve the same model")

    @property
    def disaggregated(self) -> bool:
        return self.pool is None

    @property
    def pools(self) -> list[Pool]:
        return [self.pool] if self.pool is not None else [self.prefill, self.decode]

    @property
    def roles(self) -> list[tuple[str, Pool]]:
        """``[("mixed", pool)]``, or ``[("prefill", ...), ("decode", ...)]``, or under AFD
        ``[("attention", ...), ("ffn", ...)]``."""
        if self.afd is not None:
            return [("attention", self.pool), ("ffn", Pool(self.afd.ffn, 1))]
        if self.pool is not None:
            return [("mixed", self.pool)]
        return [("prefill", self.prefill), ("decode", self.decode)]

    @property
    def chips(self) -> int:
        return sum(p.chips for p in self.pools) + (self.afd.ffn.chips if self.afd else 0)

    def with_replicas(self, **changes) -> "Deployment":
        """This deployment with every pool's replica changed by ``changes`` (fields of
        :class:`~.step_time.Replica`: a waterfall's variant, a runtime's all-reduce), an
        attention-FFN layout's FFN replica too."""
        def pool(p: Pool) -> Pool:
            return replace(p, replica=replace(p.replica, **changes))
        if self.disaggregated:
            return Deployment(prefill=pool(self.prefill), decode=pool(self.decode))
        afd = (None if self.afd is None else
               replace(self.afd, ffn=replace(self.afd.ffn, **changes)))
        return Deployment(pool=pool(self.pool), afd=afd)

    @property
    def model(self):
        return self.pools[0].replica.model

    def runtime(self) -> RuntimeProfile:
        """The serving runtime the pools' chips name (``[overheads] serving_runtime``; a chip
        without the table: ``ideal``). ValueError when the pools' chips name different ones
        (a deployment runs one serving stack: name it)."""
        names = {p.replica.chip.name: (p.replica.chip.overheads.serving_runtime
                                       if p.replica.chip.overheads else IDEAL.name)
                 for _, p in self.roles}      # an AFD FFN pool's chip too
        if len(set(names.values())) > 1:
            said = ", ".join(f"{c} {n}" for c, n in names.items())
            raise ValueError(f"the pools' chips name different serving runtimes ({said}); "
                             f"choose one with --runtime")
        return load_runtime(next(iter(names.values())))

    def describe(self) -> str:
        """The deployment in words (a sweep's plot title, ``deployment`` in the JSON),
        ``(ideal)`` after it when every replica leaves every overhead out (``--ideal``)."""
        ideal = all(p.replica.variant == IDEAL_VARIANT for _, p in self.roles)
        return self._describe() + (" (ideal)" if ideal else "")

    def _describe(self) -> str:
        if self.afd is not None:
            a, f = self.pool.replica, self.afd.ffn
            fp = f"ep {f.experts.ep}" if f.experts.ep > 1 else f"tp {f.tp}"
            ap = f"dp {a.dp}" if a.dp > 1 else f"tp {a.tp}"
            return (f"{a.model.name}: attention on {a.chips} x {a.chip.name} ({ap}), "
                    f"FFN on {f.chips} x {f.chip.name} ({fp}), "
                    f"{self.afd.spec.microbatches} micro-batches")
        if self.pool is not None:
            r = self.pool.replica
            n = f"{self.pool.replicas} x " if self.pool.replicas > 1 else ""
            return f"{r.model.name} on {n}{r.chip.name} ({_par(r)})"
        p, d = self.prefill, self.decode
        return (f"{p.replica.model.name}: prefill on {p.replicas} x {p.replica.chip.name} "
                f"({_par(p.replica)}), decode on {d.replicas} x {d.replica.chip.name} "
                f"({_par(d.replica)})")


def _par(r: Replica) -> str:
    """A replica's parallelism in words: ``tp 2``, ``ep 8, dp attention``."""
    if r.experts.ep > 1:
        return f"ep {r.experts.ep}, {'dp' if r.dp > 1 else 'tp'} attention"
    return f"tp {r.tp}" + (f" x dp {r.dp}" if r.dp > 1 else "")


def colocated(chip, model, *, tp: int = 1, replicas: int = 1, **precision) -> Deployment:
    """One pool of ``replicas`` × ``tp`` chips (precision keywords as ``diptych run``)."""
    s = Scenario.of(phase="decode", tp=tp, **precision)
    return Deployment(pool=Pool(make_replica(chip, model, s), replicas))


def fit_tp(chip, model, cfg: ServeConfig | None = None, *, precision: dict | None = None,
           attention: str = "fused") -> int:
    """The fewest tensor-parallel chips whose memory holds the weights, the activations, the
    reserve and a KV cache of at least one step's tokens (``max_batched_tokens``)."""
    from ...workloads import load_model
    from ...workloads.lower import valid_tp_degrees

    cfg = cfg or ServeConfig()
    m = load_model(model)
    spec = cfg.speculative
    last = None
    for t in valid_tp_degrees(m, 64):
        r = make_replica(chip, m, Scenario.of(phase="decode", tp=t, attention=attention,
                                              **(precision or {})))
        # an MTP draft's modules are resident beside the target (a draft model is not
        # counted here: serve's KV budget counts it)
        mtp = replace(r, model=mtp_module(m)) if spec is not None and spec.mtp else None
        try:
            b = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                          max_batched_tokens=cfg.max_batched_tokens,
                          reserve_fraction=cfg.kv_reserve_fraction, draft=mtp)
        except ValueError as exc:
            last = exc
            continue
        if b.tokens >= cfg.max_batched_tokens:
            return t
    raise ValueError(f"{m.name} does not fit {getattr(r.chip, 'name', chip)} at any tensor-"
                     f"parallel degree up to 64" + (f" ({last})" if last else ""))


def kv_transfer(dep: Deployment, link: dict):
    """KV transfer time from a prefill instance to a decode instance over the chips' links
    (the request's cache after its shared prefix; a sliding or chunked layer sends at most
    its window, :func:`~diptych.workloads.params.kv_cache_bytes`; a linear-attention layer
    its fixed state, :func:`~diptych.workloads.params.state_bytes_per_sequence`): the sending
    group's and the receiving group's aggregate link bandwidth (the slower), plus one link
    latency; overlapped layer by layer with the prefill when the decode side had room as the
    prefill finished (the first layer's KV can leave once that layer is done)."""
    pr, dr = dep.prefill.replica, dep.decode.replica
    per_tok = kv_bytes_per_token(pr.model, pr.precision.kv)
    # a layer with a window sends only the tokens it still holds (min(tokens, window))
    windowed = any(w is not None for _, w, _ in kv_groups(pr.model))
    # a linear-attention layer sends its fixed state, once per request
    state = state_bytes_per_sequence(pr.model, pr.precision.activations)
    bw = min(pr.tp * pr.chip.interconnect.sustained_bytes_per_s_per_direction,
             dr.tp * dr.chip.interconnect.sustained_bytes_per_s_per_direction)
    if bw <= 0:
        bad = pr.chip if pr.chip.interconnect.bytes_per_s_per_direction <= 0 else dr.chip
        raise ValueError(f"chip {bad.name!r} has no chip-to-chip links; it cannot send or "
                         f"receive a KV cache in a disaggregated deployment")
    lat = max(pr.chip.interconnect.latency_us, dr.chip.interconnect.latency_us) * 1e-6
    layers = pr.model.layers
    pj = pr.chip.energy.pj_per_link_bit

    def transfer(r, src, dst, t: float) -> float:
        nbytes = (kv_cache_bytes(pr.model, pr.precision.kv, r.computed - r.shared) if windowed
                  else (r.computed - r.shared) * per_tok)
        if state:
            nbytes += state
        tx = nbytes / bw + lat
        free = max(src.link_free, dst.in_free)
        if t == r.pf_end:
            span = r.pf_end - r.pf_start
            start = max(free, t - span * (layers - 1) / layers)
            end = max(start + tx, t + tx / layers)
        else:
            end = max(free, t) + tx
        src.link_free = dst.in_free = end
        link["bytes"] += nbytes
        link["energy_j"] += nbytes * 8 * pj * 1e-12
        return end

    return transfer


def afd_deployment(attention_chip, ffn_chip, model, spec: AfdSpec, *, attention: str = "fused",
                   redundant_experts: int = 0, moe_skew: float = 0.0,
                   **precision) -> Deployment:
    """Attention–FFN disaggregation (:mod:`.afd`): the attention pool one tensor-parallel
    group of ``spec.attention_chips`` chips of ``attention_chip`` (``attention_layout
    "dp"``: that many one-chip data-parallel attention ranks); the FFN pool
    ``spec.ffn_chips`` chips of ``ffn_chip``, a dense MLP tensor-parallel over them, a MoE
    model's experts expert-parallel (whole experts per chip, ``redundant_experts`` and
    ``moe_skew`` as ``--ep``'s). Both pools use the summed execution (the pipeline needs
    each layer's time on each pool). Precision keywords as ``diptych run``."""
    from .ep import EpSpec, ep_replica

    dp = spec.attention_chips if spec.attention_layout == "dp" else 1
    s = Scenario.of(phase="decode", tp=spec.attention_chips // dp, attention=attention,
                    execution="sum", **precision)
    att = replace(make_replica(attention_chip, model, s), afd_side="attention", dp=dp)
    m = att.model
    if not m.is_moe and (redundant_experts or moe_skew):
        raise ValueError(f"--redundant-experts/--moe-skew need a mixture-of-experts model; "
                         f"{m.name} is dense")
    f = make_replica(ffn_chip, model, Scenario.of(phase="decode", tp=spec.ffn_chips,
                                                  attention=attention, execution="sum",
                                                  **precision))
    if m.is_moe and spec.ffn_chips > 1:
        f = ep_replica(f, EpSpec(spec.ffn_chips, "tp", redundant_experts, moe_skew))
    elif redundant_experts or moe_skew:
        raise ValueError("--redundant-experts/--moe-skew spread experts over expert-parallel "
                         "ranks; give --ffn-chips > 1")
    return Deployment(pool=Pool(att, 1), afd=AfdLayout(f, spec))
