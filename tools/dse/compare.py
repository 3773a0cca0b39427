"""The headline study: the same model trained, prefilled and decoded on several chips.

For each chip :func:`compare` runs (through ``run_workload``):

* **train**: one training step at ``train_tp`` × ``train_dp`` chips, ``train_batch`` sequences
  of ``train_seq`` tokens per data-parallel replica: tokens/s per chip, step time, MFU (against
  the chip's own peak in the precision the run computes in, which the result names); or, with
  ``cluster_chips`` = N, the best parallel plan for N chips of ``cluster`` (default
  ``dgx-h100``: NVSwitch domains of 8 on each chip's own links, 400 Gb/s per chip between
  them) found by :func:`diptych.sim.cluster.search.search_plans` for a global batch of
  ``cluster_batch`` sequences (default: ``train_batch × N / train_tp``, the single-node
  run's sequences per chip). Either way the result states the plan (``train.plan``);
* **prefill**: time to first token for each prompt length in ``prompts`` at batch 1;
* **decode**: time per output token and tokens/s for every batch in ``batches`` and context
  in ``contexts``;
* tokens per joule and the bottleneck of each phase at the reference points (the first prompt;
  decode at ``ref_batch`` and the first context);
* average power (energy ÷ time) of every run against the chip's TDP;
* energy by component (MAC arrays, vector units, SRAM, DRAM, NoC/D2D, links, static:
  :mod:`diptych.sim.energy_parts`) of every run, and per chip of each phase's reference run.

Precision: each chip runs its defaults (inference: the chip's default dtype; training: bf16)
unless ``settings.precision`` pins it (see :mod:`diptych.tools.precision_spec`); the result states
per chip and phase what ran. A chip that cannot compute a pinned precision gets an
``unsupported`` record instead of a run. Prompts and contexts default to a short and a long
one within the model's ``max_position_embeddings`` (:func:`default_contexts`).

Inference runs at ``infer_tp`` chips. The result keeps every raw run (for the report) and
gives the ``--json`` structure of issue 6 through :meth:`Comparison.to_json`.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from ...arch import load_chip
from ...arch.area import die_area_mm2
from ...sim import energy_parts as EP
from ...sim.run.variant import IDEAL
from ..fmt import left_out
from ..precision_spec import PHASES, PrecisionChoice, describe, resolve
from .evaluate import power_metrics, tier_metrics
from ...arch.geometry import check
from .physical import cost_summary

#: ``progress(done, total, label)``: called before each run (``label`` says which) and once
#: at the end with ``done == total``.
ProgressFn = Callable[[int, int, str], None]

#: The longest default context (tokens), for models whose window is longer still.
LONG_CONTEXT = 32768
#: The short default context (tokens), or half the long one if that is less.
SHORT_CONTEXT = 2048
#: The cluster of the training plan search when ``cluster_chips`` is given without one
#: (every chip on it uses its own scale-up links; docs/cluster.md).
DEFAULT_CLUSTER = "dgx-h100"
#: Plans of the search's roofline screen simulated with the engine (the best is kept).
PLAN_REFINE = 3


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")
    return v


def default_contexts(max_positions: int, gen: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(prompts, decode contexts)``: a short and a long one within a model's window.

    Long: ``min(32768, max_positions)`` for prompts, and for decode ``gen`` tokens fewer, so
    that context + generated tokens stays within the window; short: ``min(2048, long // 2)``.
    llama-3-70b (8192 positions): prompts 2048 and 8192, decode contexts 2048 and 8191."""
    def pair(top: int) -> tuple[int, ...]:
        top = max(1, top)
        return tuple(dict.fromkeys((max(1, min(SHORT_CONTEXT, top // 2)), top)))

    return (pair(min(LONG_CONTEXT, max_positions)),
            pair(min(LONG_CONTEXT, max_positions - gen)))


@dataclass(frozen=True)
class CompareSettings:
    """What the study runs. Defaults: training at TP=8, DP=1 with 16 sequences of 4096 tokens
    per replica per optimizer step, run as micro-batches of ~8k tokens with gradients
    accumulated (so the AdamW step is amortised as in real training, and llama-3-70b's
    weights, gradients, Adam state and one micro-batch's activations fit in the 192-216 GiB of
    either 2026 chip), inference at TP=1; decode batches 1-256; prompts and contexts ``None``
    = :func:`default_contexts` of the model (:meth:`for_model` fills them in); ``precision``
    pins ``{phase: PrecisionChoice}`` for every chip (empty: each chip's defaults).
    ``execution``/``fusion`` go to every single-node run (``run_workload``'s; None: its
    default, the schedule); ``execution`` also times the layers of the plan search of
    ``cluster_chips`` (its refined plans; None: the schedule). ``waterfall``: the efficiency
    waterfall (:mod:`diptych.sim.run.waterfall`) of each chip's reference points (training on
    one node, or the best plan's step with ``cluster_chips``; the first prompt; decode at
    ``ref_batch`` and the first context). ``ideal``: every run's bound, every overhead left out
    (:data:`~diptych.sim.run.variant.IDEAL`, ``--ideal``: recipe and format ops, launches and
    syncs, the collective library's losses, the power limit; with ``cluster_chips`` the plan
    the search finds with its overheads, re-run without them); a pinned precision naming a
    recipe contradicts it (ValueError)."""

    train_tp: int = 8
    train_dp: int = 1
    train_batch: int = 16
    train_seq: int = 4096
    infer_tp: int = 1
    prompts: tuple[int, ...] | None = None
    batches: tuple[int, ...] = (1, 8, 64, 256)
    contexts: tuple[int, ...] | None = None
    gen: int = 1
    ref_batch: int = 64
    precision: dict[str, PrecisionChoice] = field(default_factory=dict, hash=False)
    cluster_chips: int | None = None
    cluster: str | None = None
    cluster_batch: int | None = None
    execution: str | None = None
    fusion: bool = True
    waterfall: bool = False
    ideal: bool = False

    def __post_init__(self):
        if self.execution not in (None, "sum", "schedule"):
            raise ValueError(f"execution must be 'sum', 'schedule' or None (the default: "
                             f"schedule), not {self.execution!r}")
        for n in ("train_tp", "train_dp", "train_batch", "train_seq", "infer_tp", "gen",
                  "ref_batch"):
            _pos_int(n, getattr(self, n))
        for n in ("cluster_chips", "cluster_batch"):
            if getattr(self, n) is not None:
                _pos_int(n, getattr(self, n))
        if self.cluster_chips is None:
            for n in ("cluster", "cluster_batch"):
                if getattr(self, n) is not None:
                    raise ValueError(f"{n} applies to the training plan search: give "
                                     f"cluster_chips (--cluster-chips N) too")
        elif self.cluster_batch is None and (self.train_batch * self.cluster_chips
                                             % self.train_tp):
            raise ValueError(f"the default cluster_batch, train_batch x cluster_chips / "
                             f"train_tp = {self.train_batch} x {self.cluster_chips} / "
                             f"{self.train_tp}, is not an integer: give cluster_batch "
                             f"(--cluster-batch)")
        for n in ("prompts", "batches", "contexts"):
            vals = getattr(self, n)
            if vals is None and n != "batches":
                continue
            if not vals:
                raise ValueError(f"{n} must list at least one value, not an empty list")
            for v in vals:
                _pos_int(n, v)
        # sizes no run could take (sim/limits.py): refused here, not as a column of errors
        from ...sim.limits import MAX_BATCH, MAX_TOKENS
        for n, limit, what in (("train_seq", MAX_TOKENS, "tokens"), ("gen", MAX_TOKENS, "tokens"),
                               ("prompts", MAX_TOKENS, "tokens"),
                               ("contexts", MAX_TOKENS, "tokens"),
                               ("train_batch", MAX_BATCH, "sequences"),
                               ("batches", MAX_BATCH, "sequences"),
                               ("cluster_batch", MAX_BATCH, "sequences")):
            v = getattr(self, n)
            for x in (v if isinstance(v, tuple) else (v,)):
                if x is not None and x > limit:
                    raise ValueError(f"{n} must be at most {limit:,} {what} (sim/limits.py), "
                                     f"not {x:,}")
        if self.ref_batch not in self.batches:
            raise ValueError(f"ref_batch must be one of the decode batches "
                             f"({', '.join(map(str, self.batches))}), not {self.ref_batch}")
        for ph, c in self.precision.items():
            if ph not in PHASES or not isinstance(c, PrecisionChoice):
                raise ValueError(f"precision must map phases ({', '.join(PHASES)}) to "
                                 f"PrecisionChoice, not {ph!r}: {c!r}")
            if self.ideal and c.recipe:
                raise ValueError(f"--ideal leaves every precision recipe's overheads out; "
                                 f"--precision pins the {c.recipe} recipe for {ph}: give one "
                                 f"of them")

    def for_model(self, model) -> "CompareSettings":
        """These settings with unset prompts/contexts derived from ``model``'s window."""
        prompts, contexts = default_contexts(model.max_position_embeddings, self.gen)
        return replace(self, prompts=self.prompts or prompts,
                       contexts=self.contexts or contexts)

    @property
    def cluster_name(self) -> str | None:
        """The cluster of the training plan search (None without ``cluster_chips``)."""
        if self.cluster_chips is None:
            return None
        return self.cluster or DEFAULT_CLUSTER

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step of the training run (all replicas)."""
        if self.cluster_chips is None:
            return self.train_batch * self.train_dp
        return self.cluster_batch or self.train_batch * self.cluster_chips // self.train_tp

    def train_text(self) -> str:
        """What the training column runs, in one line."""
        if self.cluster_chips is None:
            return (f"train: TP={self.train_tp} DP={self.train_dp}, {self.train_batch} × "
                    f"{self.train_seq} tokens per replica")
        return (f"train: best plan found for {self.cluster_chips} chips of "
                f"{self.cluster_name}, {self.global_batch} × {self.train_seq} tokens per step")

    def describe(self) -> str:
        groups: dict[PrecisionChoice, list[str]] = {}
        for ph, c in self.precision.items():
            groups.setdefault(c, []).append(ph)
        pin = ("; precision pinned: " + ", ".join(
            f"{c.describe()} ({'every phase' if len(phs) == len(PHASES) else ', '.join(phs)})"
            for c, phs in groups.items())
               if self.precision else "; precision: each chip's defaults")
        ctx = f", context {self.contexts[0]}" if self.contexts else ""
        ideal = f"; ideal: {left_out(asdict(IDEAL))} left out" if self.ideal else ""
        return (f"{self.train_text()}; inference: TP={self.infer_tp}; "
                f"tokens/J and decode bottleneck at batch {self.ref_batch}{ctx}{pin}{ideal}")


@dataclass
class ChipRuns:
    """Every run of one chip: ``train``, ``prefill[prompt]``, ``decode[(batch, context)]``, each
    a ``to_dict()`` of a workload result with ``power_w``/``exceeds_tdp`` added (or an
    ``error`` string when the run failed, plus ``unsupported: True`` when the chip cannot
    compute the precision); ``precision[phase]`` is :func:`diptych.tools.precision_spec.resolve`."""

    chip: Any
    train: dict
    prefill: dict[int, dict] = field(default_factory=dict)
    decode: dict[tuple[int, int], dict] = field(default_factory=dict)
    precision: dict[str, dict] = field(default_factory=dict)

    def runs(self):
        yield ("train", None), self.train
        for p, r in self.prefill.items():
            yield ("prefill", p), r
        for bc, r in self.decode.items():
            yield ("decode", bc), r


def roofline_regime(r: dict) -> str | None:
    """The roofline regime of a run, from what it achieved: ``memory`` when it used more of
    the DRAM's peak bandwidth than of the MACs' peak (HFU), ``compute`` otherwise;
    ``communication`` when its own bound says so. (A run's ``bound`` is the engine's busiest
    unit, which for decode is the arrays installing weights: not the regime an architect
    reads; issue 23 item 1.) None without the figures."""
    if r.get("bound") == "communication":
        return "communication"
    hfu, bw = r.get("hfu"), r.get("dram_bw_utilization")
    if hfu is None or bw is None:
        return r.get("bound")
    return "memory" if bw > hfu else "compute"


def tier_summary(chip, table: str = "dram2") -> dict | None:
    """A chip's second memory tier (``table`` ``dram3``: its third) for ``compare --json``:
    ``attach``, ``kind``, ``gib``, ``bytes_per_s`` (what it delivers: pins or links); None
    without one."""
    t = getattr(chip, table, None)
    if t is None:
        return None
    return {"attach": t.attach, "kind": t.kind, "gib": t.capacity_gib,
            "bytes_per_s": t.bytes_per_s}


def run_tier(r: dict) -> dict:
    """What a run put in the second tier (:func:`~.evaluate.tier_metrics`); None values for
    a run that failed."""
    if r.get("error"):
        return {"dram2_state_gib": None, "dram2_traffic_share": None,
                "dram3_state_gib": None, "dram3_traffic_share": None}
    return tier_metrics(r)


def _deciding_resource(chip, bound: str | None, phase: str, run: dict | None = None) -> str:
    """The winner's resource that decides a phase, from its regime there (and, for a run
    that streamed state from a second memory tier, that tier), in words."""
    from .. import fmt
    if bound == "compute":
        return (f"compute-bound there: its peak of "
                f"{fmt.eng(chip.peak_ops_per_s.get(chip.default_dtype), 'OP/s')} decides")
    share = run_tier(run or {})["dram2_traffic_share"]
    if bound == "memory" and share:
        t = chip.dram2
        return (f"memory-bound there: {share:.0%} of its DRAM bytes stream from its second "
                f"tier ({t.kind}, {t.attach}) at {fmt.eng(t.bytes_per_s, 'B/s')}, beside "
                f"{fmt.eng(chip.dram_bytes_per_s, 'B/s')} of first-tier bandwidth")
    if bound == "memory":
        return (f"memory-bound there: its DRAM bandwidth of "
                f"{fmt.eng(chip.dram_bytes_per_s or None, 'B/s')} decides"
                if chip.has_dram else "memory-bound there: its on-chip SRAM bandwidth decides")
    if bound == "communication":
        ic = chip.interconnect
        total = ic.bytes_per_s_per_direction if ic is not None else None
        return (f"communication-bound there: its links "
                f"({fmt.eng(total, 'B/s')} per direction) decide")
    return f"{phase} regime {bound or 'unknown'}"


def power_limited_ghz(r: dict) -> float | None:
    """The clock a run was reported at because its TDP could not sustain the nominal one
    (:mod:`diptych.sim.run.power_limit`); None when it was not power-limited."""
    pl = (r.get("info") or {}).get("power_limit") or {}
    clock, nominal = pl.get("clock_ghz"), pl.get("nominal_clock_ghz")
    return clock if clock is not None and nominal and clock < nominal else None


def run_notes(r: dict) -> list[str]:
    """Short flags of one run: unsupported, error, does not fit, > TDP, power-limited."""
    if r.get("unsupported"):
        return ["unsupported"]
    notes = ["error"] if r.get("error") else []
    if r.get("fits") is False:
        notes.append("does not fit")
    if r.get("exceeds_tdp"):
        notes.append("> TDP")
    if power_limited_ghz(r) is not None:
        notes.append("power-limited")
    return notes


@dataclass
class Comparison:
    model: str
    settings: CompareSettings
    chips: dict[str, ChipRuns]
    #: the model's ``max_position_embeddings`` (contexts beyond it are out of spec)
    max_positions: int | None = None
    #: per chip without DRAM whose SRAM cannot hold the model's weights: the one line that
    #: replaces its runs' errors in :meth:`warnings` (:func:`sram_shortfall`)
    sram_notes: dict[str, str] = field(default_factory=dict)

    @property
    def tiered(self) -> bool:
        """Whether any chip has a second memory tier (``[dram2]``): then every chip's summary
        and every row say what the tier is and what each run put there."""
        return any(cr.chip.dram2 is not None for cr in self.chips.values())

    def summary(self, name: str) -> dict:
        """The issue's per-chip structure, plus ``precision`` per phase, the precision of
        the peak that ``train.mfu`` refers to (``train.mfu_peak_dtype``) and
        ``energy_breakdown_j``: per phase, the energy of its reference run
        (:meth:`reference_runs`) by component (J, the run's chips; None for a run that
        failed). When a chip of the comparison has a second memory tier (:attr:`tiered`):
        ``dram2`` (:func:`tier_summary`, None for a chip without) and, per decode point,
        ``dram2_state_gib`` and ``dram2_traffic_share`` (:func:`run_tier`, with the third
        tier's ``dram3_*`` beside them); with a chip with a third tier also ``dram3``
        (:func:`tier_summary` of ``[dram3]``)."""
        cr = self.chips[name]
        s = self.settings
        ref = cr.decode[(s.ref_batch, s.contexts[0])]
        ej = ref.get("energy_j_per_token")
        tiers = self.tiered
        return {
            "area_mm2": die_area_mm2(cr.chip),
            "tokens_per_j": (1.0 / ej) if ej else None,
            "train": {"tokens_per_s": _per_chip(cr.train),
                      "mfu": cr.train.get("mfu"), "step_s": cr.train.get("seconds"),
                      "mfu_peak_dtype": cr.precision["train"]["compute"],
                      "plan": train_plan(cr.train, s)},
            "prefill": [{"prompt": p, "ttft_s": r.get("ttft_s")} for p, r in cr.prefill.items()],
            "decode": [{"batch": b, "context": c, "tpot_s": r.get("tpot_s"),
                        "tokens_per_s": r.get("tokens_per_s"),
                        **(run_tier(r) if tiers else {})}
                       for (b, c), r in cr.decode.items()],
            **({"dram2": tier_summary(cr.chip)} if tiers else {}),
            **({"dram3": tier_summary(cr.chip, "dram3")}
               if any(c.chip.dram3 is not None for c in self.chips.values()) else {}),
            "bottleneck": {"train": cr.train.get("bound"),
                           "prefill": cr.prefill[s.prompts[0]].get("bound"),
                           "decode": ref.get("bound")},
            "precision": {ph: dict(p) for ph, p in cr.precision.items()},
            # energy by component (J, the run's chips) at each phase's reference point
            "energy_breakdown_j": {ph: (dict(r["energy_breakdown_j"])
                                        if r.get("energy_breakdown_j") else None)
                                   for ph, r in self.reference_runs(name).items()},
            **cost_summary(cr.chip, ref),  # cost_usd, usd_per_mtok at the decode reference
            **({"waterfall": {"train": cr.train.get("waterfall"),
                              "prefill": cr.prefill[s.prompts[0]].get("waterfall"),
                              "decode": ref.get("waterfall")}} if s.waterfall else {}),
        }

    def reference_runs(self, name: str) -> dict[str, dict]:
        """Chip ``name``'s run at each phase's reference point: ``train``, ``prefill`` (the
        first prompt), ``decode`` (``ref_batch`` at the first context)."""
        cr, s = self.chips[name], self.settings
        return {"train": cr.train, "prefill": cr.prefill[s.prompts[0]],
                "decode": cr.decode[(s.ref_batch, s.contexts[0])]}

    def verdicts(self) -> dict[str, dict]:
        """Per phase, which chip wins, by how much, and the resource that decides it (issue
        23 item 4): training by tokens/s per chip, prefill by the first prompt's TTFT, decode
        by tokens/s at the reference point. Each: ``winner``, ``runner_up``, ``by`` (the
        winner's advantage, ≥ 1×), ``metric``, ``bound`` (the winner's regime there) and
        ``text``. Empty with one chip; a phase no two chips could run is left out."""
        s = self.settings
        if len(self.chips) < 2:
            return {}
        ref = (s.ref_batch, s.contexts[0])
        p0 = s.prompts[0]
        picks = {"train": ("tokens/s per chip", True,
                           lambda cr: _per_chip(cr.train), lambda cr: cr.train),
                 "prefill": (f"time to first token at {p0} tokens", False,
                             lambda cr: cr.prefill[p0].get("ttft_s"),
                             lambda cr: cr.prefill[p0]),
                 "decode": (f"tokens/s at batch {ref[0]}, context {ref[1]}", True,
                            lambda cr: cr.decode[ref].get("tokens_per_s"),
                            lambda cr: cr.decode[ref])}
        out = {}
        for phase, (metric, more_is_better, value, run) in picks.items():
            vals = [(n, value(cr)) for n, cr in self.chips.items()]
            vals = [(n, v) for n, v in vals if v and not run(self.chips[n]).get("error")]
            if len(vals) < 2:
                continue
            vals.sort(key=lambda x: x[1], reverse=more_is_better)
            (w, a), (r, b) = vals[0], vals[1]
            by = a / b if more_is_better else b / a
            cr = self.chips[w]
            bound = roofline_regime(run(cr))
            out[phase] = {"winner": w, "runner_up": r, "by": by, "metric": metric,
                          "bound": bound,
                          "text": f"{phase}: {w} wins, {by:.3g}× {r} on {metric}; "
                                  f"{_deciding_resource(cr.chip, bound, phase, run(cr))}"}
        return out

    def to_json(self) -> dict:
        """``{"model": …, "chips": {NAME: summary}, "warnings": [...]}``: the structure of
        issue 6, with ``precision`` and ``train.mfu_peak_dtype`` added per chip, and every
        caveat of :meth:`warnings` (each cell that could not be computed among them)."""
        return {"model": self.model, "chips": {n: self.summary(n) for n in self.chips},
                "verdicts": self.verdicts(), "warnings": self.warnings(),
                **({"ideal": True} if self.settings.ideal else {})}

    def details(self) -> dict:
        """:meth:`to_json` plus the settings, the warnings, and per run: fits, power and TDP
        flags, errors."""
        out = self.to_json()
        st = {k: (list(v) if isinstance(v, tuple) else v)
              for k, v in self.settings.__dict__.items() if k != "precision"}
        st["precision"] = {ph: c.__dict__ for ph, c in self.settings.precision.items()}
        out["settings"] = st
        out["settings_text"] = self.settings.describe()
        out["max_position_embeddings"] = self.max_positions
        out["warnings"] = self.warnings()
        for name, cr in self.chips.items():
            out["chips"][name]["runs"] = [
                {"phase": ph, "point": (list(pt) if isinstance(pt, tuple) else pt),
                 **{k: r.get(k) for k in ("seconds", "fits", "bound", "power_w",
                                          "tdp_fraction", "exceeds_tdp", "energy_j",
                                          "energy_breakdown_j", "error", "unsupported")}}
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

    def warnings(self) -> list[str]:
        """Every caveat of the study, one line per chip and kind, naming the runs: runs that
        do not fit in memory, runs above the chip's TDP, power-limited runs (and their
        clock), unsupported precisions and other failures, a chip that cannot be built; then
        the runs' own warnings (e.g. contexts beyond the model's window)."""
        out: list[str] = []
        for name, cr in self.chips.items():
            groups: dict[str, list[str]] = {}
            clocks: list[float] = []
            for (ph, pt), r in cr.runs():
                point = _point(ph, pt)
                if r.get("error"):
                    groups.setdefault(r["error"], []).append(point)
                    continue
                if r.get("fits") is False:
                    groups.setdefault("does not fit in memory", []).append(point)
                if r.get("exceeds_tdp"):
                    groups.setdefault("averages more power than its TDP, not sustainable",
                                      []).append(point)
                ghz = power_limited_ghz(r)
                if ghz is not None:
                    clocks.append(ghz)
                    groups.setdefault(f"power-limited: above its {cr.chip.tdp_w:.0f} W TDP at "
                                      f"{cr.chip.clock_ghz:g} GHz, reported at the clock it "
                                      "can sustain", []).append(f"{point} at {ghz:.3g} GHz")
            n_runs = sum(1 for _ in cr.runs())
            if name in self.sram_notes:     # one line says why every node-sized run fails
                out.append(self.sram_notes[name])
                groups = {t: p for t, p in groups.items()
                          if not any(r.get("error") == t for _, r in cr.runs())}
            for text, pts in groups.items():
                where = ", ".join(pts)
                if len(pts) == n_runs:
                    where = "every run" + (f", at {min(clocks):.3g}-{max(clocks):.3g} GHz"
                                           if text.startswith("power-limited") else "")
                out.append(f"{name}: {text} ({where})")
            out += [f"{name}: cannot be built as described: {v}" for v in check(cr.chip)]
        return out + self.run_warnings()

    def rows(self) -> list[dict]:
        """One flat row per run (the CSV table)."""
        out = []
        for name, cr in self.chips.items():
            for (phase, pt), r in cr.runs():
                p = cr.precision[phase]
                row = {"chip": name, "phase": phase,
                       "batch": (pt[0] if phase == "decode" else
                                 1 if phase == "prefill" else self.settings.global_batch),
                       "context": (pt[1] if phase == "decode" else
                                   pt if phase == "prefill" else self.settings.train_seq),
                       "area_mm2": die_area_mm2(cr.chip),
                       "precision": describe(p), "compute_dtype": p["compute"]}
                for k in ("seconds", "ttft_s", "tpot_s", "tokens_per_s", "mfu", "energy_j",
                          "energy_j_per_token"):
                    row[k] = r.get(k)
                # beside it, energy_j by component (energy_mac_j ... energy_static_j)
                row.update(EP.columns(r.get("energy_breakdown_j")))
                for k in ("power_w", "exceeds_tdp", "usd_per_mtok", "fits", "bound", "error"):
                    row[k] = r.get(k)
                if self.tiered:     # what the run put in a second memory tier
                    row.update(run_tier(r))
                # the summary's rates are per chip; a run's tokens/s is its whole TP group's
                tps = r.get("tokens_per_s")
                row["tokens_per_s_per_chip"] = (None if tps is None
                                                else tps / (r.get("chips") or 1))
                out.append(row)
        # a stand-in op timer's energy_other_j (EP.columns): in every row or in none
        other = EP.column(EP.OTHER)
        if any(other in row for row in out):
            out = [row if other in row else _with_other(row) for row in out]
        return out


def _with_other(row: dict) -> dict:
    """``row`` with an empty ``energy_other_j`` after its last component column."""
    out = {}
    for k, v in row.items():
        out[k] = v
        if k == EP.COLUMNS[-1]:
            out[EP.column(EP.OTHER)] = None
    return out


def _point(phase: str, pt) -> str:
    if phase == "train":
        return "train"
    if phase == "prefill":
        return f"prefill {pt}"
    return f"decode b={pt[0]} ctx={pt[1]}"


PLAN_KEYS = ("tp", "pp", "dp", "cp", "ep", "zero", "schedule", "virtual_stages",
             "micro_batch", "recompute")


def train_plan(run: dict, s: CompareSettings) -> dict | None:
    """The parallel layout the training run used: ``tp``, ``pp``, ``dp``, ``cp``, ``ep``,
    ``zero``, ``schedule``, ``virtual_stages``, ``micro_batch``, ``recompute``, ``chips``,
    ``cluster`` (None: one node, collectives on a ring of the chip's links), ``text``; with a
    plan search also ``candidates`` and ``fitting``. None when the run failed."""
    if run.get("error"):
        return None
    if s.cluster_chips is None:
        mb = (run.get("info") or {}).get("micro_batch")
        out = {"tp": s.train_tp, "pp": 1, "dp": s.train_dp, "cp": 1, "ep": 1, "zero": 0,
               "schedule": None, "virtual_stages": 1, "micro_batch": mb, "recompute": "none",
               "chips": s.train_tp * s.train_dp, "cluster": None}
        return {**out, "text": f"tp{s.train_tp} dp{s.train_dp}, mb {mb} (one node)"}
    return {**{k: run.get(k) for k in PLAN_KEYS}, "chips": run.get("chips"),
            "cluster": run.get("cluster"), "text": run.get("plan_text"),
            **run.get("search", {})}


def sram_shortfall(chip, model, precision: dict, settings: "CompareSettings") -> str | None:
    """For a chip without DRAM whose SRAM (``chip.memory_bytes``) cannot hold ``model``'s
    weights at ``precision['weights']`` (decode's), the line saying how many chips the weights
    alone need (a lower bound: KV cache and activations come on top) and where to run it,
    when that is more than compare's inference ``infer_tp`` (training, at ``train_tp`` with
    its optimizer state, needs more still): every run of the chip is then refused; None
    otherwise."""
    if chip.has_dram or not precision.get("weights"):
        return None
    import math

    from ...arch.dtypes import dtype_bytes
    from ...workloads.params import param_count
    need = param_count(model) * dtype_bytes(precision["weights"])
    n = math.ceil(need / chip.memory_bytes)
    if n <= settings.infer_tp:
        return None
    return (f"{chip.name}: {model.name} needs at least {n} chips of SRAM for its "
            f"{precision['weights']} weights alone ({need / 2**30:.1f} GiB; "
            f"{chip.memory_bytes / 2**20:.0f} MiB per chip, no DRAM), more than compare's "
            f"TP={settings.infer_tp} inference runs (training keeps more per parameter): run "
            f"it on a cluster, `diptych run --chip {chip.name} --model {model.name} --cluster "
            f"CLUSTER --tp T --pp P` with T x P >= {n} (e.g. --cluster groq-dragonfly)")


def _per_chip(res: dict) -> float | None:
    """Training tokens/s per chip: the run's tokens/s (all its chips) ÷ its chip count."""
    v = res.get("tokens_per_s")
    return None if v is None else v / res.get("chips", 1)


def _default_run(chip, model, *, waterfall: bool = False, variant=None, **kw):
    """``run_workload`` of the scenario the keywords spell (:meth:`Scenario.of`), with its
    efficiency waterfall when asked, under ``variant`` (None: as it is)."""
    from ...sim.run import Scenario, run_workload
    return run_workload(chip, model, Scenario.of(**kw), variant=variant, waterfall=waterfall)


def _default_search(chip, model, cluster, *, chips: int, batch: int, seq: int,
                    weights_dtype=None, act_dtype=None, kv_dtype=None, simulate=None,
                    execution=None, waterfall: bool = False, variant=None):
    """The best plan of :func:`diptych.sim.cluster.search.search_plans` as a result dict
    (its ``to_dict``, with ``search``: candidates and plans that fit); raises ValueError
    when no plan fits. ``simulate`` replaces the engine (tests); ``execution``: how the
    refined plans' layers are timed (None: the schedule); ``waterfall``: the best plan's
    step re-run with its efficiency waterfall (:func:`~diptych.sim.cluster.run.
    run_cluster_step`, the power-limited clock included); ``variant``: that step re-run
    under it (``--ideal``: the plan found with its overheads, run without them)."""
    from ...sim.cluster.run import run_cluster_step
    from ...sim.cluster.search import search_plans
    from ...sim.run import Scenario

    scenario = Scenario.of(phase="train", chips=chips, batch=batch, seq=seq,
                           weights_dtype=weights_dtype, act_dtype=act_dtype,
                           kv_dtype=kv_dtype, execution=execution)
    res = search_plans(model, chip, cluster, scenario, refine=PLAN_REFINE, simulate=simulate)
    if not res.plans:
        raise ValueError(f"no parallel plan fits {chips} chips of "
                         f"{getattr(cluster, 'name', cluster)} ({res.candidates} candidates)")
    best = res.plans[0]
    if waterfall or variant is not None:
        best = run_cluster_step(chip, model, scenario, cluster=cluster, plan=best.plan,
                                simulate=simulate, variant=variant, waterfall=waterfall)
    return {**best.to_dict(),
            "search": {"candidates": res.candidates, "fitting": res.fitting}}


def _one(run, chip, model, precision: dict, choice: PrecisionChoice | None, **kw) -> dict:
    if precision["unsupported"]:
        return {"error": f"unsupported precision: {precision['unsupported']}",
                "unsupported": True}
    if choice is not None:
        kw.update(choice.run_kwargs())
    try:
        with warnings.catch_warnings():  # kept in the result's ``warnings`` list instead
            warnings.simplefilter("ignore", UserWarning)
            res = run(chip, model, **kw)
    except ValueError as exc:  # e.g. a TP degree the model cannot be split into
        return {"error": str(exc)}
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    d.update(power_metrics(chip, d.get("energy_j"), d.get("seconds"), d.get("chips", 1)))
    d.update(cost_summary(chip, d))
    return d


def compare(chips, model, settings: CompareSettings | None = None, *,
            run: Callable | None = None, search: Callable | None = None,
            progress: ProgressFn | None = None) -> Comparison:
    """Run the study for ``chips`` (names, paths or Chip objects) on ``model`` (a name, a
    config.json path or a ModelConfig).

    ``run(chip, model, **kwargs)`` defaults to ``run_workload``; ``search(chip, model,
    cluster, chips=, batch=, seq=, weights_dtype=, act_dtype=, kv_dtype=)`` (the training
    plan search with ``cluster_chips``) to :func:`_default_search`; tests inject their own.
    ``progress(done, total, label)`` is told before every run which one starts (see
    :data:`ProgressFn`); the library prints nothing. Raises ValueError for a cluster that
    cannot be loaded or has fewer chips than ``cluster_chips``.
    """
    run = run or _default_run
    search = search or _default_search
    loaded = [load_chip(c) for c in chips]
    if not loaded:
        raise ValueError("chips must name at least one chip, not an empty list")
    names = [c.name for c in loaded]
    if len(set(names)) != len(names):
        raise ValueError(f"chips must be distinct, not {names}")
    from ...workloads import load_model
    m = load_model(model)
    s = (settings or CompareSettings()).for_model(m)
    if s.cluster_chips is not None:
        from ...arch.cluster import load_cluster
        cl = load_cluster(s.cluster_name)
        if s.cluster_chips > cl.chips:
            raise ValueError(f"cluster_chips ({s.cluster_chips}) exceeds the cluster's "
                             f"{cl.chips} chips ({cl.name})")
    tell = progress or (lambda *_: None)
    per_chip = 1 + len(s.prompts) + len(s.contexts) * len(s.batches)
    total, done = per_chip * len(loaded), 0

    def one(cr: ChipRuns, label: str, phase: str, ref: bool = False, **kw) -> dict:
        nonlocal done
        tell(done, total, f"{cr.chip.name}: {label}")
        if ref and s.waterfall:
            kw["waterfall"] = True
        if s.ideal:
            kw["variant"] = IDEAL
        if s.execution is not None:
            kw["execution"] = s.execution
        if not s.fusion:
            kw["fusion"] = False
        r = _one(run, cr.chip, m, cr.precision[phase], s.precision.get(phase), phase=phase,
                 **kw)
        done += 1
        return r

    out: dict[str, ChipRuns] = {}
    for chip in loaded:
        cr = ChipRuns(chip=chip, train={},
                      precision={ph: resolve(chip, ph, s.precision.get(ph)) for ph in PHASES})
        if s.cluster_chips is None:
            cr.train = one(cr, "train", "train", True, batch=s.global_batch, seq=s.train_seq,
                           tp=s.train_tp, dp=s.train_dp)
        else:
            tell(done, total, f"{chip.name}: train (plan search on {s.cluster_chips} chips)")
            cr.train = _one(lambda c, mm, phase, **kw: search(c, mm, cl, **kw), chip, m,
                            cr.precision["train"], s.precision.get("train"), phase="train",
                            chips=s.cluster_chips, batch=s.global_batch, seq=s.train_seq,
                            **({"execution": s.execution} if s.execution else {}),
                            **({"waterfall": True} if s.waterfall else {}),
                            **({"variant": IDEAL} if s.ideal else {}))
            done += 1
        for p in s.prompts:
            cr.prefill[p] = one(cr, f"prefill {p}", "prefill", p == s.prompts[0], batch=1,
                                prompt=p, gen=s.gen, tp=s.infer_tp)
        for c in s.contexts:
            for b in s.batches:
                cr.decode[(b, c)] = one(cr, f"decode b={b} ctx={c}", "decode",
                                        (b, c) == (s.ref_batch, s.contexts[0]), batch=b,
                                        prompt=c, gen=s.gen, tp=s.infer_tp)
        out[chip.name] = cr
    tell(total, total, "done")
    notes = {n: t for n, cr in out.items()
             if (t := sram_shortfall(cr.chip, m, cr.precision["decode"], s)) is not None}
    cmp = Comparison(model=getattr(m, "name", str(model)), settings=s, chips=out,
                     max_positions=getattr(m, "max_position_embeddings", None),
                     sram_notes=notes)
    if all(r.get("error") for cr in out.values() for _, r in cr.runs()):
        raise ValueError("compare: no cell could be computed; "
                         + "; ".join(cmp.warnings()[:3]))
    return cmp
