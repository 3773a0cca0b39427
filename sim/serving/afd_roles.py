"""Which of two designs should hold attention and which the FFNs (experts): ``diptych compare
--serving-afd`` (docs/serving.md, "Attention–FFN disaggregation").

Both assignments are deployed at their best (:mod:`.afd_search`, the attention:FFN ratio
search): design X on the attention pool and Y on the FFN pool, then the reverse, each over
every attention pool size ``n``, FFN pool size ``m`` (``n + m`` up to the settings' chips) and
micro-batch count, on the same closed-loop request stream, engine policy and serving runtime
(the first design's, so that only the hardware differs); each chip runs its preset's default
precision (infer-2026 FP8 weights, h100 BF16), stated per assignment. Each assignment's plan
is its highest goodput per chip meeting the SLOs; the better assignment is the one whose plan
has the higher goodput per chip; the verdict states the ratio each chose, each one's mean step
and each pool's utilisation — the pool near 100 % is the one that sets the pace, the other
waits on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...workloads import load_model
from .afd_search import AfdSearchSpace, afd_search, assignments
from .config import ServeConfig
from .requests import Load
from .serve import StepTimerCache


@dataclass(frozen=True)
class AfdRoleSettings:
    """The search both assignments are deployed by and the load they are served under: up to
    ``chips`` chips (attention and FFN pools together), the micro-batch counts
    ``microbatches``, a closed loop of ``concurrency`` clients sending ``requests`` requests
    of ``prompt``/``gen`` tokens (a length spec as ``serve --prompt``)."""

    chips: int = 4
    microbatches: tuple[int, ...] = (1, 2, 4)
    concurrency: int = 32
    requests: int = 64
    prompt: str = "512"
    gen: str = "64"

    def __post_init__(self):
        AfdSearchSpace(("x",), self.chips, microbatches=self.microbatches)     # its checks
        for n in ("concurrency", "requests"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{n} must be a positive integer, not {v!r}")


def afd_roles(x, y, model, settings: AfdRoleSettings | None = None, *,
              oracles: StepTimerCache | None = None) -> dict:
    """Both assignments of designs ``x`` and ``y`` to the attention and FFN roles, each at
    its best attention:FFN plan (module docstring): ``assignments`` (attention chip, FFN
    chip, the plan's ratio ``n:m`` and micro-batches, mean step, goodput and tokens/s per
    chip, each pool's utilisation, the link's hidden share; or ``binding`` when no plan of
    the assignment meets the SLOs), ``best`` (its index), ``verdict`` (the sentence naming
    which die holds attention and which the experts, at which ratio, and why) and
    ``search`` (the ratio search's result)."""
    from .requests import parse_length

    s = settings or AfdRoleSettings()
    load = Load(concurrency=s.concurrency, requests=s.requests,
                prompt=parse_length(s.prompt, "prompt"), gen=parse_length(s.gen, "gen"))
    space = AfdSearchSpace((x, y), s.chips, microbatches=s.microbatches)
    res = afd_search(model, space, load, ServeConfig(), oracles=oracles or StepTimerCache(),
                     require_slo=False)
    out = []
    for att, ffn in assignments((x, y)):
        d = res["per_assignment"][f"attention {att} + FFN {ffn}"]
        r = d["best_goodput"]
        if r is None:
            out.append({"attention_chip": att, "ffn_chip": ffn, "binding": d["binding"],
                        "goodput_rps_per_chip": 0.0, "tokens_per_s_per_chip": 0.0})
            continue
        out.append({"attention_chip": att, "ffn_chip": ffn, "ratio": r["ratio"],
                    "attention_chips": r["attention_chips"], "ffn_chips": r["ffn_chips"],
                    "microbatches": r["microbatches"], "plan": r["plan"],
                    "attention_weights": r["precision"]["attention"],
                    "ffn_weights": r["precision"]["ffn"], "mean_step_s": r["mean_step_s"],
                    "goodput_rps_per_chip": r["goodput_rps_per_chip"],
                    "tokens_per_s_per_chip": r["tokens_per_s_per_chip"],
                    "tokens_per_j": r["tokens_per_j"], "usd_per_mtok": r["usd_per_mtok"],
                    "attention_utilisation": r["attention_utilisation"],
                    "ffn_utilisation": r["ffn_utilisation"],
                    "link_hidden_fraction": r["link_hidden_fraction"],
                    "tpot_p50_s": r["tpot_p50_s"], "binding": d["binding"]})
    if len(out) == 1:
        raise ValueError(f"--serving-afd puts two different chips in the attention and FFN "
                         f"roles, not {x} twice")
    if not any("ratio" in a for a in out):
        raise ValueError(f"no attention-FFN plan of {x} and {y} meets the SLOs: "
                         f"{out[0]['binding']}")
    key = "goodput_rps_per_chip"
    best = 0 if out[0][key] >= out[1][key] else 1
    b, o = out[best], out[1 - best]
    moe = "experts" if load_model(model).is_moe else "FFNs"
    if "ratio" not in o:
        verdict = (f"{b['attention_chip']} should hold attention and {b['ffn_chip']} the "
                   f"{moe} ({_plan(b)}; {_pace(b)}); reversed, no plan meets the SLOs: "
                   f"{o['binding']}")
    else:
        gain = b[key] / o[key] if o[key] else float("inf")
        verdict = (f"{b['attention_chip']} should hold attention and {b['ffn_chip']} the "
                   f"{moe}: {gain:.2f}x the goodput per chip of the reverse, each at its best "
                   f"plan ({b[key]:.3g} vs {o[key]:.3g} req/s per chip); so assigned "
                   f"({_plan(b)}) the {_pace(b)}; reversed ({_plan(o)}) the {_pace(o)}")
    return {"model": res["model"], "settings": {**s.__dict__,
                                                "microbatches": list(s.microbatches)},
            "runtime": res["runtime"], "assignments": out, "best": best, "verdict": verdict,
            "search": {k: v for k, v in res.items() if k != "evaluated"}}


def _plan(d: dict) -> str:
    k = d["microbatches"]
    return (f"{d['attention_chips']} attention : {d['ffn_chips']} FFN chips, {k} "
            f"micro-batch{'es' if k != 1 else ''}")


def _pace(d: dict) -> str:
    who = "attention" if d["attention_utilisation"] >= d["ffn_utilisation"] else "FFN"
    return (f"{who} pool sets the pace (attention {100 * d['attention_utilisation']:.0f} %, "
            f"FFN {100 * d['ffn_utilisation']:.0f} % busy), mean step "
            f"{d['mean_step_s'] * 1e3:.2f} ms")


__all__ = ["AfdRoleSettings", "afd_roles"]
