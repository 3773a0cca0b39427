"""What the serving engine does: scheduler, KV cache, SLOs, speculation. Validated eagerly.

Defaults and their sources:

* ``max_batch`` 1024 and ``max_batched_tokens`` 8192: vLLM's defaults for its OpenAI API
  server on devices with at least 70 GiB (``EngineArgs.get_batch_defaults``,
  vllm/engine/arg_utils.py) [S].
* ``kv_block_tokens`` 16: vLLM's default ``block_size`` [S].
* ``kv_reserve_fraction`` 0.10: vLLM's default ``gpu_memory_utilization`` of 0.9 leaves 10 %
  of device memory outside weights + activations + KV cache [S].
* ``slo_ttft_s`` 2 s and ``slo_tpot_s`` 0.2 s: the MLPerf Inference Llama-2-70B server
  scenario's latency constraints (99th percentile TTFT ≤ 2 s, TPOT ≤ 200 ms;
  mlcommons/inference loadgen/mlperf.conf: ``llama2-70b.Server.ttft_latency = 2000``,
  ``tpot_latency = 200``) [S].
* ``host_link_bytes_per_s`` 63.0e9: PCIe Gen5 x16, one direction: 32 GT/s × 16 lanes ×
  128/130 ÷ 8 = 63.0 GB/s [D] (the link KV swapping uses; chips have no host-link field yet).
* ``preemption`` "recompute": vLLM V1's only mode [S].
* ``kv_offload`` "auto": a chip's second memory tier holds KV blocks when it has one
  (:mod:`.kv_tier`); a chip without one serves as before.
* ``runtime`` None: the serving runtime the deployment's chip names
  (``[overheads] serving_runtime``: h100 ``vllm-v1``; ``ideal``, no host costs, for chips
  that name none); :mod:`diptych.arch.runtime` and ``arch/runtimes/*.toml`` hold the
  profiles and their sources. ``chunked_prefill`` None: as the runtime schedules prompts
  (its ``chunked_prefill``), else chunked; ``split_prompts`` None: as the runtime does (its
  ``split_prompts``), else split; ``kv_admission`` None: as the runtime admits requests
  into the KV cache (its ``kv_admission``), else on demand. :meth:`ServeConfig.resolved`
  makes them concrete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...arch.runtime import IDEAL, KV_ADMISSIONS, RuntimeProfile
from ...workloads.mtp import MTP_ACCEPT
from .kv_tier import OFFLOAD

#: ``--speculative draft=mtp``: the target's own multi-token-prediction module(s) draft.
MTP_DRAFT = "mtp"

SCHEDULERS = ("continuous", "static")
PREEMPTION = ("recompute", "swap")


def _pos_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


def _pos(name: str, v, what: str = "a positive number") -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be {what}, not {v!r}")


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: a draft proposes ``k`` tokens per sequence and step, the target
    verifies them in one ``k + 1``-row step; each proposed token is accepted with probability
    ``accept`` (independently, until the first rejection), so a step yields
    ``(1 − accept^(k+1)) / (1 − accept)`` tokens on average (the bonus token included).
    ``draft`` is a model name or path, ``"mtp"`` for the target's own multi-token-prediction
    module(s) (:mod:`diptych.workloads.mtp`), or ``None`` for proposals that cost nothing on
    the chip (n-gram / prompt lookup, or a self-speculation head folded into the target).

    ``later``: acceptances of draft positions 2, 3, … given every earlier one was accepted
    (the last repeats up to ``k``; empty: ``accept`` at every position). A step then yields
    ``1 + Σⱼ Πᵢ≤ⱼ aᵢ`` tokens on average (:attr:`expected_tokens`); an MTP module reused for
    several positions is accepted less often at the later ones (docs/serving.md)."""

    k: int
    accept: float
    draft: str | None = None
    later: tuple[float, ...] = ()

    def __post_init__(self):
        _pos_int("speculative k", self.k)
        for a in (self.accept, *self.later):
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
                raise ValueError(f"speculative accept must be a probability in [0, 1], not "
                                 f"{a!r}")
        if not isinstance(self.later, tuple) or len(self.later) >= self.k:
            raise ValueError(f"speculative accept gives {1 + len(self.later)} per-position "
                             f"rates for k = {self.k} draft positions; give at most k")

    @property
    def rates(self) -> tuple[float, ...]:
        """The acceptance of each of the ``k`` positions given the earlier ones'."""
        r = (self.accept, *self.later)
        return r + (r[-1],) * (self.k - len(r))

    @property
    def reach(self) -> tuple[float, ...]:
        """``P(position j accepted)`` for j = 1..k: the products of :attr:`rates` (vLLM's
        "per-position acceptance")."""
        out, p = [], 1.0
        for a in self.rates:
            p *= a
            out.append(p)
        return tuple(out)

    @property
    def mtp(self) -> bool:
        """The draft is the target's own MTP module(s)."""
        return self.draft == MTP_DRAFT

    @property
    def expected_tokens(self) -> float:
        if self.later:
            return 1.0 + sum(self.reach)
        p, k = self.accept, self.k
        return float(k + 1) if p == 1.0 else (1.0 - p ** (k + 1)) / (1.0 - p)


def parse_speculative(text: str) -> Speculation:
    """``draft=MODEL,k=K,accept=P`` (``draft=none`` for free proposals; draft may be
    omitted; ``draft=mtp``: the target's MTP module, ``accept`` then defaults to
    :data:`~diptych.workloads.mtp.MTP_ACCEPT`, DeepSeek-V3's published rate).
    ``accept=P1/P2/…``: per-position acceptances (:attr:`Speculation.later`)."""
    kv: dict[str, str] = {}
    for part in str(text).split(","):
        k, eq, v = part.partition("=")
        if not eq or not v.strip():
            raise ValueError(f"--speculative expects draft=MODEL,k=K,accept=P, not {text!r}")
        kv[k.strip().lower()] = v.strip()
    unknown = set(kv) - {"draft", "k", "accept"}
    if kv.get("draft", "").lower() == MTP_DRAFT:
        kv["draft"] = MTP_DRAFT
        kv.setdefault("accept", str(MTP_ACCEPT))
    if unknown or "k" not in kv or "accept" not in kv:
        raise ValueError(f"--speculative expects draft=MODEL,k=K,accept=P (draft optional), "
                         f"not {text!r}")
    try:
        k = int(kv["k"])
    except ValueError:
        raise ValueError(f"speculative k must be a positive integer, not {kv['k']!r}") from None
    try:
        p, *later = (float(x) for x in kv["accept"].split("/"))
    except ValueError:
        raise ValueError(f"speculative accept must be a probability in [0, 1] (or one per "
                         f"position, P1/P2/...), not {kv['accept']!r}") from None
    d = kv.get("draft")
    return Speculation(k=k, accept=p, draft=None if d in (None, "none", "self") else d,
                       later=tuple(later))


@dataclass(frozen=True)
class ServeConfig:
    """The engine's policy (module docstring for defaults and sources).

    ``scheduler``: "continuous" (iteration-level batching; with ``chunked_prefill`` prompts
    are split to fill each step's ``max_batched_tokens`` beside the decodes, vLLM-V1 style;
    without it a step prefills whole prompts only, and decodes wait for it, vLLM-V0 style) or
    "static" (fixed batches of up to ``max_batch`` requests run to completion, prompts padded
    to the longest: what ``diptych run`` evaluates). ``preemption``: when a running sequence
    needs a KV block and none is free, the most recently admitted sequence is preempted and
    either recomputed later (its blocks freed) or swapped to host memory over the host link.
    ``prefix_share``: fraction of every prompt that is a prefix shared by all requests (a
    common system prompt or document) and held in the prefix cache. ``prefixes``: 0, that
    one prefix pinned for the whole run; N ≥ 1, each request carries one of N prefixes (drawn
    uniformly) of ``prefix_share`` × the mean prompt, cached LRU across the memory tiers
    (:mod:`.prefix_cache`). ``kv_prefetch``: copies of KV blocks a step needs back from a
    slower tier (a swapped sequence's swap-in, a pooled tier's placement copies) start during
    the previous step and stay on the chain only for what that step cannot hide
    (:class:`~.engine.Instance`, docs/serving.md "KV prefetch"). ``slo_*``: a request meets
    its SLOs when its TTFT and its TPOT are both within them. ``runtime``: the serving
    runtime's host costs per step and per request (:class:`~diptych.arch.runtime.
    RuntimeProfile`; None: the chip's, :meth:`resolved`). ``chunked_prefill`` None: the
    runtime's policy. ``split_prompts`` (with ``chunked_prefill``): True, a prompt may be
    split to fill a step's ``max_batched_tokens``; False, it joins a decode step only whole
    and waits while it does not fit (TensorRT-LLM's in-flight batching without context
    chunking); None: the runtime's policy, else True. Set with ``chunked_prefill`` False or
    the static scheduler (where it would do nothing) it is refused. ``kv_admission``:
    "on-demand", a request's KV blocks are allocated as its tokens are written and a shortage
    preempts (``preemption``; vLLM); "reserve", a request is admitted only when the blocks of
    its whole prompt + output fit in the free blocks less what every running request may
    still claim, so nothing is ever preempted (TensorRT-LLM's ``GUARANTEED_NO_EVICT``);
    None: the runtime's policy, else on demand. "reserve" applies to a deployment's mixed
    replicas (a disaggregated pool admits on demand) and is refused with speculative
    decoding, prefix caching and a KV cache across memory tiers, which it does not model,
    and, given explicitly, with the static scheduler, whose batches reserve whole sequences
    already (inherited from a runtime there, it resolves to None: it does not apply).
    """

    scheduler: str = "continuous"
    max_batch: int = 1024
    max_batched_tokens: int = 8192
    chunked_prefill: bool | None = None
    split_prompts: bool | None = None
    kv_admission: str | None = None
    kv_block_tokens: int = 16
    preemption: str = "recompute"
    kv_offload: str = "auto"
    kv_reserve_fraction: float = 0.10
    host_link_bytes_per_s: float = 63.0e9
    prefix_share: float = 0.0
    prefixes: int = 0
    kv_prefetch: bool = False
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.2
    speculative: Speculation | None = None
    seed: int = 0
    runtime: RuntimeProfile | None = None

    def __post_init__(self):
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, not "
                             f"{self.scheduler!r}")
        if self.preemption not in PREEMPTION:
            raise ValueError(f"preemption must be one of {', '.join(PREEMPTION)}, not "
                             f"{self.preemption!r}")
        if self.kv_offload not in OFFLOAD:
            raise ValueError(f"kv_offload must be one of {', '.join(OFFLOAD)}, not "
                             f"{self.kv_offload!r}")
        if self.kv_offload == "swap" and self.preemption == "swap":
            raise ValueError("--kv-offload swap swaps preempted sequences to the chip's second "
                             "tier (recomputed when it is full); drop --preemption swap")
        for n in ("max_batch", "max_batched_tokens", "kv_block_tokens"):
            _pos_int(n, getattr(self, n))
        r = self.kv_reserve_fraction
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r < 1.0:
            raise ValueError(f"kv_reserve_fraction must be in [0, 1), not {r!r}")
        _pos("host_link_bytes_per_s", self.host_link_bytes_per_s)
        f = self.prefix_share
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            raise ValueError(f"prefix share must be a fraction in [0, 1], not {f!r}")
        if not isinstance(self.kv_prefetch, bool):
            raise ValueError(f"kv_prefetch must be true or false, not {self.kv_prefetch!r}")
        n = self.prefixes
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"prefixes must be a non-negative integer, not {n!r}")
        if n and not self.prefix_share:
            raise ValueError(f"prefixes {n}: give each prefix's share of the prompt with "
                             f"--prefix-share (a fraction in (0, 1])")
        _pos("slo_ttft_s", self.slo_ttft_s, "a positive number of seconds")
        _pos("slo_tpot_s", self.slo_tpot_s, "a positive number of seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, not {self.seed!r}")
        if self.runtime is not None and not isinstance(self.runtime, RuntimeProfile):
            raise ValueError(f"runtime must be a RuntimeProfile or None, not {self.runtime!r}")
        if self.chunked_prefill not in (None, True, False):
            raise ValueError(f"chunked_prefill must be true, false or None, not "
                             f"{self.chunked_prefill!r}")
        if self.split_prompts not in (None, True, False):
            raise ValueError(f"split_prompts must be true, false or None, not "
                             f"{self.split_prompts!r}")
        if self.split_prompts is not None and (self.chunked_prefill is False
                                               or self.scheduler == "static"):
            # a prompt is whole in every step of its own already: the setting would do nothing
            how = ("the static scheduler runs whole prompts in fixed batches"
                   if self.scheduler == "static" else
                   "chunked_prefill false runs whole prompts in steps of their own")
            raise ValueError(f"split_prompts {str(self.split_prompts).lower()}: it applies to "
                             f"chunked prefill under --scheduler continuous, and {how}; drop "
                             f"--split-prompts/--no-split-prompts")
        if self.kv_admission is not None and self.kv_admission not in KV_ADMISSIONS:
            raise ValueError(f"kv_admission must be one of {', '.join(KV_ADMISSIONS)}, not "
                             f"{self.kv_admission!r}")
        if self.kv_admission == "reserve" and self.scheduler == "static":
            raise ValueError("kv_admission reserve: a static batch reserves each sequence's "
                             "whole prompt + output already; drop --kv-admission")
        if self.scheduler == "static" and (self.speculative or self.prefix_share):
            raise ValueError("the static scheduler runs plain fixed batches; speculative "
                             "decoding and prefix caching need --scheduler continuous")

    def resolved(self, runtime: RuntimeProfile = IDEAL) -> "ServeConfig":
        """This configuration made concrete: ``runtime`` None becomes ``runtime`` (the
        deployment's chip's, :func:`~.serve.deployment_runtime`; ideal by default),
        ``kv_admission`` None the runtime's (on demand if it states none; "reserve" refused
        beside what it does not model), ``chunked_prefill`` None the runtime's policy
        (chunked if it states none), and ``split_prompts`` None likewise (split if it states
        none) where prompts are chunked under the continuous scheduler, and None where they
        are not (whole in steps of their own: the runtime's value does not apply; an explicit
        one is refused, here when the runtime's policy runs prefill first). Idempotent."""
        rt = self.runtime if self.runtime is not None else runtime
        ch = self.chunked_prefill
        if ch is None:
            ch = rt.chunked_prefill if rt.chunked_prefill is not None else True
        sp = self.split_prompts
        if not ch or self.scheduler == "static":
            if sp is not None:      # chunked_prefill False from the runtime's policy
                raise ValueError(f"split_prompts {str(sp).lower()}: it applies to chunked "
                                 f"prefill, and the runtime {rt.name} runs prefill first "
                                 f"(chunked_prefill false); drop --split-prompts/"
                                 f"--no-split-prompts or add --chunked-prefill")
        elif sp is None:
            sp = rt.split_prompts if rt.split_prompts is not None else True
        # (a static batch reserves whole sequences anyway: the setting does not apply)
        adm = (None if self.scheduler == "static" else
               self.kv_admission or rt.kv_admission or "on-demand")
        if adm == "reserve":
            clash = [what for what, on in (
                ("speculative decoding", self.speculative is not None),
                ("prefix caching (--prefix-share)", bool(self.prefix_share)),
                ("a KV cache across memory tiers (--kv-offload tier or swap)",
                 self.kv_offload in ("tier", "swap"))) if on]
            if clash:
                src = ("" if self.kv_admission else
                       f" (the runtime {rt.name}'s policy; --kv-admission on-demand overrides it)")
                raise ValueError(f"kv_admission reserve{src} is not modelled with "
                                 f"{' or '.join(clash)}; use --kv-admission on-demand")
        return replace(self, runtime=rt, chunked_prefill=ch, split_prompts=sp,
                       kv_admission=adm)

    @property
    def decode_queries(self) -> int:
        return 1 + (self.speculative.k if self.speculative else 0)
