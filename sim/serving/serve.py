"""The library entry point behind ``diptych serve``: :func:`serve`.

A :class:`Deployment` says what serves (one replica kind × ``replicas``, or a prefill pool and
a decode pool), a :class:`Load` what arrives, a :class:`~.config.ServeConfig` how the engine
schedules. :func:`serve` builds the instances, their oracles (:mod:`.oracle`) and KV budgets
(:mod:`.kv`), draws the requests (:mod:`.requests`), runs the event loop (:mod:`.engine`) and
returns a :class:`ServeResult` (its :meth:`~ServeResult.to_dict` is the ``--json`` output).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .. import energy_parts as EP
from .config import ServeConfig
from .deployment import Deployment, Pool, colocated, fit_tp, kv_transfer
from .batch_tuning import tuned_max_batch
from .engine import Instance, Req, run_loop
from .kv import KvBudget, kv_budget
from .kv_tier import (KvTier, check_offload, kv_tiers_info, resolve_offload, tier_blocks,
                      tier_spec)
from .metrics import (FILL_LIMIT, fill_fraction, mean_in_system, queue_series,
                      request_metrics, stats)
from .power import StepPowerLimit
from .prefix_cache import PrefixCache, prefix_cache_info
from ..run.scenario import Scenario
from .step_time import DirectStepTimer, Replica, make_replica
from .afd import (AfdLayout, AfdTimer, FfnSide, OnAttentionPool, afd_info,
                  check_ffn_fits)
from .ep import ExpertPart, LockstepTimer
from .grid_timer import GridStepTimer, GridSpec
from .requests import Load, draw_requests
from ...arch.sampler import engine_buffer_bytes
from ...workloads.mtp import mtp_module

__all__ = ["Deployment", "Load", "StepTimerCache", "Pool", "ServeResult", "colocated", "fit_tp",
           "serve"]

ORACLES = ("grid", "direct")

@dataclass
class ServeResult:
    """Metrics of one run (see :mod:`.metrics` for definitions)."""

    deployment: str
    load: str
    requests: int
    chips: int
    duration_s: float
    ttft_s: dict
    tpot_s: dict
    e2e_s: dict
    itl_s: dict
    tokens_per_s: float
    tokens_per_s_per_chip: float
    input_tokens_per_s: float
    requests_per_s: float
    goodput_rps: float
    slo_attainment: float
    meets_slo: bool
    tokens_per_j: float
    energy_j: float
    kv_peak_fraction: float
    kv_mean_fraction: float
    preemptions: int
    swap_bytes: float
    mean_in_system: float
    queue: dict
    kv: list[dict]
    slo: dict
    config: dict
    info: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: ``energy_j`` by component (J, every chip; sums to it; sim/energy_parts.py), and the
    #: same per output token (sums to 1 / ``tokens_per_j``); empty when a step timer gave
    #: no breakdown
    energy_breakdown_j: dict = field(default_factory=dict)
    energy_breakdown_j_per_token: dict = field(default_factory=dict)
    waterfall: dict | None = None
    instances: list = field(default_factory=list, repr=False)
    reqs: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("instances", "reqs")}
        return d


class StepTimerCache:
    """One oracle per (replica, kind); share it across runs (a QPS sweep) to reuse vertices."""

    def __init__(self, kind: str = "grid", simulate: Callable | None = None,
                 grid: GridSpec | None = None, progress: Callable[[int], None] | None = None):
        if kind not in ORACLES:
            raise ValueError(f"oracle must be one of {', '.join(ORACLES)}, not {kind!r}")
        self.kind = kind
        self.simulate = simulate
        self.grid = grid
        self.progress = progress
        self._o: dict = {}
        self._afd: dict = {}

    def get(self, replica: Replica):
        """The oracle of ``replica``; lockstep data-parallel ranks (``replica.dp > 1``) time
        a step as their busiest rank's on the rank's own oracle (:mod:`.ep`)."""
        o = self._o.get(replica)
        if o is None:
            if self.kind == "direct":
                o = DirectStepTimer(replica, self.simulate)
            else:
                o = GridStepTimer(replica, self.simulate, self.grid, progress=self._tick)
            if replica.dp > 1:      # the experts' part apart: the frame split (:mod:`.ep`)
                part = (ExpertPart(replica, self.simulate, exact=self.kind == "direct")
                        if replica.experts.ep > 1 else None)
                o = LockstepTimer(o, replica.dp, part)
            self._o[replica] = o
        return o

    def get_afd(self, replica: Replica, layout: AfdLayout) -> AfdTimer:
        """The step timer of an AFD deployment's attention replica beside ``layout``'s FFN
        pool (:mod:`.afd`): on the grid, the attention side's blocks interpolated by a
        grid oracle of its own and the FFN side's on a token axis; direct, both simulated."""
        key = (replica, layout)
        o = self._afd.get(key)
        if o is None:
            # the attention side's grid and the FFN side's token axis depend on their
            # replica only: shared by every layout (m, k) that uses them (the ratio search)
            grid = self.kind == "grid"
            att = None
            if grid:
                att = self._o.get(("afd-attention", replica))
                if att is None:
                    att = self._o[("afd-attention", replica)] = GridStepTimer(
                        replica, self.simulate, self.grid, progress=self._tick)
            ffn = self._o.get(("afd-ffn", layout.ffn))
            if ffn is None:
                ffn = self._o[("afd-ffn", layout.ffn)] = FfnSide(
                    layout.ffn, self.simulate, (self.grid or GridSpec()) if grid else None)
            o = self._afd[key] = AfdTimer(replica, layout.ffn, layout.spec, self.simulate,
                                          oracle=att, ffn_side=ffn)
        return o

    def _tick(self, _n: int) -> None:
        if self.progress is not None:
            self.progress(self.simulations)

    @property
    def simulations(self) -> int:
        # an AFD timer's parts are counted in _o (shared); a direct one's attention memo here
        return (sum(o.simulations for o in self._o.values())
                + sum(o.own_simulations for o in self._afd.values()))


def _instances(pool: Pool, role: str, cfg: ServeConfig, oracles: StepTimerCache, start: int,
               prefix_blocks: int, draft: Replica | None, rng,
               prefix_tokens: int = 0, afd: AfdLayout | None = None,
               lengths: tuple[int, int] | None = None
               ) -> tuple[list[Instance], KvBudget]:
    """The instances of ``pool`` in ``role`` and their KV budget. ``lengths``: the requests'
    mean prompt and output lengths, by which a runtime with ``batch_size_tuning`` caps the
    batch (:mod:`.batch_tuning`)."""
    r = pool.replica
    draft_timer = None
    if draft is not None:
        draft_timer = oracles.get(draft) if afd is None else _afd_draft(draft, afd, oracles)
    if afd is not None:
        mtp = (replace(afd.ffn, model=draft.model) if draft is not None
               and draft.model.mtp_module else None)
        check_ffn_fits(afd.ffn, afd.spec, cfg.kv_reserve_fraction, draft=mtp)
    # the engine's sampler's buffers, allocated for its max batch before it sizes the cache,
    # and the cache sized as the runtime's engine sizes it
    budget = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                       max_batched_tokens=cfg.max_batched_tokens,
                       reserve_fraction=cfg.kv_reserve_fraction, draft=draft,
                       engine_bytes=engine_buffer_bytes(r.sampler, cfg.max_batch,
                                                        r.model.vocab_size, r.tp),
                       sizing=cfg.runtime.kv_sizing,
                       process_bytes=cfg.runtime.process_gib * 2.0 ** 30)
    prefix_blocks *= budget.layout.units_per_block     # the pinned prefix: every layer
    if prefix_blocks >= budget.blocks:
        raise ValueError(f"the shared prefix ({prefix_blocks} blocks) does not fit the KV "
                         f"cache of {r.name} ({budget.blocks} blocks); lower --prefix-share")
    mode = resolve_offload(cfg.kv_offload, r.chip, cfg.scheduler)
    if cfg.kv_admission == "reserve" and role == "mixed":
        mode = "none"     # reserve keeps the cache in the first tier (explicit tiers refused)
    if r.dp > 1 and (mode != "none" or prefix_tokens):
        # data-parallel attention ranks keep a cache each; the tiers and the prefix cache are
        # one engine-wide pool, so they are not split over ranks yet
        if cfg.kv_offload == "auto" and not prefix_tokens:
            mode = "none"
        else:
            what = "--prefixes" if prefix_tokens else f"--kv-offload {cfg.kv_offload}"
            who, alt = ((f"--afd-attention dp ({r.dp} ranks)", "--afd-attention tp")
                        if afd is not None else
                        (f"expert parallelism's data-parallel attention (--ep {r.dp})",
                         "--ep-attention tp"))
            raise ValueError(f"{what} with {who} is not modelled yet (each rank keeps its own "
                             f"KV cache); use {alt} or leave it out")
    spec = tier_spec(r.chip) if mode != "none" else None
    t2 = tier_blocks(spec, budget.block_bytes) if spec is not None else 0
    # the third tier ([dram3]) behind the second: KV spills there when the second is full
    spec3 = tier_spec(r.chip, "dram3") if spec is not None and t2 else None
    t3 = tier_blocks(spec3, budget.block_bytes) if spec3 is not None else 0
    spec3 = spec3 if t3 else None
    if mode == "tier":
        budget = replace(budget, tier2_blocks=t2, tier3_blocks=t3)
    if prefix_tokens:
        _check_prefixes(cfg, budget, prefix_tokens, r.name)
    out = []
    tuned = _batch_tuning(cfg, budget, lengths)     # the executor's runtime max batch
    if tuned is not None:
        cfg = replace(cfg, max_batch=tuned[1])
    # data-parallel attention ranks: each its own cache and step budget (the budget is one
    # rank's); the replica's engine holds the ranks' sum (:mod:`.ep`)
    rcfg = cfg if r.dp == 1 else replace(cfg, max_batched_tokens=cfg.max_batched_tokens * r.dp,
                                         max_batch=cfg.max_batch * r.dp)
    oracle = oracles.get(r) if afd is None else oracles.get_afd(r, afd)
    chips, static_w = r.chips, r.chip.energy.static_w
    if afd is not None:     # the instance's chips: both pools; idle power: theirs
        f = afd.ffn
        chips = r.chips + f.chips
        static_w = (r.chips * static_w + f.chips * f.chip.energy.static_w) / chips
    for k in range(pool.replicas):
        tier = (KvTier(spec, mode, blocks=t2, tier1_blocks=budget.blocks,
                       block_bytes=budget.block_bytes, spec3=spec3, blocks3=t3)
                if spec is not None and t2 else None)
        pc = (PrefixCache(cfg.prefixes, prefix_tokens // cfg.kv_block_tokens, budget.block_bytes,
                          store=tier if tier is not None and not tier.pooled else None,
                          tier3=tier is not None and spec3 is not None)
              if prefix_tokens else None)
        out.append(Instance(start + k, role, oracle, rcfg, chips=chips, tier=tier,
                            blocks=budget.pool_blocks * r.dp, block_bytes=budget.block_bytes,
                            static_w=static_w,
                            draft=draft_timer,
                            rng=rng, prefix_blocks=prefix_blocks * r.dp, layout=budget.layout,
                            prefix_cache=pc,
                            chunk_tokens=cfg.max_batched_tokens if r.dp > 1 else None,
                            power=(None if r.variant.no_power_limit or r.chip.power is None
                                   or afd is not None else StepPowerLimit(r.chip))))
    return out, budget


def _batch_tuning(cfg: ServeConfig, budget: KvBudget, lengths: tuple[int, int] | None
                  ) -> tuple[int, int] | None:
    """``(requests the cache holds, runtime max batch)`` under a runtime with
    ``batch_size_tuning`` (:mod:`.batch_tuning`): requests of the mean ``lengths`` (prompt,
    output) in the first tier's blocks (one rank's cache, as the budget); None without it."""
    if not cfg.runtime.batch_size_tuning or lengths is None:
        return None
    per = budget.layout.max_blocks(sum(lengths), 0, lengths[0])
    return tuned_max_batch(cfg.max_batch, budget.blocks, per)


def _afd_draft(draft: Replica, afd: AfdLayout, oracles: StepTimerCache):
    """The draft's step timer beside an AFD deployment: it runs where its layers live. The
    target's MTP module (a layer as the target's) is split as the target is — its attention,
    projection and head on the attention pool, its FFN (experts) on the FFN pool, through
    the same ping-pong pipeline (:class:`~.afd.AfdTimer` of the module); a draft model is
    resident on the attention pool, beside the KV cache it shares the blocks of, the FFN
    pool idle meanwhile (:class:`~.afd.OnAttentionPool`)."""
    if draft.model.mtp_module:
        return oracles.get_afd(draft, AfdLayout(replace(afd.ffn, model=draft.model),
                                                afd.spec))
    s = afd.spec
    return OnAttentionPool(oracles.get(draft), s.attention_chips, s.ffn_chips,
                           afd.ffn.chip.energy.static_w)


def _check_prefixes(cfg: ServeConfig, budget: KvBudget, tokens: int, name: str) -> None:
    """Refuse ``--prefixes`` where the cache's rules do not hold (ValueError naming it)."""
    if budget.layout.per_request:
        raise ValueError(f"--prefixes {cfg.prefixes}: {name}'s cache has windowed layers or "
                         f"per-sequence state, which the prefix cache does not model; use "
                         f"--prefixes 0 (one pinned prefix)")
    if tokens // cfg.kv_block_tokens >= budget.pool_blocks:
        raise ValueError(f"--prefixes {cfg.prefixes}: one prefix of {tokens} tokens does not "
                         f"fit the KV cache of {name} ({budget.pool_blocks} blocks of "
                         f"{cfg.kv_block_tokens} tokens); lower --prefix-share")


def prefix_ids(cfg: ServeConfig, prompts: np.ndarray, given: np.ndarray | None = None,
               source: str = "") -> tuple[int, np.ndarray]:
    """``--prefixes N``: the tokens of every prefix (``prefix_share`` × the mean prompt, whole
    blocks) and each request's prefix: a trace's ``prefix_id`` column (``given``, from
    ``source``; each id below N), else uniform over N from its own stream (``[seed, 2]``);
    −1 for a prompt no longer than the prefix. ValueError when a prefix is under a block or
    a trace's id is not below N."""
    bs = cfg.kv_block_tokens
    tokens = int(cfg.prefix_share * float(prompts.mean()) // bs) * bs if len(prompts) else 0
    if tokens < bs:
        raise ValueError(f"--prefixes {cfg.prefixes}: --prefix-share {cfg.prefix_share:g} of "
                         f"the mean prompt is under one {bs}-token block; raise it")
    if given is not None:
        if len(given) and int(given.max()) >= cfg.prefixes:
            raise ValueError(f"{source}: prefix_id {int(given.max())} is not below --prefixes "
                             f"{cfg.prefixes}; give --prefixes {int(given.max()) + 1} or more")
        pid = given.copy()
    else:
        pid = np.random.default_rng([cfg.seed, 2]).integers(0, cfg.prefixes, len(prompts))
    pid[prompts <= tokens] = -1
    return tokens, pid


def _draft_replica(cfg: ServeConfig, target: Replica) -> Replica | None:
    s = cfg.speculative
    if s is None or s.draft is None:
        return None
    if s.mtp:       # the target's own MTP module, on the same chips (workloads/mtp.py)
        return replace(target, model=mtp_module(target.model))
    p = target.precision
    d = make_replica(target.chip, s.draft,
                     Scenario.of(phase="decode", tp=target.tp, kv_dtype=p.kv,
                                 attention=target.attention,
                                 **({"recipe": p.recipe} if p.inference_recipe else
                                    {"weights_dtype": p.weights, "act_dtype": p.activations})))
    # the draft runs as its target does: its variant and all-reduce, beside each
    # data-parallel rank
    return replace(d, variant=target.variant, dp=target.dp, all_reduce=target.all_reduce,
                   sampler=target.sampler)


def resolve_config(deployment: Deployment, cfg: ServeConfig | None = None) -> ServeConfig:
    """``cfg`` (None: the defaults) as :func:`serve` runs it: a runtime left open is the
    deployment's chip's (:meth:`Deployment.runtime`), the prompt scheduling left open the
    runtime's (:meth:`ServeConfig.resolved`)."""
    cfg = cfg or ServeConfig()
    return cfg.resolved(deployment.runtime() if cfg.runtime is None else cfg.runtime)


def serve(deployment: Deployment, load: Load, cfg: ServeConfig | None = None, *,
          oracles: StepTimerCache | None = None, oracle: str = "grid",
          simulate: Callable | None = None, progress: Callable[[int, int], None] | None = None,
          waterfall: bool = False) -> ServeResult:
    """Simulate ``load`` served by ``deployment`` under ``cfg`` (module docstring); a
    ``cfg.runtime`` of None is the deployment's chip's (:meth:`Deployment.runtime`).

    ``oracles`` shares step-time oracles between runs (else a new
    :class:`StepTimerCache` of kind ``oracle`` over ``simulate``, the engine by default).
    ``progress(done, total)`` is called as requests complete. ``waterfall``: add the serving
    waterfall (:mod:`~diptych.sim.serving.waterfall`; the load served six more times).
    """
    cfg = resolve_config(deployment, cfg)
    oracles = oracles or StepTimerCache(oracle, simulate)
    res = _serve(deployment, load, cfg, oracles, progress)
    if waterfall:
        from .waterfall import serving_waterfall
        res.waterfall = serving_waterfall(
            res, deployment, load, cfg, lambda d, c: _serve(d, load, c, oracles, None))
    return res


def _serve(deployment: Deployment, load: Load, cfg: ServeConfig, oracles: StepTimerCache,
           progress) -> ServeResult:
    """:func:`serve` of a resolved ``cfg`` on ``oracles`` (no waterfall)."""
    # the runtime's engine runs the tensor-parallel all-reduces (its custom kernels or NCCL)
    # and samples each step's tokens with its own kernels
    deployment = deployment.with_replicas(all_reduce=cfg.runtime.all_reduce,
                                          sampler=cfg.runtime.sampler)
    model = deployment.model
    rng = np.random.default_rng(cfg.seed)
    arr, pr, out, info = draw_requests(load, model.max_position_embeddings, rng)
    trace_pid = info.pop("prefix_id", None)
    if trace_pid is not None and not cfg.prefixes:
        raise ValueError(f"{load.trace}: the trace's prefix_id column names the prefixes its "
                         f"requests share; give --prefixes N (above its largest id) and "
                         f"--prefix-share to cache them")
    n = len(pr)
    bs = cfg.kv_block_tokens
    shared = (np.floor(cfg.prefix_share * pr / bs) * bs).astype(np.int64)
    shared = np.minimum(shared, (pr - 1) // bs * bs)
    prefix_blocks = int(shared.max()) // bs if n else 0
    prefix_tokens, pid = 0, None
    if cfg.prefixes:                # several prefixes, cached LRU (prefix_cache.py)
        if deployment.disaggregated:
            raise ValueError(f"--prefixes {cfg.prefixes}: the prefix cache serves colocated "
                             f"replicas only; drop --prefill-chip/--decode-chip or use "
                             f"--prefixes 0")
        prefix_tokens, pid = prefix_ids(cfg, pr, trace_pid, str(load.trace))
        shared = np.zeros_like(pr)
        prefix_blocks = 0
    spec_rng = np.random.default_rng([cfg.seed, 1])

    check_offload(cfg.kv_offload, [p.replica.chip for p in deployment.pools], cfg.scheduler)
    # the tuner's moving averages, cast to integers as the executor casts them
    lengths = (int(pr.mean()), int(out.mean())) if n else None
    instances: list[Instance] = []
    budgets: list[tuple[str, KvBudget]] = []
    prefill_pool = decode_pool = None
    if deployment.disaggregated:
        for pool, role in ((deployment.prefill, "prefill"), (deployment.decode, "decode")):
            d = _draft_replica(cfg, pool.replica) if role == "decode" else None
            inst, b = _instances(pool, role, cfg, oracles, len(instances), prefix_blocks, d,
                                 spec_rng, lengths=lengths)
            instances += inst
            budgets.append((role, b))
        prefill_pool = [i for i in instances if i.role == "prefill"]
        decode_pool = [i for i in instances if i.role == "decode"]
    else:
        pool = deployment.pool
        afd = deployment.afd
        inst, b = _instances(pool, "mixed", cfg, oracles, 0, prefix_blocks,
                             _draft_replica(cfg, pool.replica), spec_rng, prefix_tokens, afd,
                             lengths=lengths)
        instances += inst
        budgets.append(("mixed", b))
    _check_fit(pr, out, shared, cfg, budgets)
    tuning = {role: t for role, b in budgets
              if (t := _batch_tuning(cfg, b, lengths)) is not None}
    if tuning:
        info = {**info, "batch_size_tuning": {
            role: {"requests_fit": fit, "max_batch": mb} for role, (fit, mb) in tuning.items()}}

    reqs = [Req(i, float(arr[i]), int(pr[i]), int(out[i]), int(shared[i])) for i in range(n)]
    if pid is not None:
        for r, p in zip(reqs, pid.tolist()):
            r.pid = p
    known = [r for r in reqs if not math.isnan(r.arrival)]
    next_request = None
    if load.concurrency is not None:
        c = min(load.concurrency, n)
        for k in range(c):
            reqs[k].arrival = 0.0
            reqs[k].client = k
        known = reqs[:c]
        state = {"next": c}

        def next_request(fin: Req, t: float):
            i = state["next"]
            if i >= n or (load.duration_s is not None and t >= load.duration_s):
                return None
            state["next"] = i + 1
            r = reqs[i]
            r.arrival = t
            r.client = fin.client
            return r

    afd_before = (dict(instances[0].oracle.totals) if deployment.afd is not None else None)
    link = {"energy_j": 0.0, "bytes": 0.0}
    transfer = kv_transfer(deployment, link) if deployment.disaggregated else None
    total = n
    tick = (lambda done: progress(done, total)) if progress is not None else None
    run_loop(instances, known, next_request=next_request, prefill_pool=prefill_pool,
             decode_pool=decode_pool, transfer=transfer, progress=tick)
    done = [r for r in reqs if r.finish_t >= 0]
    if not done:
        raise ValueError("no request completed")
    if afd_before is not None:      # the layout, utilisation and link of this run's steps
        info = {**info, "afd": afd_info(instances[0].oracle, afd_before)}
    return _result(deployment, load, cfg, instances, done, budgets, link, info, oracles)


#: What every serving result states about its setup (``info`` of a run, of a sweep):
#: the scheduler, how it schedules prompts, the runtime profile, the execution model and
#: each pool's chip, parallelism and precision (:meth:`Pool.to_dict`).
SETUP_KEYS = ("scheduler", "scheduling", "runtime", "execution", "pools")


def setup_info(dep: Deployment, cfg: ServeConfig) -> dict:
    """:data:`SETUP_KEYS` of ``dep`` served under the resolved ``cfg``."""
    return {"scheduler": cfg.scheduler,
            "scheduling": scheduling_text(cfg, disaggregated=dep.disaggregated),
            "runtime": cfg.runtime.name,
            "execution": ", ".join(dict.fromkeys(p.replica.execution for p in dep.pools)),
            "pools": [pool.to_dict(role) for role, pool in dep.roles]}


def scheduling_text(cfg: ServeConfig, disaggregated: bool = False) -> str:
    """How a (resolved) configuration schedules prompts and admits them into the KV cache, in
    words (``info.scheduling``; a disaggregated deployment's pools admit on demand)."""
    if cfg.scheduler == "static":
        return "static batches, prompts padded to the longest"
    if cfg.chunked_prefill and cfg.split_prompts is False:
        how = (f"continuous; whole prompts batched into decode steps "
               f"({cfg.max_batched_tokens} tokens a step, a prompt that does not fit waits)")
    elif cfg.chunked_prefill:
        how = (f"continuous; prompts chunked into decode steps ({cfg.max_batched_tokens} "
               f"tokens a step)")
    else:
        how = "continuous; prefill first (whole prompts in steps of their own, decodes wait)"
    if cfg.kv_admission == "reserve" and not disaggregated:
        how += ("; KV reserved for each request's whole prompt + output on admission, "
                "never preempted")
    return how


def short_stream_warning(n: int, fraction: float, fill_s: float) -> str:
    """The warning of a run meeting its SLOs whose stream of ``n`` requests was too short to
    reach steady state (:mod:`.metrics`): ``fraction`` of them arrived in the first ``fill_s``
    seconds."""
    need = math.ceil(fraction * n / FILL_LIMIT)
    return (f"the request stream is too short to reach steady state: {100 * fraction:.0f} % "
            f"of the {n} requests arrived while the system was still filling (within one "
            f"mean end-to-end latency, {fill_s:.3g} s, of the first arrival; at most "
            f"{100 * FILL_LIMIT:.0f} % for steady state), so the SLO verdict may be "
            f"optimistic; send about {need:,} requests (--requests or --duration)")


def _check_fit(pr, out, shared, cfg: ServeConfig, budgets) -> None:
    need = pr + out - shared
    for role, b in budgets:
        lay = b.layout
        free = b.pool_blocks - int(shared.max()) // cfg.kv_block_tokens * lay.units_per_block
        if lay.per_request:     # the most a request holds in a step (windows free the rest;
            #                     a linear-attention state takes its blocks whatever the length)
            whole = (cfg.scheduler == "static" or not cfg.chunked_prefill
                     or cfg.split_prompts is False)
            most = [lay.max_blocks(int(p + g), int(s), int(p + g) if whole
                                   else min(cfg.max_batched_tokens, int(p + g)))
                    for p, g, s in zip(pr, out, shared)]
            i = int(np.argmax(most))
            if most[i] > free:
                raise ValueError(
                    f"a request of {int(pr[i])} prompt + {int(out[i])} output tokens needs "
                    f"{most[i]} KV blocks ({b.block_tokens} tokens of "
                    f"{lay.unit_layers} layers each), more than the {free} one {role} "
                    f"replica holds; use more chips (--tp) or shorter requests")
            continue
        per_seq = free * b.block_tokens
        i = int(np.argmax(need))
        if need[i] > per_seq:
            raise ValueError(f"a request of {int(pr[i])} prompt + {int(out[i])} output tokens "
                             f"needs {int(need[i])} tokens of KV cache, more than the "
                             f"{per_seq} one {role} replica holds; use more chips (--tp) or "
                             f"shorter requests")
    split = cfg.chunked_prefill and cfg.split_prompts is not False
    if cfg.scheduler == "continuous" and not split:
        # a preempted sequence is recomputed whole (prompt + what it generated); under
        # kv_admission reserve a mixed replica preempts nothing, so its prompts alone must fit
        recompute = not (cfg.kv_admission == "reserve"
                         and all(role == "mixed" for role, _ in budgets))
        longest = int((pr + out).max() if recompute else pr.max())
        if longest > cfg.max_batched_tokens:
            how = ("without chunked prefill" if not cfg.chunked_prefill else
                   "with whole prompts (split_prompts false)")
            # serve's flags; serve-plan has --split-prompts too and tries chunked prefill
            # as its --prompts policy
            fix = ("chunk prompts (serve --chunked-prefill, serve-plan --prompts chunked)"
                   if not cfg.chunked_prefill else "split them (--split-prompts)")
            what = ("a whole prompt (and a recomputed sequence)" if recompute else
                    "a whole prompt")
            unit = "request's" if recompute else "prompt's"
            raise ValueError(f"{how} a step must hold {what}: --max-batched-tokens "
                             f"{cfg.max_batched_tokens} is below the longest {unit} "
                             f"{longest} tokens; raise it or {fix}")


def _result(dep: Deployment, load: Load, cfg: ServeConfig, instances, done, budgets, link,
            info, oracles: StepTimerCache) -> ServeResult:
    m = request_metrics(done, cfg.slo_ttft_s, cfg.slo_tpot_s)
    dur = m["last_finish"] - m["first_arrival"]
    if dur <= 0:
        dur = max(m["last_finish"], 1e-12)
    out_tok = int(m["out"].sum())
    energy = sum(i.energy_j + i.idle_s * i.static_w * i.chips for i in instances) \
        + link["energy_j"]
    parts = _energy_parts(instances, link["energy_j"])
    chips = dep.chips
    peak = max(i.peak_used / i.total_blocks for i in instances)
    used_time = sum(i.used_time + i.prefix_blocks * i.idle_s for i in instances)
    block_time = sum((sum(i.rec_dt) + i.idle_s) * i.total_blocks for i in instances)
    ttft, tpot = stats(m["ttft"]), stats(m["tpot"])
    itl = np.concatenate([np.frombuffer(i.itl, dtype=float) for i in instances])
    meets = (ttft["p99"] is not None and ttft["p99"] <= cfg.slo_ttft_s
             and (tpot["p99"] is None or tpot["p99"] <= cfg.slo_tpot_s))
    info = dict(info)
    info.update(oracle=oracles.kind, oracle_simulations=oracles.simulations,
                steps=sum(len(i.rec_t) for i in instances),
                completed=len(done), output_tokens=out_tok,
                input_tokens=int(m["prompt"].sum()),
                kv_transfer_bytes=link["bytes"], **setup_info(dep, cfg),
                expected_tokens_per_verify=(cfg.speculative.expected_tokens
                                            if cfg.speculative else None))
    tiers = [i.tier.to_dict(i.chips) for i in instances if i.tier is not None]
    if tiers:               # which tier held how much KV, what moved (sim/serving/kv_tier.py)
        info["kv_tiers"] = kv_tiers_info(tiers)
    if cfg.kv_prefetch:     # KV copies fetched ahead: hidden behind the previous step, or not
        info["kv_prefetch"] = {"hidden_s": sum(i.prefetch_hidden_s for i in instances),
                               "exposed_s": sum(i.prefetch_exposed_s for i in instances)}
    pcs = [i.pc.to_dict(i.chips) for i in instances if i.pc is not None]
    if pcs:                 # hits per tier, evictions, copies (sim/serving/prefix_cache.py)
        info["prefix_cache"] = prefix_cache_info(pcs)
    limits = [i.power for i in instances if i.power is not None]
    warns = []
    if load.qps is not None:      # arrivals from t = 0 (the first after one gap)
        info["arrival_rps"] = len(done) / float(m["arrival"].max())
        info["fill_s"] = float(m["e2e"].mean())
        info["fill_fraction"] = fill_fraction(m["arrival"], info["fill_s"])
        if meets and info["fill_fraction"] > FILL_LIMIT:
            warns.append(short_stream_warning(len(done), info["fill_fraction"],
                                              info["fill_s"]))
    if limits:
        pl = {"steps": sum(p.steps for p in limits),
              "unsustainable_steps": sum(p.unsustainable for p in limits),
              "min_clock_ghz": min(p.min_clock_ghz for p in limits),
              "added_s": sum(p.added_s for p in limits),
              "busy_s": sum(sum(i.rec_dt) for i in instances)}
        info["power_limit"] = pl
        if pl["steps"]:
            warns.append(f"{pl['steps']} of {info['steps']} steps drew more than the chip's "
                         f"TDP and ran at a lower clock (down to {pl['min_clock_ghz']:.3g} "
                         f"GHz): +{pl['added_s']:.3g} s of device time")
        if pl["unsustainable_steps"]:
            warns.append(f"{pl['unsustainable_steps']} steps exceed the TDP even at the "
                         f"lowest clock: reported at the nominal clock")
    cfgd = {k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in cfg.__dict__.items()}
    return ServeResult(
        deployment=dep.describe(), load=load.describe(), requests=len(done), chips=chips,
        duration_s=dur, ttft_s=ttft, tpot_s=tpot, e2e_s=stats(m["e2e"]), itl_s=stats(itl),
        tokens_per_s=out_tok / dur, tokens_per_s_per_chip=out_tok / dur / chips,
        input_tokens_per_s=float(m["prompt"].sum()) / dur, requests_per_s=len(done) / dur,
        goodput_rps=float(m["ok"].sum()) / dur, slo_attainment=float(m["ok"].mean()),
        meets_slo=bool(meets), tokens_per_j=out_tok / energy if energy else 0.0,
        energy_j=energy, kv_peak_fraction=float(peak),
        energy_breakdown_j=parts,
        energy_breakdown_j_per_token=EP.scaled(parts, 1.0 / out_tok) if out_tok else {},
        kv_mean_fraction=used_time / block_time if block_time else 0.0,
        preemptions=sum(i.preemptions for i in instances),
        swap_bytes=sum(i.swap_bytes for i in instances),
        mean_in_system=mean_in_system(instances, dur), queue=queue_series(instances),
        kv=[{"role": role, **b.to_dict()} for role, b in budgets],
        slo={"ttft_s": cfg.slo_ttft_s, "tpot_s": cfg.slo_tpot_s}, config=cfgd, info=info,
        warnings=warns, instances=instances, reqs=done)




def _energy_parts(instances, link_j: float) -> dict[str, float]:
    """A serving run's energy by component (:mod:`diptych.sim.energy_parts`): every
    instance's steps', their idle static power, the KV transfers' link energy; empty when a
    step timer gave no breakdown."""
    if any(i.unattributed for i in instances):
        return {}
    vec = [0.0] * len(EP.VECTOR)
    for i in instances:
        for k, x in enumerate(i.energy_parts):
            vec[k] += x
        vec[EP.STATIC] += i.idle_s * i.static_w * i.chips
    parts = EP.from_vector(vec)
    parts["link"] += link_j
    return parts
