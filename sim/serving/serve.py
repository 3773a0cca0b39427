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
from dataclasses import dataclass, field

import numpy as np

from ...workloads.params import kv_bytes_per_token
from .config import ServeConfig
from .engine import Instance, Req, run_loop
from .kv import KvBudget, kv_budget
from .metrics import mean_in_system, queue_series, request_metrics, stats
from .oracle import DirectOracle, GridOracle, GridSpec, Replica, make_replica
from .requests import LengthDist, check_rate, load_trace, open_loop_arrivals

ORACLES = ("grid", "direct")

#: Requests when neither a count nor a duration is given.
DEFAULT_REQUESTS = 1000


@dataclass(frozen=True)
class Pool:
    """``replicas`` copies of one replica kind (``replica.tp`` chips each)."""

    replica: Replica
    replicas: int = 1

    def __post_init__(self):
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) \
                or self.replicas < 1:
            raise ValueError(f"replicas must be a positive integer, not {self.replicas!r}")

    @property
    def chips(self) -> int:
        return self.replica.tp * self.replicas


@dataclass(frozen=True)
class Deployment:
    """Colocated (``pool``) or disaggregated (``prefill`` and ``decode`` pools)."""

    pool: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None

    def __post_init__(self):
        if (self.pool is None) == (self.prefill is None or self.decode is None):
            raise ValueError("a deployment is one pool, or a prefill pool and a decode pool")
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
    def chips(self) -> int:
        return sum(p.chips for p in self.pools)

    @property
    def model(self):
        return self.pools[0].replica.model

    def describe(self) -> str:
        if self.pool is not None:
            r = self.pool.replica
            n = f"{self.pool.replicas} x " if self.pool.replicas > 1 else ""
            return f"{r.model.name} on {n}{r.chip.name} (tp {r.tp})"
        p, d = self.prefill, self.decode
        return (f"{p.replica.model.name}: prefill on {p.replicas} x {p.replica.chip.name} (tp "
                f"{p.replica.tp}), decode on {d.replicas} x {d.replica.chip.name} (tp "
                f"{d.replica.tp})")


def colocated(chip, model, *, tp: int = 1, replicas: int = 1, **precision) -> Deployment:
    """One pool of ``replicas`` × ``tp`` chips (precision keywords as ``diptych run``)."""
    return Deployment(pool=Pool(make_replica(chip, model, tp=tp, **precision), replicas))


@dataclass(frozen=True)
class Load:
    """The request stream: exactly one of ``qps`` (open loop; ``burstiness`` 1 = Poisson),
    ``concurrency`` (closed loop) or ``trace`` (a CSV path); lengths from ``prompt`` and
    ``gen`` (ignored with a trace); ``requests`` and/or ``duration_s`` bound it (default
    1000 requests, or the whole trace)."""

    qps: float | None = None
    concurrency: int | None = None
    trace: str | None = None
    prompt: LengthDist = LengthDist("fixed", 1000)
    gen: LengthDist = LengthDist("fixed", 200)
    requests: int | None = None
    duration_s: float | None = None
    burstiness: float = 1.0

    def __post_init__(self):
        given = [n for n in ("qps", "concurrency", "trace") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of --qps, --concurrency or --trace"
                             + (f" (got {', '.join('--' + g for g in given)})" if given else ""))
        if self.qps is not None:
            check_rate("qps", self.qps)
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or not
                                             isinstance(self.concurrency, int)
                                             or self.concurrency < 1):
            raise ValueError(f"concurrency must be a positive integer, not "
                             f"{self.concurrency!r}")
        if self.requests is not None and (isinstance(self.requests, bool) or not
                                          isinstance(self.requests, int) or self.requests < 1):
            raise ValueError(f"requests must be a positive integer, not {self.requests!r}")
        if self.duration_s is not None and (not isinstance(self.duration_s, (int, float))
                                            or not math.isfinite(self.duration_s)
                                            or self.duration_s <= 0):
            raise ValueError(f"duration must be a positive number of seconds, not "
                             f"{self.duration_s!r}")
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) \
                or b <= 0:
            raise ValueError(f"burstiness must be a positive number, not {b!r}")

    def describe(self) -> str:
        if self.qps is not None:
            kind = "Poisson" if self.burstiness == 1 else f"gamma (burstiness {self.burstiness:g})"
            src = f"{self.qps:g} req/s {kind}"
        elif self.concurrency is not None:
            src = f"{self.concurrency} concurrent clients"
        else:
            return f"trace {self.trace}"
        return f"{src}, prompt {self.prompt.describe()}, output {self.gen.describe()}"


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
    instances: list = field(default_factory=list, repr=False)
    reqs: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("instances", "reqs")}
        return d


class OracleCache:
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

    def get(self, replica: Replica):
        o = self._o.get(replica)
        if o is None:
            if self.kind == "direct":
                o = DirectOracle(replica, self.simulate)
            else:
                o = GridOracle(replica, self.simulate, self.grid, progress=self._tick)
            self._o[replica] = o
        return o

    def _tick(self, _n: int) -> None:
        if self.progress is not None:
            self.progress(self.simulations)

    @property
    def simulations(self) -> int:
        return sum(o.simulations for o in self._o.values())


def _draw_requests(load: Load, cfg: ServeConfig, ctx_limit: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Arrival times (NaN for closed-loop requests), prompt and output lengths."""
    info: dict = {}
    if load.trace is not None:
        tr = load_trace(load.trace)
        arr, pr, out = tr.arrival_s, tr.prompt_tokens, tr.output_tokens
        keep = np.ones(len(arr), dtype=bool)
        if load.duration_s is not None:
            keep &= arr < load.duration_s
        arr, pr, out = arr[keep], pr[keep], out[keep]
        if load.requests is not None:
            arr, pr, out = arr[:load.requests], pr[:load.requests], out[:load.requests]
        if len(arr) == 0:
            raise ValueError(f"{load.trace}: no request arrives within --duration "
                             f"{load.duration_s:g} s")
        bad = np.nonzero(pr + out > ctx_limit)[0]
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{load.trace}: request {i + 1} has {int(pr[i])} prompt + "
                             f"{int(out[i])} output tokens, more than the model's context of "
                             f"{ctx_limit} tokens")
        return arr.astype(float), pr.astype(np.int64), out.astype(np.int64), info
    count = load.requests
    if count is None and load.duration_s is None:
        count = DEFAULT_REQUESTS
    if load.qps is not None:
        arr = open_loop_arrivals(rng, load.qps, count=count, duration_s=load.duration_s,
                                 burstiness=load.burstiness)
        n = len(arr)
        if n == 0:
            raise ValueError(f"no request arrives within --duration {load.duration_s:g} s at "
                             f"--qps {load.qps:g}")
    else:
        n = count if count is not None else max(16, 64 * load.concurrency)
        arr = np.full(n, np.nan)
    for d, what in ((load.prompt, "prompt"), (load.gen, "output")):
        if d.kind in ("fixed", "uniform") and (d.b if d.kind == "uniform" else d.a) >= ctx_limit:
            raise ValueError(f"--{'prompt' if what == 'prompt' else 'gen'} of "
                             f"{int(d.b if d.kind == 'uniform' else d.a)} {what} tokens does "
                             f"not fit the model's context of {ctx_limit} tokens")
    pr = load.prompt.sample(rng, n)
    out = load.gen.sample(rng, n)
    if load.prompt.kind == "fixed" and load.gen.kind == "fixed" and pr[0] + out[0] > ctx_limit:
        raise ValueError(f"a prompt of {int(pr[0])} tokens plus {int(out[0])} output tokens "
                         f"exceeds the model's context of {ctx_limit} tokens")
    pr_c = np.minimum(pr, ctx_limit - 1)
    out_c = np.minimum(out, ctx_limit - pr_c)
    clipped = int(np.count_nonzero((pr_c != pr) | (out_c != out)))
    if clipped:
        info["clipped_to_context"] = clipped
    return arr, pr_c, out_c, info


def _instances(pool: Pool, role: str, cfg: ServeConfig, oracles: OracleCache, start: int,
               prefix_blocks: int, draft: Replica | None, rng) -> tuple[list[Instance], KvBudget]:
    r = pool.replica
    budget = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                       max_batched_tokens=cfg.max_batched_tokens,
                       reserve_fraction=cfg.kv_reserve_fraction, draft=draft)
    if prefix_blocks >= budget.blocks:
        raise ValueError(f"the shared prefix ({prefix_blocks} blocks) does not fit the KV "
                         f"cache of {r.name} ({budget.blocks} blocks); lower --prefix-share")
    out = []
    for k in range(pool.replicas):
        out.append(Instance(start + k, role, oracles.get(r), cfg, chips=r.tp,
                            blocks=budget.blocks, block_bytes=budget.block_bytes,
                            static_w=r.chip.energy.static_w,
                            draft=oracles.get(draft) if draft is not None else None,
                            rng=rng, prefix_blocks=prefix_blocks))
    return out, budget


def _draft_replica(cfg: ServeConfig, target: Replica) -> Replica | None:
    s = cfg.speculative
    if s is None or s.draft is None:
        return None
    p = target.precision
    return make_replica(target.chip, s.draft, tp=target.tp, weights_dtype=p.weights,
                        act_dtype=p.activations, kv_dtype=p.kv, attention=target.attention)


def serve(deployment: Deployment, load: Load, cfg: ServeConfig | None = None, *,
          oracles: OracleCache | None = None, oracle: str = "grid",
          simulate: Callable | None = None, progress: Callable[[int, int], None] | None = None
          ) -> ServeResult:
    """Simulate ``load`` served by ``deployment`` under ``cfg`` (module docstring).

    ``oracles`` shares step-time oracles between runs (else a new
    :class:`OracleCache` of kind ``oracle`` over ``simulate``, the engine by default).
    ``progress(done, total)`` is called as requests complete.
    """
    cfg = cfg or ServeConfig()
    oracles = oracles or OracleCache(oracle, simulate)
    model = deployment.model
    rng = np.random.default_rng(cfg.seed)
    arr, pr, out, info = _draw_requests(load, cfg, model.max_position_embeddings, rng)
    n = len(pr)
    bs = cfg.kv_block_tokens
    shared = (np.floor(cfg.prefix_share * pr / bs) * bs).astype(np.int64)
    shared = np.minimum(shared, (pr - 1) // bs * bs)
    prefix_blocks = int(shared.max()) // bs if n else 0
    spec_rng = np.random.default_rng([cfg.seed, 1])

    instances: list[Instance] = []
    budgets: list[tuple[str, KvBudget]] = []
    prefill_pool = decode_pool = None
    if deployment.disaggregated:
        for pool, role in ((deployment.prefill, "prefill"), (deployment.decode, "decode")):
            d = _draft_replica(cfg, pool.replica) if role == "decode" else None
            inst, b = _instances(pool, role, cfg, oracles, len(instances), prefix_blocks, d,
                                 spec_rng)
            instances += inst
            budgets.append((role, b))
        prefill_pool = [i for i in instances if i.role == "prefill"]
        decode_pool = [i for i in instances if i.role == "decode"]
    else:
        pool = deployment.pool
        inst, b = _instances(pool, "mixed", cfg, oracles, 0, prefix_blocks,
                             _draft_replica(cfg, pool.replica), spec_rng)
        instances += inst
        budgets.append(("mixed", b))
    _check_fit(pr, out, shared, cfg, budgets)

    reqs = [Req(i, float(arr[i]), int(pr[i]), int(out[i]), int(shared[i])) for i in range(n)]
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

    link = {"energy_j": 0.0, "bytes": 0.0}
    transfer = _transfer_fn(deployment, link) if deployment.disaggregated else None
    total = n
    tick = (lambda done: progress(done, total)) if progress is not None else None
    run_loop(instances, known, next_request=next_request, prefill_pool=prefill_pool,
             decode_pool=decode_pool, transfer=transfer, progress=tick)
    done = [r for r in reqs if r.finish_t >= 0]
    if not done:
        raise ValueError("no request completed")
    return _result(deployment, load, cfg, instances, done, budgets, link, info, oracles)


def _check_fit(pr, out, shared, cfg: ServeConfig, budgets) -> None:
    need = pr + out - shared
    for role, b in budgets:
        per_seq = (b.blocks - int(shared.max()) // cfg.kv_block_tokens) * b.block_tokens
        i = int(np.argmax(need))
        if need[i] > per_seq:
            raise ValueError(f"a request of {int(pr[i])} prompt + {int(out[i])} output tokens "
                             f"needs {int(need[i])} tokens of KV cache, more than the "
                             f"{per_seq} one {role} replica holds; use more chips (--tp) or "
                             f"shorter requests")
    if not cfg.chunked_prefill and cfg.scheduler == "continuous":
        longest = int((pr + out).max())
        if longest > cfg.max_batched_tokens:
            raise ValueError(f"without chunked prefill a step must hold a whole prompt (and a "
                             f"recomputed sequence): --max-batched-tokens "
                             f"{cfg.max_batched_tokens} is below the longest request's "
                             f"{longest} tokens; raise it or use --chunked-prefill")


def _transfer_fn(dep: Deployment, link: dict):
    """KV transfer time from a prefill instance to a decode instance over the chips' links:
    the sending group's and the receiving group's aggregate link bandwidth (the slower), plus
    one link latency; overlapped layer by layer with the prefill when the decode side had room
    as the prefill finished (the first layer's KV can leave once that layer is done)."""
    pr, dr = dep.prefill.replica, dep.decode.replica
    per_tok = kv_bytes_per_token(pr.model, pr.precision.kv)
    bw = min(pr.tp * pr.chip.interconnect.bytes_per_s_per_direction,
             dr.tp * dr.chip.interconnect.bytes_per_s_per_direction)
    if bw <= 0:
        bad = pr.chip if pr.chip.interconnect.bytes_per_s_per_direction <= 0 else dr.chip
        raise ValueError(f"chip {bad.name!r} has no chip-to-chip links; it cannot send or "
                         f"receive a KV cache in a disaggregated deployment")
    lat = max(pr.chip.interconnect.latency_us, dr.chip.interconnect.latency_us) * 1e-6
    layers = pr.model.layers
    pj = pr.chip.energy.pj_per_link_bit

    def transfer(r: Req, src: Instance, dst: Instance, t: float) -> float:
        nbytes = (r.computed - r.shared) * per_tok
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


def _result(dep: Deployment, load: Load, cfg: ServeConfig, instances, done, budgets, link,
            info, oracles: OracleCache) -> ServeResult:
    m = request_metrics(done, cfg.slo_ttft_s, cfg.slo_tpot_s)
    dur = m["last_finish"] - m["first_arrival"]
    if dur <= 0:
        dur = max(m["last_finish"], 1e-12)
    out_tok = int(m["out"].sum())
    energy = sum(i.energy_j + i.idle_s * i.static_w * i.chips for i in instances) \
        + link["energy_j"]
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
                kv_transfer_bytes=link["bytes"],
                expected_tokens_per_verify=(cfg.speculative.expected_tokens
                                            if cfg.speculative else None))
    cfgd = {k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in cfg.__dict__.items()}
    return ServeResult(
        deployment=dep.describe(), load=load.describe(), requests=len(done), chips=chips,
        duration_s=dur, ttft_s=ttft, tpot_s=tpot, e2e_s=stats(m["e2e"]), itl_s=stats(itl),
        tokens_per_s=out_tok / dur, tokens_per_s_per_chip=out_tok / dur / chips,
        input_tokens_per_s=float(m["prompt"].sum()) / dur, requests_per_s=len(done) / dur,
        goodput_rps=float(m["ok"].sum()) / dur, slo_attainment=float(m["ok"].mean()),
        meets_slo=bool(meets), tokens_per_j=out_tok / energy if energy else 0.0,
        energy_j=energy, kv_peak_fraction=float(peak),
        kv_mean_fraction=used_time / block_time if block_time else 0.0,
        preemptions=sum(i.preemptions for i in instances),
        swap_bytes=sum(i.swap_bytes for i in instances),
        mean_in_system=mean_in_system(instances, dur), queue=queue_series(instances),
        kv=[{"role": role, **b.to_dict()} for role, b in budgets],
        slo={"ttft_s": cfg.slo_ttft_s, "tpot_s": cfg.slo_tpot_s}, config=cfgd, info=info,
        instances=instances, reqs=done)


def fit_tp(chip, model, cfg: ServeConfig | None = None, *, precision: dict | None = None,
           attention: str = "fused") -> int:
    """The fewest tensor-parallel chips whose memory holds the weights, the activations, the
    reserve and a KV cache of at least one step's tokens (``max_batched_tokens``)."""
    from ...workloads import load_model
    from ...workloads.lower import valid_tp_degrees

    cfg = cfg or ServeConfig()
    m = load_model(model)
    last = None
    for t in valid_tp_degrees(m, 64):
        r = make_replica(chip, m, tp=t, attention=attention, **(precision or {}))
        try:
            b = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                          max_batched_tokens=cfg.max_batched_tokens,
                          reserve_fraction=cfg.kv_reserve_fraction)
        except ValueError as exc:
            last = exc
            continue
        if b.tokens >= cfg.max_batched_tokens:
            return t
    raise ValueError(f"{m.name} does not fit {getattr(r.chip, 'name', chip)} at any tensor-"
                     f"parallel degree up to 64" + (f" ({last})" if last else ""))
