"""``--precision``: pin the precision of weights, activations and KV cache, per phase.

One spec pins one phase or all of them; ``compare`` takes several (``--precision`` repeated),
``run`` one::

    bf16                      weights, activations and KV cache in bf16, every phase
    w=fp8,a=fp8,kv=fp8        per tensor (w / weights, a / act / activations, kv)
    w=int4                    weight-only: the others keep the run's defaults
    train:bf16                one phase only (train, prefill, decode; infer = prefill + decode)
    infer:w=fp8,a=fp8
    train:fp8-current         a training recipe by name (also recipe=NAME among the tensors)
    infer:recipe=fp8-static,kv=fp8   an inference recipe (prefill and decode only)

A tensor the spec leaves out keeps the default of :func:`diptych.sim.run.node.default_precision`
(inference: the chip's default dtype; training: bf16; weights and KV follow the activations).
Training with FP8 or MXFP8 weights and activations runs a named recipe
(:func:`diptych.workloads.precision.recipe_for`; ``fp8`` is ``fp8-delayed`` unless
``fp8-current`` is named); inference runs one only when it is named
(:data:`~diptych.workloads.precision.INFERENCE_RECIPES`). A spec for every phase that names a
recipe applies it to the phases it is for and the dtypes to all.
Accumulation is FP32 in every run and cannot be pinned. :func:`resolve` gives what a chip
will run and whether it can (an unsupported pin is reported, not raised).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ..arch.dtypes import DTYPE_BYTES, DTYPES
from ..workloads.precision import INFERENCE_RECIPES, RECIPES

#: Every recipe a spec may name: training's, then inference's.
ALL_RECIPES = RECIPES + INFERENCE_RECIPES

PHASES = ("train", "prefill", "decode")
_PHASE_ALIASES = {"train": ("train",), "prefill": ("prefill",), "decode": ("decode",),
                  "infer": ("prefill", "decode"), "inference": ("prefill", "decode"),
                  "all": PHASES}
_TENSOR_ALIASES = {"w": "weights", "weights": "weights", "a": "activations",
                   "act": "activations", "activations": "activations", "kv": "kv"}


@dataclass(frozen=True)
class PrecisionChoice:
    """Pinned storage dtypes and training recipe; ``None`` = the run's default."""

    weights: str | None = None
    activations: str | None = None
    kv: str | None = None
    recipe: str | None = None

    def run_kwargs(self) -> dict[str, str | None]:
        """Fields of :class:`diptych.sim.run.Scenario` (``Scenario.of`` keywords)."""
        out = {"weights_dtype": self.weights, "act_dtype": self.activations,
               "kv_dtype": self.kv}
        return out | ({"recipe": self.recipe} if self.recipe else {})

    def describe(self) -> str:
        """``W/A/KV bf16``, ``W int4``, ``fp8-current recipe`` (unpinned tensors left out)."""
        head = f"{self.recipe} recipe" if self.recipe else ""
        tail = _short({"weights": self.weights, "activations": self.activations,
                       "kv": self.kv})
        return " · ".join(x for x in (head, tail) if x) or "chip default"


def _recipe(text: str, spec: str) -> str:
    if text not in ALL_RECIPES:
        raise ValueError(f"--precision {spec!r}: {text!r} is not a recipe; expected one of "
                         f"{', '.join(ALL_RECIPES)}")
    return text


def _dtype(text: str, spec: str) -> str:
    if text not in DTYPE_BYTES:
        raise ValueError(f"--precision {spec!r}: {text!r} is not a dtype; expected one of "
                         f"{', '.join(DTYPES)}")
    return text


def parse_choice(text: str, spec: str | None = None) -> PrecisionChoice:
    """``"bf16"`` or ``"w=fp8,a=fp8,kv=fp8"`` (no phase prefix) → :class:`PrecisionChoice`."""
    spec = text if spec is None else spec
    text = text.strip()
    if not text:
        raise ValueError(f"--precision {spec!r}: empty; expected a dtype ({', '.join(DTYPES)}) "
                         f"or w=DTYPE,a=DTYPE,kv=DTYPE")
    if "=" not in text:
        if text in ALL_RECIPES and text not in DTYPE_BYTES:   # mxfp8 is a dtype first
            return PrecisionChoice(recipe=text)
        d = _dtype(text, spec)
        return PrecisionChoice(weights=d, activations=d, kv=d)
    got: dict[str, str] = {}
    for part in text.split(","):
        key, sep, val = (s.strip() for s in part.partition("="))
        if not sep:
            raise ValueError(f"--precision {spec!r}: {part.strip()!r} is not TENSOR=DTYPE")
        if key in ("acc", "accumulation"):
            raise ValueError(f"--precision {spec!r}: accumulation is fp32 in every run and "
                             f"cannot be pinned")
        if key == "recipe":
            if "recipe" in got:
                raise ValueError(f"--precision {spec!r}: recipe is given twice")
            got["recipe"] = _recipe(val, spec)
            continue
        name = _TENSOR_ALIASES.get(key)
        if name is None:
            raise ValueError(f"--precision {spec!r}: unknown tensor {key!r}; expected w "
                             f"(weights), a (activations), kv or recipe")
        if name in got:
            raise ValueError(f"--precision {spec!r}: {name} is given twice")
        got[name] = _dtype(val, spec)
    return PrecisionChoice(**got)


def parse_precision(specs: str | Iterable[str]) -> dict[str, PrecisionChoice]:
    """Specs (see the module docstring) → ``{phase: PrecisionChoice}`` for the phases they
    pin. A later spec for the same phase raises (say it once)."""
    if isinstance(specs, str):
        specs = [specs]
    out: dict[str, PrecisionChoice] = {}
    for spec in specs:
        head, sep, rest = spec.partition(":")
        if sep:
            phases = _PHASE_ALIASES.get(head.strip())
            if phases is None:
                raise ValueError(f"--precision {spec!r}: unknown phase {head.strip()!r}; "
                                 f"expected train, prefill, decode or infer")
            choice = parse_choice(rest, spec)
        else:
            phases, choice = PHASES, parse_choice(spec)
        if choice.recipe:
            own = ("train",) if choice.recipe in RECIPES else ("prefill", "decode")
            if sep and not set(phases) & set(own):
                kind = "training" if own == ("train",) else "inference"
                raise ValueError(f"--precision {spec!r}: {choice.recipe} is "
                                 f"{'a' if kind == 'training' else 'an'} {kind} recipe; "
                                 f"{head.strip()} takes "
                                 f"{'the dtypes' if kind == 'training' else 'a training one'}")
        for ph in phases:
            if choice.recipe and ph not in own:   # a recipe is its phases'; the dtypes hold
                if choice == PrecisionChoice(recipe=choice.recipe):
                    continue
                choice_ph = replace(choice, recipe=None)
            else:
                choice_ph = choice
            if ph in out:
                raise ValueError(f"--precision {spec!r}: the {ph} precision is already pinned "
                                 f"({out[ph].describe()})")
            out[ph] = choice_ph
    return out


def run_dtypes(spec: str | None, phase: str, weights: str | None = None, act: str | None = None,
               kv: str | None = None, recipe: str | None = None
               ) -> tuple[str | None, str | None, str | None, str | None]:
    """``(weights, activations, kv, recipe)`` of one run from a ``--precision`` spec and the
    per-tensor options (``--weights-dtype`` ..., ``--recipe``); giving one both ways, or a
    spec that does not pin ``phase``, is an error."""
    if spec is None:
        return weights, act, kv, recipe
    pinned = parse_precision(spec)
    if phase not in pinned:
        raise ValueError(f"--precision {spec!r} pins {', '.join(pinned)}, not the "
                         f"{phase} phase this run simulates")
    c = pinned[phase]
    out = []
    for opt, given, pin in (("--weights-dtype", weights, c.weights),
                            ("--act-dtype", act, c.activations), ("--kv-dtype", kv, c.kv),
                            ("--recipe", recipe, c.recipe)):
        if given is not None and pin is not None:
            raise ValueError(f"{opt} {given} and --precision {spec!r} both set "
                             f"{'the recipe' if opt == '--recipe' else 'that tensor'}; give it "
                             f"once")
        out.append(given if given is not None else pin)
    return out[0], out[1], out[2], out[3]


def resolve(chip, phase: str, choice: PrecisionChoice | None = None) -> dict:
    """What ``chip`` runs for ``phase`` with ``choice`` pinned: ``weights``, ``activations``,
    ``kv``, ``accumulation``, ``compute`` (the arrays' dtype: the wider of weights and
    activations, whose peak MFU refers to) and ``unsupported`` (None, or why the chip cannot
    run it)."""
    from ..sim.support import check_supported, wider
    from ..sim.run.node import default_precision

    c = choice or PrecisionChoice()
    try:
        p = default_precision(chip, phase, c.weights, c.activations, c.kv, c.recipe)
    except ValueError as exc:  # training on a chip with neither bf16 nor fp16
        return {"weights": c.weights, "activations": c.activations, "kv": c.kv,
                "accumulation": None, "recipe": c.recipe, "compute": None,
                "unsupported": str(exc)}
    try:                   # the check every run makes (sim.support)
        comp, why = check_supported(chip, p), None
    except ValueError:     # say it in a report's words: which datapaths are missing
        comp = p.linear or wider(p.activations, p.weights)
        missing = [d for d in dict.fromkeys((comp, wider(p.activations, p.kv)))
                   if not chip.supports(d)]
        why = (f"{chip.name} has no {' or '.join(missing)} datapath; its arrays support "
               f"{', '.join(chip.dtypes)}")
    return {"weights": p.weights, "activations": p.activations, "kv": p.kv,
            "accumulation": p.accumulation, "recipe": p.recipe, "compute": comp,
            "unsupported": why}


def _short(p: dict) -> str:
    """Tensors grouped by dtype: ``W/A/KV fp8``, ``W int4 · A/KV bf16``; None left out."""
    groups: dict[str, list[str]] = {}
    for key, name in (("W", "weights"), ("A", "activations"), ("KV", "kv")):
        if p.get(name):
            groups.setdefault(p[name], []).append(key)
    return " · ".join(f"{'/'.join(keys)} {d}" for d, keys in groups.items())


def describe(p: dict) -> str:
    """``W/A/KV fp8 · acc fp32``, ``W int4 · A/KV bf16 · acc fp32``, ``fp8-delayed recipe (fp8
    linear layers) · W/A/KV bf16 · acc fp32``: a :func:`resolve` (or a run's ``precision``)
    dict in one line."""
    head = (f"{p['recipe']} recipe ({p['linear']} linear layers) · " if p.get("linear")
            else f"{p['recipe']} recipe · " if p.get("recipe") else "")
    return f"{head}{_short(p)} · acc {p.get('accumulation') or '–'}"
