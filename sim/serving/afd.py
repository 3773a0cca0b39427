"""Attention–FFN disaggregation (AFD): attention on one pool, the FFNs on another, the
activations crossing the link every layer both ways (docs/serving.md, "Attention–FFN
disaggregation").

The layout, as the published AFD systems run it [S: MegaScale-Infer, arXiv 2504.02263:
"attention nodes" hold the attention modules and the KV cache, "expert nodes" the
experts, tokens dispatched M-to-N and gathered back every MoE layer; Step-3, arXiv
2507.19427: attention and FFN on separate GPU sets, the activations sent over the
network every layer with its StepMesh library]:

* **pool A** (``attention_chips`` = n chips, one tensor-parallel group): every op of the
  step but the FFN's — embedding, norms, the attention projections and cores, the KV cache,
  the MoE router and top-k, the LM head (:func:`ffn_op`).
* **pool B** (``ffn_chips`` = m chips): the dense MLPs (tensor-parallel over m) or, for MoE,
  the routed experts (expert-parallel, whole experts per chip, as
  :func:`~diptych.sim.serving.ep.ep_replica`'s tensor-parallel layout places them:
  ``ep = m``) and the shared experts (÷ m).
* **link**: each layer, a micro-batch's activations go A → B and its FFN outputs B → A:
  ``tokens × hidden × activation bytes × D`` per direction, ``D`` the FFN ranks a token is
  sent to (:func:`fanout`), over the pools' aggregate links in that direction — the same
  model as P/D disaggregation's KV transfer (:func:`~diptych.sim.serving.deployment.
  kv_transfer`: ``min(n·bw_A, m·bw_B)`` sustained per direction, one link latency per
  transfer). The in-pool all-to-alls and FFN all-reduce of a colocated lowering are what
  the link carries here, so pool B's lowering runs without them (the partial outputs are
  summed on pool A, as MegaScale-Infer's N-to-M combine does).

A decode step is split into ``k`` micro-batches (the busiest is timed,
:func:`~diptych.sim.serving.ep.rank_step`: the sequences dealt round-robin, prefill chunks
longest first); the layers' time is the ping-pong pipeline's closed form
(:mod:`.afd_pipeline`), the embedding and the head of each micro-batch on pool A added
serially (conservative: their overlap with the other micro-batches' layers is not credited).
Both pools are timed block by block with the summed execution
(:func:`~diptych.sim.run.summed.block_costs`), the chip's launch costs included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...workloads.config import ModelConfig
from ...workloads.serving_step import Step
from ..run.summed import block_costs, combine_energy_parts
from .. import energy_parts as EP
from .afd_defaults import DEFAULT_MICROBATCHES
from .afd_pipeline import Stages, pipeline_seconds
from .afd_split import part_weight_bytes, split_workload
from .ep import rank_step
from .lazy_grid import Axis, geometric_axis, lerp
from .step_time import Replica, StepCost


@dataclass(frozen=True)
class AfdSpec:
    """An AFD layout: ``attention_chips`` (n) and ``ffn_chips`` (m), ``microbatches`` (k);
    ``attention_layout``: pool A one tensor-parallel group of n chips (``"tp"``) or n
    data-parallel attention ranks of one chip each (``"dp"``: each its own sequences, KV
    cache and a copy of the attention weights, as MegaScale-Infer replicates its attention
    nodes, arXiv 2504.02263; the step timed as its busiest rank's); ``link_bytes_per_s``
    and ``link_latency_s`` override the chips' links (None: the chips'; ``math.inf`` and 0
    make the link free, for the bounds in tests)."""

    attention_chips: int = 1
    ffn_chips: int = 1
    microbatches: int = DEFAULT_MICROBATCHES
    link_bytes_per_s: float | None = None
    link_latency_s: float | None = None
    attention_layout: str = "tp"

    def __post_init__(self):
        if self.attention_layout not in ("tp", "dp"):
            raise ValueError(f"--afd-attention must be tp or dp, not "
                             f"{self.attention_layout!r}")
        for flag, v in (("--attention-chips", self.attention_chips),
                        ("--ffn-chips", self.ffn_chips),
                        ("--afd-microbatches", self.microbatches)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{flag} must be a positive integer, not {v!r}")
        b, lat = self.link_bytes_per_s, self.link_latency_s
        if b is not None and not (isinstance(b, (int, float)) and b > 0 and not math.isnan(b)):
            raise ValueError(f"link_bytes_per_s must be a positive number or None, not {b!r}")
        if lat is not None and not (isinstance(lat, (int, float)) and math.isfinite(lat)
                                    and lat >= 0):
            raise ValueError(f"link_latency_s must be a non-negative number or None, not "
                             f"{lat!r}")


@dataclass(frozen=True)
class AfdLayout:
    """The FFN side of an AFD deployment: ``ffn``, the FFN pool's replica (tensor-parallel
    over m, MoE experts expert-parallel over m), and ``spec``."""

    ffn: Replica
    spec: AfdSpec

    def __post_init__(self):
        if self.ffn.chips != self.spec.ffn_chips:
            raise ValueError(f"the FFN replica has {self.ffn.chips} chips, --ffn-chips "
                             f"{self.spec.ffn_chips}")


def fanout(m: ModelConfig, ffn_chips: int, moe_layer: bool) -> float:
    """``D``: the FFN ranks one token's activation is sent to (and a partial output returned
    from) in a layer. A dense MLP split over the m ranks, or a MoE layer with shared experts
    (each rank a 1/m slice of them): every rank, ``m``. A MoE layer without shared experts:
    the expected distinct ranks holding the token's top-k experts, the experts split
    ``E/m`` per rank and routed uniformly (hypergeometric):
    ``m·(1 − C(E − E/m, k) / C(E, k))``."""
    if not moe_layer or m.shared_experts or ffn_chips == 1:
        return float(ffn_chips)
    e, k = m.experts, m.experts_per_token
    per = e // ffn_chips
    miss = math.comb(e - per, k) / math.comb(e, k)
    return ffn_chips * (1.0 - miss)


def check_ffn_fits(ffn: Replica, spec: AfdSpec, reserve_fraction: float,
                   draft: Replica | None = None) -> float:
    """Pool B's weight bytes per chip (with an MTP ``draft``, its modules' FFNs too: every
    one of the target's MTP modules resident, as :func:`~.kv.kv_budget` counts them);
    ValueError naming the pool unless they fit the chip's memory less the reserve."""
    w = part_weight_bytes(ffn, "ffn", spec.ffn_chips)
    if draft is not None:
        w += ffn.model.mtp_layers * part_weight_bytes(draft, "ffn", spec.ffn_chips)
    cap = float(ffn.chip.dram.capacity_bytes)
    room = cap * (1.0 - reserve_fraction)
    if w > room:
        gib = 2.0 ** 30
        need = math.ceil(w * spec.ffn_chips / room)
        with_draft = " (the MTP draft's FFN included)" if draft is not None else ""
        raise ValueError(f"--ffn-chips {spec.ffn_chips}: the FFN pool cannot hold its part of "
                         f"{ffn.model.name}: {w / gib:.1f} GiB of FFN weights per "
                         f"{ffn.chip.name} chip{with_draft}, which holds {room / gib:.1f} GiB "
                         f"({cap / gib:.1f} GiB less the {100 * reserve_fraction:g} % "
                         f"reserve); use at least {need} FFN chips or narrower weights")
    return w


class OnAttentionPool:
    """The step timer of work on an AFD deployment's attention pool alone — a draft model,
    resident beside the attention and the KV cache it shares the blocks of: ``timer``'s
    seconds; its energy per chip of the pool's ``attention_chips`` restated per chip of the
    instance's ``attention_chips + ffn_chips``, the FFN pool's chips idle meanwhile at
    their static power (``ffn_static_w`` each)."""

    def __init__(self, timer, attention_chips: int, ffn_chips: int, ffn_static_w: float):
        self.timer = timer
        self.n, self.m, self.static_w = attention_chips, ffn_chips, ffn_static_w

    @property
    def simulations(self) -> int:
        return self.timer.simulations

    def cost(self, step: Step) -> StepCost:
        c = self.timer.cost(step)
        chips = self.n + self.m
        idle = c.seconds * self.static_w * self.m
        parts = tuple(x * self.n / chips for x in c.parts)
        if parts:
            parts = list(parts)
            parts[EP.STATIC] += idle / chips
            parts = tuple(parts)
        return StepCost(c.seconds, (c.energy_j * self.n + idle) / chips, parts)


class FfnSide:
    """The FFN pool's per-layer-block costs of a micro-batch of ``n`` tokens: the FFN ops of
    ``ffn``'s frame (they depend on the tokens only), simulated at ``n`` (``grid=None``) or
    interpolated linearly between the vertices of a token axis (``grid``, a
    :class:`~diptych.sim.serving.grid_timer.GridSpec`: its ``token_dense`` and
    ``token_ratio``, as the grid oracle's frame), each vertex simulated once."""

    def __init__(self, ffn: Replica, simulate=None, grid=None):
        self.ffn = ffn
        self._sim = ffn.timer(simulate)
        self._at: dict[int, tuple] = {}
        self.simulations = 0
        self._axis = (None if grid is None else
                      Axis(geometric_axis(grid.token_dense, grid.token_ratio, grid.max_tokens),
                           "step tokens"))
        self.names: list[tuple[str, int]] | None = None

    def _exact(self, n: int) -> tuple:
        got = self._at.get(n)
        if got is None:
            r = self.ffn
            w = split_workload(r.frame_workload(n, 1), "ffn")
            bc = block_costs(w, r.chip, self._sim, fixed_costs=r.fixed_costs,
                             collective_time=r.collective_time)
            self.names = [(b.name, b.repeat) for b in bc]
            got = self._at[n] = (tuple(x for b in bc for x in (b.compute_s, b.comm_s,
                                                               b.energy_j))
                                 + EP.as_vector(combine_energy_parts(bc, {})))
            self.simulations += 1
        return got

    def blocks(self, n: int) -> tuple[dict[str, tuple[int, float, float, float]], list]:
        """``{block: (repeat, compute s, collective s, energy J per copy)}`` and the energy
        by component (per chip, every block) at ``n`` tokens."""
        if self._axis is None:
            v = self._exact(n)
        else:
            a, b, w = self._axis.locate(n)
            v = lerp(self._exact(a), self._exact(b), w) if w else self._exact(a)
        nb = len(self.names)
        out = {name: (rep, v[3 * i], v[3 * i + 1], v[3 * i + 2])
               for i, (name, rep) in enumerate(self.names)}
        return out, list(v[3 * nb:])


class AfdTimer:
    """The step timer of an AFD deployment (module docstring): ``cost(step)`` the
    pipelined step's time and the energy per chip of the ``n + m`` chips (both pools' ops,
    each pool's static power while it waits in the step, the link's energy); ``totals``
    accumulates, over the steps costed, the step seconds, each pool's busy seconds, the
    link's busy seconds (both directions) and the part of them not hidden (``exposed_s``:
    the step less the same step with a free link).

    ``attention``: the attention pool's replica (``afd_side="attention"``, tensor-parallel
    over n); ``oracle``: its step timer — a :class:`~diptych.sim.serving.grid_timer.
    GridStepTimer` (its per-block costs interpolated) or None (every micro-batch simulated,
    as the direct oracle); ``grid``: the FFN side's token axis (None: exact); ``ffn_side``: a
    :class:`FfnSide` of ``ffn`` to share (None: one of its own on ``grid``)."""

    def __init__(self, attention: Replica, ffn: Replica, spec: AfdSpec, simulate=None, *,
                 oracle=None, grid=None, ffn_side: FfnSide | None = None):
        if attention.afd_side != "attention":
            raise ValueError("the attention pool's replica must have afd_side='attention'")
        self.replica = attention
        self.ffn = ffn
        self.spec = spec
        self._oracle = oracle
        self._sim_a = attention.timer(simulate)
        if ffn_side is not None and ffn_side.ffn != ffn:
            raise ValueError("ffn_side must time the FFN pool's replica")
        self._ffn = ffn_side if ffn_side is not None else FfnSide(ffn, simulate, grid)
        self._memo: dict[Step, tuple] = {}
        self.totals = {"steps": 0, "step_s": 0.0, "attention_busy_s": 0.0,
                       "ffn_busy_s": 0.0, "link_busy_s": 0.0, "link_exposed_s": 0.0,
                       "link_bytes": 0.0}
        a, b = attention.chip, ffn.chip
        n, m = spec.attention_chips, spec.ffn_chips
        if spec.link_bytes_per_s is not None:
            self.link_bw = float(spec.link_bytes_per_s)
        else:
            # [S] the KV transfer's link model (deployment.kv_transfer): each pool's chips'
            # sustained bandwidth per direction, summed; the slower pool's sum binds
            self.link_bw = min(n * a.interconnect.sustained_bytes_per_s_per_direction,
                               m * b.interconnect.sustained_bytes_per_s_per_direction)
            if self.link_bw <= 0:
                bad = a if a.interconnect.bytes_per_s_per_direction <= 0 else b
                raise ValueError(f"chip {bad.name!r} has no chip-to-chip links; it cannot "
                                 f"take part in attention-FFN disaggregation")
        self.link_latency_s = (spec.link_latency_s if spec.link_latency_s is not None else
                               max(a.interconnect.latency_us, b.interconnect.latency_us) * 1e-6)
        self.link_pj_per_bit = max(a.energy.pj_per_link_bit, b.energy.pj_per_link_bit)

    @property
    def simulations(self) -> int:
        own = self._oracle.simulations if self._oracle is not None else len(self._memo)
        return own + self._ffn.simulations

    @property
    def own_simulations(self) -> int:
        """The direct oracle's attention simulations (its memo, not shared with others)."""
        return len(self._memo)

    def microbatches(self, step: Step) -> int:
        """The micro-batches ``step`` is split into: ``k``, or fewer when its busiest
        attention rank has fewer sequences and chunks than that."""
        rank = rank_step(step, self.replica.dp)
        return max(1, min(self.spec.microbatches, rank.decode_batch + len(rank.prefill)))

    def _attention_blocks(self, mb: Step) -> tuple[list[tuple], list[float]]:
        if self._oracle is not None:
            blocks, parts, _ = self._oracle.block_costs(mb)
            return blocks, list(parts)
        got = self._memo.get(mb)
        if got is None:
            r = self.replica
            bc = block_costs(r.step_workload(mb), r.chip, self._sim_a,
                             fixed_costs=r.fixed_costs, collective_time=r.collective_time)
            got = self._memo[mb] = ([(b.name, b.repeat, b.compute_s, b.comm_s, b.energy_j)
                                     for b in bc],
                                    list(EP.as_vector(combine_energy_parts(bc, {}))))
        return got

    def stages(self, step: Step) -> tuple[list[Stages], float, dict]:
        """(the layer segments' stages of one micro-batch of ``step``, pool A's frame —
        embedding and head — seconds per micro-batch, the micro-batch's energy per chip of
        each pool, its energy by component over all chips, its link bytes). Under
        data-parallel attention pool A's micro-batch is the busiest rank's busiest, the FFN
        pool's (and the link's) the ranks' micro-batches together, the step's ``k``-th
        share; each attention chip is charged the busiest rank's energy (an upper bound)."""
        k = self.microbatches(step)
        mb = rank_step(rank_step(step, self.replica.dp), k)
        tokens = rank_step(step, k).tokens if self.replica.dp > 1 else mb.tokens
        a_blocks, a_parts = self._attention_blocks(mb)
        b_blocks, b_parts = self._ffn.blocks(tokens)
        act = self.replica.precision.a_bytes
        d = self.replica.model.hidden_size
        ov = self.replica.overlap

        def secs(comp: float, comm: float) -> float:
            return max(comp, comm) if ov else comp + comm

        segs, frame_s, ea, eb, link_bytes = [], 0.0, 0.0, 0.0, 0.0
        for name, rep, comp, comm, e in a_blocks:
            ea += rep * e
            fb = b_blocks.get(name)
            if fb is None:          # embedding, head: pool A only
                frame_s += rep * secs(comp, comm)
                continue
            eb += rep * fb[3]
            nbytes = tokens * d * act * fanout(self.replica.model, self.spec.ffn_chips,
                                                  "moe" in name)
            tx = nbytes / self.link_bw + self.link_latency_s
            link_bytes += 2 * nbytes * rep
            segs.append(Stages(secs(comp, comm), tx, secs(fb[1], fb[2]), tx, rep))
        missing = set(b_blocks) - {b[0] for b in a_blocks}
        if missing:
            raise ValueError(f"the FFN pool's layer blocks {sorted(missing)} have no match on "
                             f"the attention pool (the two lowerings differ)")
        n, m = self.spec.attention_chips, self.spec.ffn_chips
        parts = [n * x + m * y for x, y in zip(a_parts, b_parts)]
        return segs, frame_s, {"energy_j": (ea, eb), "parts": parts,
                               "link_bytes": link_bytes}

    def cost(self, step: Step) -> StepCost:
        segs, frame_s, det = self.stages(step)
        k = self.microbatches(step)
        n, m = self.spec.attention_chips, self.spec.ffn_chips
        layers_s = pipeline_seconds(segs, k)
        free_s = pipeline_seconds([s._replace(to_ffn_s=0.0, to_attention_s=0.0)
                                   for s in segs], k)
        seconds = layers_s + k * frame_s
        busy_a = k * (frame_s + sum(s.layers * s.attention_s for s in segs))
        busy_b = k * sum(s.layers * s.ffn_s for s in segs)
        link_s = k * sum(s.layers * (s.to_ffn_s + s.to_attention_s) for s in segs)
        nbytes = k * det["link_bytes"]
        sa, sb = self.replica.chip.energy.static_w, self.ffn.chip.energy.static_w
        idle_j = (seconds - busy_a) * sa * n + (seconds - busy_b) * sb * m
        link_j = nbytes * 8 * self.link_pj_per_bit * 1e-12
        parts = [k * x for x in det["parts"]]
        parts[EP.STATIC] += idle_j
        parts[EP.VECTOR.index("link")] += link_j
        ea, eb = det["energy_j"]
        total_j = k * (n * ea + m * eb) + idle_j + link_j
        chips = n + m
        cost = self.replica.with_sync(seconds, total_j / chips,
                                      tuple(x / chips for x in parts))
        t = self.totals
        t["steps"] += 1
        t["step_s"] += cost.seconds
        t["attention_busy_s"] += busy_a
        t["ffn_busy_s"] += busy_b
        t["link_busy_s"] += link_s
        t["link_exposed_s"] += layers_s - free_s
        t["link_bytes"] += nbytes
        return cost


def afd_info(timer: AfdTimer, before: dict) -> dict:
    """``info.afd`` of a run: the layout and, over the run's steps (``timer.totals`` less
    ``before``), each pool's utilisation (busy ÷ step time), the link's busy time per step
    (both directions) and the share of it hidden behind the pools' work."""
    t = {k: v - before.get(k, 0) for k, v in timer.totals.items()}
    s = timer.spec
    steps = max(t["steps"], 1)
    step_s = t["step_s"] or 1.0
    link = t["link_busy_s"]
    return {"attention": {"chip": timer.replica.chip.name, "chips": s.attention_chips,
                          "layout": s.attention_layout, "tp": timer.replica.tp,
                          "dp": timer.replica.dp,
                          "utilisation": t["attention_busy_s"] / step_s},
            "ffn": {"chip": timer.ffn.chip.name, "chips": s.ffn_chips,
                    "ep": timer.ffn.experts.ep, "tp": timer.ffn.tp,
                    "utilisation": t["ffn_busy_s"] / step_s},
            "microbatches": s.microbatches,
            "link_bytes_per_s": timer.link_bw, "link_latency_s": timer.link_latency_s,
            "mean_step_s": t["step_s"] / steps,
            "link_s_per_step": link / steps,
            "link_exposed_s_per_step": t["link_exposed_s"] / steps,
            "link_hidden_fraction": (min(1.0, max(0.0, 1.0 - t["link_exposed_s"] / link))
                                     if link > 0 else 1.0),
            "link_bytes": t["link_bytes"]}


__all__ = ["AfdLayout", "AfdSpec", "AfdTimer", "FfnSide", "DEFAULT_MICROBATCHES",
           "OnAttentionPool", "afd_info", "check_ffn_fits", "fanout"]
