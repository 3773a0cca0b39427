"""Which of two designs should hold attention and which the FFNs (experts): ``diptych compare
--serving-afd`` (docs/serving.md, "Attention–FFN disaggregation").

Both assignments are served (:func:`~diptych.sim.serving.deployment.afd_deployment`): design
X on the attention pool and Y on the FFN pool, then the reverse, with the same pool sizes,
micro-batches, request stream, engine policy and serving runtime (the first design's, so
that only the hardware differs); each chip runs its preset's default precision (infer-2026
FP8 weights, h100 BF16), stated per assignment. The better assignment is the one with the
higher output tokens per second per chip (equal chips: the shorter steps); the reason states each
assignment's mean step and each pool's utilisation — the pool near 100 % is the one that
sets the pace, the other waits on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch import load_chip
from ...arch.runtime import IDEAL, load_runtime
from .afd import DEFAULT_MICROBATCHES, AfdSpec
from .config import ServeConfig
from .deployment import afd_deployment
from .requests import Load
from .serve import StepTimerCache, serve


@dataclass(frozen=True)
class AfdRoleSettings:
    """The pools and the load both assignments are served under: a closed loop of
    ``concurrency`` clients sending ``requests`` requests of ``prompt``/``gen`` tokens (a
    length spec as ``serve --prompt``)."""

    attention_chips: int = 1
    ffn_chips: int = 1
    microbatches: int = DEFAULT_MICROBATCHES
    concurrency: int = 32
    requests: int = 64
    prompt: str = "512"
    gen: str = "64"

    def __post_init__(self):
        AfdSpec(self.attention_chips, self.ffn_chips, self.microbatches)   # its checks
        for n in ("concurrency", "requests"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{n} must be a positive integer, not {v!r}")


def afd_roles(x, y, model, settings: AfdRoleSettings | None = None, *,
              oracles: StepTimerCache | None = None) -> dict:
    """Both assignments of designs ``x`` and ``y`` to the attention and FFN roles (module
    docstring): ``assignments`` (attention chip, FFN chip, mean step, tokens/s per chip,
    each pool's utilisation, the link's hidden share), ``best`` (its index) and ``verdict``
    (the sentence naming which die holds attention and which the experts, and why)."""
    from .requests import parse_length

    s = settings or AfdRoleSettings()
    cx = load_chip(x)
    rt = (load_runtime(cx.overheads.serving_runtime) if cx.overheads else IDEAL)
    cfg = ServeConfig(runtime=rt)
    load = Load(concurrency=s.concurrency, requests=s.requests,
                prompt=parse_length(s.prompt, "prompt"), gen=parse_length(s.gen, "gen"))
    oracles = oracles or StepTimerCache()
    out = []
    for att, ffn in ((x, y), (y, x)):
        spec = AfdSpec(s.attention_chips, s.ffn_chips, s.microbatches)
        res = serve(afd_deployment(att, ffn, model, spec), load, cfg, oracles=oracles)
        a = res.info["afd"]
        pools = {p["role"]: p["precision"]["weights"] for p in res.info["pools"]}
        out.append({"attention_chip": a["attention"]["chip"], "ffn_chip": a["ffn"]["chip"],
                    "attention_weights": pools["attention"], "ffn_weights": pools["ffn"],
                    "mean_step_s": a["mean_step_s"],
                    "tokens_per_s_per_chip": res.tokens_per_s_per_chip,
                    "tokens_per_j": res.tokens_per_j,
                    "attention_utilisation": a["attention"]["utilisation"],
                    "ffn_utilisation": a["ffn"]["utilisation"],
                    "link_hidden_fraction": a["link_hidden_fraction"],
                    "tpot_p50_s": res.tpot_s["p50"]})
    best = 0 if out[0]["tokens_per_s_per_chip"] >= out[1]["tokens_per_s_per_chip"] else 1
    b, o = out[best], out[1 - best]
    gain = b["tokens_per_s_per_chip"] / o["tokens_per_s_per_chip"] \
        if o["tokens_per_s_per_chip"] else float("inf")

    def pace(d: dict) -> str:
        who = "attention" if d["attention_utilisation"] >= d["ffn_utilisation"] else "FFN"
        return (f"{who} pool sets the pace (attention {100 * d['attention_utilisation']:.0f} "
                f"%, FFN {100 * d['ffn_utilisation']:.0f} % busy), mean step "
                f"{d['mean_step_s'] * 1e3:.2f} ms")

    verdict = (f"{b['attention_chip']} should hold attention and {b['ffn_chip']} the "
               f"{'experts' if _is_moe(model) else 'FFNs'}: {gain:.2f}x the output tokens/s "
               f"per chip of the reverse ({b['tokens_per_s_per_chip']:.0f} vs "
               f"{o['tokens_per_s_per_chip']:.0f}); so assigned the {pace(b)}; reversed the "
               f"{pace(o)}")
    return {"model": str(model), "settings": s.__dict__, "runtime": rt.name,
            "assignments": out, "best": best, "verdict": verdict}


def _is_moe(model) -> bool:
    from ...workloads import load_model
    return load_model(model).is_moe


__all__ = ["AfdRoleSettings", "afd_roles"]
