"""FP8 against BF16 for one transformer layer's twelve linear GEMMs, as Transformer Engine's
own benchmark measures them (issue 21: the component check of the per-tensor FP8 recipe's
casts and of the FP8 GEMM rate).

    python benchmarks/validate_fp8_layer.py          # ~10 s warm, ~1 min cold

Published [S: NVIDIA/TransformerEngine commit 8f2e635, docs/examples/gemm_profiling/
gemm_profiling.rst, "Worked Example: 5B Model on H200"; the tool is benchmarks/gemm/
benchmark_gemm.py at the same commit]: hidden 4096, intermediate 16384, M = 31 × 512 = 15,872
tokens; the 4 fprop, 4 dgrad and 4 wgrad shapes of a layer, each timed alone on an H200 NVL
with CUDA events, per layer (ms):

* BF16 ``torch.matmul``: 32.014 (autocast table) / 31.968 (pre-quantised table);
* FP8 ``DelayedScaling``, autocast: 18.978 (1.69×); FP8 ``Float8CurrentScaling``, autocast:
  20.285 (1.58×); current scaling pre-quantised (the GEMM kernels alone): 16.785 (1.90×).

"Autocast" is ``te.Linear(K, N)`` forward on a BF16 ``x`` of M × K inside ``te.autocast``,
called repeatedly, so every call quantises its input (grad enabled and a weight that wants
a gradient: ``fp8_cast_transpose_fused``, read 2 B, write 1 + 1 B per element) and its
weight (no ``is_first_microbatch``: the weight's FP8 pair is made again in every call), then
runs the FP8 GEMM; current scaling reads each tensor once more for its amax first. diptych
runs the same ops: :func:`~diptych.workloads.recipe.cast_op` on x,
:func:`~diptych.workloads.recipe.weight_cast_op` on W (with
:func:`~diptych.workloads.recipe.amax_op` before x's cast under current scaling) and the
GEMM with FP8 A and B and a BF16 C, each simulated alone (as the benchmark times them).

The chip is the h100 preset with the H200 NVL's memory, power and tensor rate
(:func:`h200_nvl`); the rest of the GH100 die is the same. Its DRAM model keeps the HBM3
timings of the h100 at the HBM3e pin rate [assumption].
"""

from __future__ import annotations

import argparse
import tomllib
from importlib import resources
from pathlib import Path

from diptych.arch.loader import chip_from_dict, load_chip
from diptych.arch.power import sustained_clock
from diptych.sim.api import simulate
from diptych.workloads.ops import Gemm
from diptych.workloads.precision import Precision
from diptych.workloads.recipe import amax_op, cast_op, weight_cast_op

SRC = ("NVIDIA/TransformerEngine 8f2e635 docs/examples/gemm_profiling/gemm_profiling.rst, "
       "Worked Example: 5B Model on H200 (H200 NVL)")
HIDDEN, INTER, TOKENS = 4096, 16384, 31 * 512
#: Published per-layer times (ms) of the twelve GEMMs on the H200 NVL (module docstring).
PUBLISHED_MS = {"bf16": 32.014, "fp8-delayed": 18.978, "fp8-current": 20.285,
                "gemm-only": 16.785, "bf16-prequant": 31.968}


def layer_shapes(h: int = HIDDEN, f: int = INTER, m: int = TOKENS) -> list[tuple[int, int, int]]:
    """The layer's twelve GEMMs as the tool derives them, M × K × N: fprop (QKV, attention
    out, MLP up, MLP down), dgrad (K and N swapped), wgrad (tokens as the reduction)."""
    fprop = [(m, h, 3 * h), (m, h, h), (m, h, f), (m, f, h)]
    dgrad = [(m, n, k) for m, k, n in fprop]
    wgrad = [(k, m, n) for m, k, n in fprop]
    return fprop + dgrad + wgrad


def h200_nvl():
    """The h100 preset with the H200 NVL's memory and limits: 141 GB of HBM3e at 4.8 TB/s on
    six stacks (6144 pins at 6.25 Gb/s) [S: reference.md 1a, H200], a 600 W board limit and
    dense tensor rates of 1,671 TFLOPS FP8 and 835 BF16 [M: NVIDIA H200 datasheet, NVL
    column: 3,341 / 1,671 TFLOPS with sparsity; not re-checked], which the same 528 tensor
    cores reach at 1,671e12 / (528 × 512 × 2 × 2) = 1.545 GHz [D] (the model runs the whole
    chip at that clock)."""
    data = tomllib.loads(resources.files("diptych.arch.chips").joinpath("h100.toml")
                         .read_text())
    data.update(name="h200-nvl", clock_ghz=round(1671e3 / (528 * 512 * 2 * 2), 4),
                tdp_w=600.0,
                description="h100 with the H200 NVL's HBM3e, 600 W and tensor rate")
    data["dram"].update(stacks=6, gbps_per_pin=6.25, capacity_gib=131.3)
    return chip_from_dict(data, source="validate_fp8_layer.h200_nvl")


def _fp8(recipe: str) -> Precision:
    return Precision(linear="fp8", recipe=recipe)


def cast_seconds(chip, recipe: str) -> float:
    """What TE's autocast adds to the twelve calls under ``recipe``: each call's input cast
    (after an amax pass under current scaling) and its weight's FP8 pair."""
    p, t = _fp8(recipe), 0.0
    for m, k, n in layer_shapes():
        if recipe == "fp8-current":
            t += simulate(amax_op("x.amax", m * k, p), chip).seconds
        t += simulate(cast_op("x.cast", m * k, p), chip).seconds
        t += simulate(weight_cast_op("w.cast", k * n, p), chip).seconds
    return t


def gemm_seconds(chip, dtype: str) -> float:
    """The twelve GEMMs alone, A and B in ``dtype``, C in BF16."""
    return sum(simulate(Gemm(name="g", m=m, k=k, n=n, a_dtype=dtype, b_dtype=dtype,
                             c_dtype="bf16"), chip).seconds for m, k, n in layer_shapes())


def capped_gemm_seconds(chip, dtype: str) -> float:
    """:func:`gemm_seconds` with each GEMM at the clock its own power sustains under the
    chip's TDP (:func:`~diptych.arch.power.sustained_clock`; a long GEMM alone on the part,
    as the benchmark runs it), its time scaled by nominal ÷ sustained clock."""
    t = 0.0
    for m, k, n in layer_shapes():
        s = simulate(Gemm(name="g", m=m, k=k, n=n, a_dtype=dtype, b_dtype=dtype,
                          c_dtype="bf16"), chip)
        t += s.seconds * chip.clock_ghz / sustained_clock(chip, s.energy_j, s.seconds)
    return t


def layer_ms(chip) -> dict[str, float]:
    """Per-layer milliseconds of each case of :data:`PUBLISHED_MS` on ``chip`` (and
    ``*-capped``: the GEMMs at their power-limited clocks)."""
    bf, f8 = gemm_seconds(chip, "bf16"), gemm_seconds(chip, "fp8")
    out = {"bf16": bf, "gemm-only": f8, "bf16-prequant": bf,
           "bf16-capped": capped_gemm_seconds(chip, "bf16"),
           "gemm-only-capped": capped_gemm_seconds(chip, "fp8")}
    for r in ("fp8-delayed", "fp8-current"):
        out[r] = f8 + cast_seconds(chip, r)
    return {k: v * 1e3 for k, v in out.items()}


def table(chips) -> str:
    rows = ["| case | published (H200 NVL) | " + " | ".join(c.name for c in chips)
            + " | ratio (diptych ÷ published, h200-nvl) |", "|---" * (3 + len(chips)) + "|"]
    ms = [layer_ms(c) for c in chips]
    pub = PUBLISHED_MS
    for case, bf in (("bf16", "bf16"), ("fp8-delayed", "bf16"), ("fp8-current", "bf16"),
                     ("gemm-only", "bf16-prequant")):
        cells = [f"{m[case]:.2f} ms ({m[bf] / m[case]:.2f}×)" for m in ms]
        rows.append(f"| {case} | {pub[case]:.2f} ms ({pub[bf] / pub[case]:.2f}×) | "
                    + " | ".join(cells) + f" | {ms[-1][case] / pub[case]:.2f} |")
    cells = [f"{m['gemm-only-capped']:.2f} ms ({m['bf16-capped'] / m['gemm-only-capped']:.2f}×)"
             for m in ms]
    rows.append(f"| gemm-only, each GEMM at its power-limited clock | {pub['gemm-only']:.2f} ms "
                f"({pub['bf16-prequant'] / pub['gemm-only']:.2f}×) | " + " | ".join(cells)
                + f" | {ms[-1]['gemm-only-capped'] / pub['gemm-only']:.2f} |")
    for rec in ("fp8-delayed", "fp8-current"):
        cells = [f"{m[rec] - m['gemm-only']:.2f} ms" for m in ms]
        p = pub[rec] - pub["gemm-only"]
        rows.append(f"| {rec} quantisation (autocast − GEMMs) | {p:.2f} ms | "
                    + " | ".join(cells) + f" | {(ms[-1][rec] - ms[-1]['gemm-only']) / p:.2f} |")
    return "\n".join(rows) + f"\n\nSource: {SRC}. (×): speedup over the BF16 GEMMs."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    a = ap.parse_args(argv)
    text = table([load_chip("h100"), h200_nvl()])
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
