"""The split accumulator per GEMM (issue 21; docs/precision.md, "The split accumulator"): how
much longer an FP8 GEMM takes on the h100 preset with cuBLAS's fast accumulation off (the
promotions of its ``[split_accumulator]`` table) than with it on, by shape, at the table's
overlap and at its bounds (0: nothing hidden; 1: all hidden).

    python benchmarks/validate_split_accumulator.py [--out FILE]     # ~10 s warm

No per-shape measurement of fast accumulation on vs off is readable as numbers (the doc says
what was searched), so this prints the model, not a comparison: the shapes are those of
Transformer Engine's layer benchmark (hidden 4096, intermediate 16384, 15,872 tokens:
:func:`validate_fp8_layer.layer_shapes`) and the power-of-two squares pytorch/ao#1325 sampled.
The one published figure, a user's "1.1x to 1.2x speedup" from turning fast accumulation on
in torchao's FP8 training setting (pytorch/ao#2377, no shapes given), is printed beside it
as a range to compare with, not a target.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from validate_fp8_layer import layer_shapes

from diptych.arch.loader import load_chip
from diptych.sim.api import simulate
from diptych.sim.run.precision_ops import promote_op
from diptych.workloads.ops import Gemm
from diptych.workloads.recipe import SPLIT_ACC_TAG

SQUARES = [(s, s, s) for s in (2048, 4096, 8192, 16384)]
#: pytorch/ao#2377: "enabling fast accumulation can lead to a 1.1x to 1.2x speedup"
USER_RANGE = (1.1, 1.2)


def slowdowns(chip, shapes, overlaps=(None, 0.0, 1.0)) -> list[tuple]:
    """(shape, fast-accumulation seconds, then split ÷ fast at each overlap; None: the
    chip's) per M × K × N shape."""
    table = chip.split_accumulator
    out = []
    for m, k, n in shapes:
        g = Gemm(name="g", m=m, k=k, n=n, a_dtype="fp8", b_dtype="fp8", c_dtype="bf16",
                 tags=(SPLIT_ACC_TAG,))
        fast = simulate(g, chip).seconds        # (simulate keys a GEMM without its tags)
        ratios = []
        for o in overlaps:
            c = chip if o is None else dataclasses.replace(
                chip, split_accumulator=dataclasses.replace(table, overlap=o))
            p = promote_op(g, c)
            ratios.append((fast + (simulate(p, c).seconds if p is not None else 0.0)) / fast)
        out.append(((m, k, n), fast, *ratios))
    return out


def table(chip) -> str:
    o = chip.split_accumulator.overlap
    rows = [f"| M × K × N | fast accumulation | split ÷ fast, overlap {o:g} (the preset) | "
            "overlap 0 | overlap 1 |", "|---|---|---|---|---|"]
    for (m, k, n), fast, mid, lo, hi in slowdowns(chip, layer_shapes() + SQUARES):
        rows.append(f"| {m} × {k} × {n} | {fast * 1e3:.3f} ms | {mid:.3f} | {lo:.3f} | "
                    f"{hi:.3f} |")
    return ("\n".join(rows) + f"\n\nChip: {chip.name}, [split_accumulator] promotion_interval_k "
            f"{chip.split_accumulator.promotion_interval_k}, overlap {o:g}. Published: "
            f"{USER_RANGE[0]}-{USER_RANGE[1]}x from turning fast accumulation on "
            "(pytorch/ao#2377, no shapes): a range to compare with, not a target.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    a = ap.parse_args(argv)
    text = table(load_chip("h100"))
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
