"""The headline study: the same model trained, prefilled and decoded on several chips.

For each chip :func:`compare` runs (through ``run_workload``):

* **train**: one training step at ``train_tp`` × ``train_dp`` chips, ``train_batch`` sequences
  of ``train_seq`` tokens per data-parallel replica: tokens/s per chip, MFU, step time;
* **prefill**: time to first token for each prompt length in ``prompts`` at batch 1;
* **decode**: time per output token and tokens/s for every batch in ``batches`` and context
  in ``contexts``;
* tokens per joule and the bottleneck of each phase at the reference points (the first prompt;
  decode at ``ref_batch`` and the first context);
* average power (energy ÷ time) of every run against the chip's TDP.

Inference runs at ``infer_tp`` chips. The result keeps every raw run (for the report) and
gives the ``--json`` structure of issue 6 through :meth:`Comparison.to_json`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from ...arch import load_chip
from .evaluate import power_metrics


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")
    return v


@dataclass(frozen=True)
class CompareSettings:
    """What the study runs. Defaults: training at TP=8, DP=1 with 16 sequences of 4096 tokens
    per replica per optimizer step, run as micro-batches of ~8k tokens with gradients
    accumulated (so the AdamW step is amortised as in real training, and llama-3-70b's
    weights, gradients, Adam state and one micro-batch's activations fit in the 192-216 GiB of
    either 2026 chip), inference at TP=1; prompts 2k/32k; decode batches 1-256 at 2k/32k
    contexts."""

    train_tp: int = 8
    train_dp: int = 1
    train_batch: int = 16
    train_seq: int = 4096
    infer_tp: int = 1
    prompts: tuple[int, ...] = (2048, 32768)
    batches: tuple[int, ...] = (1, 8, 64, 256)
    contexts: tuple[int, ...] = (2048, 32768)
    gen: int = 1
    ref_batch: int = 64

    def __post_init__(self):
        for n in ("train_tp", "train_dp", "train_batch", "train_seq", "infer_tp", "gen",
                  "ref_batch"):
            _pos_int(n, getattr(self, n))
        for n in ("prompts", "batches", "contexts"):
            vals = getattr(self, n)
            if not vals:
                raise ValueError(f"{n} must list at least one value, not an empty list")
            for v in vals:
                _pos_int(n, v)
        if self.ref_batch not in self.batches:
            raise ValueError(f"ref_batch must be one of the decode batches "
                             f"({', '.join(map(str, self.batches))}), not {self.ref_batch}")

    def describe(self) -> str:
        return (f"train: TP={self.train_tp} DP={self.train_dp}, {self.train_batch} × "
                f"{self.train_seq} tokens per replica; inference: TP={self.infer_tp}; "
                f"tokens/J and decode bottleneck at batch {self.ref_batch}, context "
                f"{self.contexts[0]}")


@dataclass
class ChipRuns:
    """Every run of one chip: ``train``, ``prefill[prompt]``, ``decode[(batch, context)]``, each
    a ``to_dict()`` of a workload result with ``power_w``/``exceeds_tdp`` added (or an
    ``error`` string when the run failed)."""

    chip: Any
    train: dict
    prefill: dict[int, dict] = field(default_factory=dict)
    decode: dict[tuple[int, int], dict] = field(default_factory=dict)

    def runs(self):
        yield ("train", None), self.train
        for p, r in self.prefill.items():
            yield ("prefill", p), r
        for bc, r in self.decode.items():
            yield ("decode", bc), r


@dataclass
class Comparison:
    model: str
    settings: CompareSettings
    chips: dict[str, ChipRuns]

    def summary(self, name: str) -> dict:
        """The issue's per-chip structure."""
        cr = self.chips[name]
        s = self.settings
        ref = cr.decode[(s.ref_batch, s.contexts[0])]
        ej = ref.get("energy_j_per_token")
        return {
            "area_mm2": cr.chip.die_area_mm2,
            "tokens_per_j": (1.0 / ej) if ej else None,
            "train": {"tokens_per_s": _per_chip(cr.train),
                      "mfu": cr.train.get("mfu"), "step_s": cr.train.get("seconds")},
            "prefill": [{"prompt": p, "ttft_s": r.get("ttft_s")} for p, r in cr.prefill.items()],
            "decode": [{"batch": b, "context": c, "tpot_s": r.get("tpot_s"),
                        "tokens_per_s": r.get("tokens_per_s")}
                       for (b, c), r in cr.decode.items()],
            "bottleneck": {"train": cr.train.get("bound"),
                           "prefill": cr.prefill[s.prompts[0]].get("bound"),
                           "decode": ref.get("bound")},
        }

    def to_json(self) -> dict:
        """``{"model": …, "chips": {NAME: summary}}``, exactly the structure of issue 6."""
        return {"model": self.model, "chips": {n: self.summary(n) for n in self.chips}}

    def details(self) -> dict:
        """:meth:`to_json` plus the settings, and per run: fits, power and TDP flags, errors."""
        out = self.to_json()
        out["settings"] = {k: (list(v) if isinstance(v, tuple) else v)
                           for k, v in self.settings.__dict__.items()}
        out["settings_text"] = self.settings.describe()
        for name, cr in self.chips.items():
            out["chips"][name]["runs"] = [
                {"phase": ph, "point": (list(pt) if isinstance(pt, tuple) else pt),
                 **{k: r.get(k) for k in ("seconds", "fits", "bound", "power_w",
                                          "tdp_fraction", "exceeds_tdp", "energy_j", "error")}}
                for (ph, pt), r in cr.runs()]
        return out

    def run_warnings(self) -> list[str]:
        """Distinct warnings of all runs (e.g. contexts beyond the model's trained length)."""
        seen: dict[str, None] = {}
        for cr in self.chips.values():
            for _, r in cr.runs():
                for w in r.get("warnings") or []:
                    seen.setdefault(str(w), None)
        return list(seen)

    def rows(self) -> list[dict]:
        """One flat row per run (the CSV table)."""
        out = []
        for name, cr in self.chips.items():
            for (phase, pt), r in cr.runs():
                row = {"chip": name, "phase": phase,
                       "batch": (pt[0] if phase == "decode" else
                                 1 if phase == "prefill"
                                 else self.settings.train_batch * self.settings.train_dp),
                       "context": (pt[1] if phase == "decode" else
                                   pt if phase == "prefill" else self.settings.train_seq),
                       "area_mm2": cr.chip.die_area_mm2}
                for k in ("seconds", "ttft_s", "tpot_s", "tokens_per_s", "mfu", "energy_j",
                          "energy_j_per_token", "power_w", "exceeds_tdp", "fits", "bound",
                          "error"):
                    row[k] = r.get(k)
                out.append(row)
        return out


def _per_chip(res: dict) -> float | None:
    """Training tokens/s per chip: the run's tokens/s (all its chips) ÷ its chip count."""
    v = res.get("tokens_per_s")
    return None if v is None else v / res.get("chips", 1)


def _default_run(chip, model, **kw):
    from ...workloads import run_workload
    return run_workload(chip, model, **kw)


def _one(run, chip, model, **kw) -> dict:
    try:
        with warnings.catch_warnings():  # kept in the result's ``warnings`` list instead
            warnings.simplefilter("ignore", UserWarning)
            res = run(chip, model, **kw)
    except ValueError as exc:  # e.g. a TP degree the model cannot be split into
        return {"error": str(exc)}
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    d.update(power_metrics(chip, d.get("energy_j"), d.get("seconds"), d.get("chips", 1)))
    return d


def compare(chips, model: str, settings: CompareSettings | None = None, *,
            run: Callable | None = None, progress: Callable[[str], None] | None = None
            ) -> Comparison:
    """Run the study for ``chips`` (names, paths or Chip objects) on ``model``.

    ``run(chip, model, **kwargs)`` defaults to ``run_workload``; tests inject their own.
    """
    s = settings or CompareSettings()
    run = run or _default_run
    loaded = [load_chip(c) for c in chips]
    if not loaded:
        raise ValueError("chips must name at least one chip, not an empty list")
    names = [c.name for c in loaded]
    if len(set(names)) != len(names):
        raise ValueError(f"chips must be distinct, not {names}")
    from ...workloads import load_model
    m = load_model(model)
    say = progress or (lambda _: None)
    out: dict[str, ChipRuns] = {}
    for chip in loaded:
        say(f"{chip.name}: train")
        cr = ChipRuns(chip=chip, train=_one(run, chip, m, phase="train",
                                            batch=s.train_batch * s.train_dp,
                                            seq=s.train_seq, tp=s.train_tp, dp=s.train_dp))
        for p in s.prompts:
            say(f"{chip.name}: prefill {p}")
            cr.prefill[p] = _one(run, chip, m, phase="prefill", batch=1, prompt=p, gen=s.gen,
                                 tp=s.infer_tp)
        for c in s.contexts:
            for b in s.batches:
                say(f"{chip.name}: decode batch {b} context {c}")
                cr.decode[(b, c)] = _one(run, chip, m, phase="decode", batch=b, prompt=c,
                                         gen=s.gen, tp=s.infer_tp)
        out[chip.name] = cr
    return Comparison(model=getattr(m, "name", str(model)), settings=s, chips=out)
