"""Solve the calibrated [C] constants of the h100 preset's fused-attention tables on their
component-level sources (issue 21 item 2); prints them and each source row's fit.

    python benchmarks/calibrate_attention.py [--kernel default|fa2] [--chip h100]

The tile rule (sim/run/attention_tiles.py) leaves a few constants no datasheet gives; each
is solved here on published kernel measurements, never on a system row:

* ``default`` (``[attention]``, cuDNN): ``tile_overhead_cycles`` and ``softmax_overlap`` on
  the FlashAttention-3 paper's causal forward panel (cuDNN, 512-16k tokens, 16k tokens per
  batch, 16 heads of 128; benchmarks/validate_attention.py ``FWD_CAUSAL``);
  ``bwd_tile_overhead_cycles`` and ``bwd_block_overhead_cycles`` on its backward panel (no
  mask, ``BWD``); ``bwd_causal_fraction`` on cudnn-frontend's causal ÷ non-causal backward
  ratios (cuDNN 9.1, ``FE_2024``; a ratio does not depend on the clock).
* ``fa2`` (``[attention_fa2]``, FlashAttention-2): ``mma_fraction`` and the same fixed costs
  jointly on the paper's FlashAttention-2 forward and backward panels (the MMA share scales
  both), ``bwd_causal_fraction`` on cudnn-frontend's PyTorch-SDPA (FA2) ratios.

Each fit minimises the sum of squared log ratios (diptych ÷ published) by coordinate descent
with a golden-section search per constant inside its bracket; the paper's rows are compared at
the chip's nominal clock (the paper gives none), as benchmarks/validate_attention.py does.
The preset holds the values rounded as printed; tests/validation/test_attention_fit.py checks
that the cuDNN table sits at the optimum along each constant. The forward pair trades off
along a shallow diagonal (a higher tile cost against more of the softmax hidden), where
coordinate descent stops by its start: from the preset's 3,900 cycles and 0.19 it reaches
4,000 and 0.20 (loss 0.00174 against 0.00181; every rate within 0.6 %). Cold (the engine's
results not yet in the persistent cache), the cuDNN fit takes ~8 minutes and the FA2 joint fit
~15 on 2 cores; cached, seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validate_attention as va  # noqa: E402
from diptych.arch import load_chip  # noqa: E402
from diptych.sim import simulate  # noqa: E402
from diptych.sim.run.attention import fused_stats  # noqa: E402

#: per kernel: (table attribute, paper key, cudnn-frontend key, {constant: (lo, hi)} of the
#: forward fit, of the backward fit); ROUND: the preset's rounding step per constant
KERNELS = {
    "default": ("attention", "cuDNN", "cuDNN",
                {"tile_overhead_cycles": (0.0, 20000.0), "softmax_overlap": (0.0, 1.0)},
                {"bwd_tile_overhead_cycles": (0.0, 80000.0),
                 "bwd_block_overhead_cycles": (0.0, 8000.0)}),
    "fa2": ("attention_fa2", "FlashAttention-2", "FA2",
            {"mma_fraction": (0.3, 1.0), "tile_overhead_cycles": (0.0, 20000.0),
             "bwd_tile_overhead_cycles": (0.0, 80000.0),
             "bwd_block_overhead_cycles": (0.0, 8000.0)},
            {}),
}
ROUND = {"tile_overhead_cycles": 100.0, "bwd_tile_overhead_cycles": 500.0,
         "bwd_block_overhead_cycles": 50.0, "softmax_overlap": 0.01, "mma_fraction": 0.01,
         "bwd_causal_fraction": 0.01}


def _chip(base, attr: str, values: dict):
    """``base`` running its table ``attr`` with ``values`` replaced, as its attention kernel."""
    return dataclasses.replace(base, attention=dataclasses.replace(getattr(base, attr),
                                                                   **values))


@functools.lru_cache(maxsize=None)
def _calls(batch: int, seq: int, causal: bool):
    return va.kernel_calls(batch, seq, causal)


def _tflops(chip, batch: int, seq: int, causal: bool, bwd: bool) -> float:
    """FlashAttention-benchmark TFLOPS of one call (validate_attention's count)."""
    fwd_op, bwd_op = _calls(batch, seq, causal)
    flops = va.fwd_flops(batch, seq, causal)
    op = bwd_op if bwd else fwd_op
    return (2.5 if bwd else 1.0) * flops / fused_stats(op, chip, simulate).seconds / 1e12


def paper_rows(chip, paper_key: str, which: tuple[str, ...]) -> list[tuple[str, float, float]]:
    """(label, diptych, published) for the paper's panels ``which`` (``fwd``: causal forward,
    ``bwd``: the backward panel, no mask)."""
    out = []
    for i, s in enumerate(va.SEQS):
        b = va.TOKENS // s
        if "fwd" in which:
            out.append((f"fwd causal {s}", _tflops(chip, b, s, True, False),
                        va.FWD_CAUSAL[paper_key][i]))
        if "bwd" in which:
            out.append((f"bwd {s}", _tflops(chip, b, s, False, True), va.BWD[paper_key][i]))
    return out


def ratio_rows(chip, fe_key: str) -> list[tuple[str, float, float]]:
    """(label, diptych, published) causal ÷ non-causal backward ratios of cudnn-frontend's
    2024 shapes (at its locked clock)."""
    out = []
    for (b, s), k in va.FE_2024.items():
        full, causal = k[fe_key][1], k[fe_key][3]
        d = _tflops(chip, b, s, True, True) / _tflops(chip, b, s, False, True)
        out.append((f"bwd causal/full {b}x{s}", d, causal / full))
    return out


def loss(rows) -> float:
    return sum(math.log(d / p) ** 2 for _, d, p in rows)


def _golden(f, lo: float, hi: float, iters: int = 24) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit(base, attr: str, bounds: dict, rows_of, start: dict, sweeps: int = 4) -> dict:
    """Coordinate descent over ``bounds`` from ``start``, minimising ``loss(rows_of(chip))``."""
    vals = dict(start)
    for _ in range(sweeps):
        for name, (lo, hi) in bounds.items():
            def f(x, name=name):
                return loss(rows_of(_chip(base, attr, {**vals, name: x})))
            vals[name] = _golden(f, lo, hi)
    return vals


def rounded(vals: dict) -> dict:
    return {k: round(round(v / ROUND[k]) * ROUND[k], 6) for k, v in vals.items()}


def calibrate(kernel: str = "default", chip: str = "h100") -> tuple[dict, list]:
    """The kernel's fitted constants (rounded as the preset holds them) and the rows
    (label, diptych, published) at those values."""
    attr, paper_key, fe_key, fwd_bounds, bwd_bounds = KERNELS[kernel]
    base = load_chip(chip)
    table = getattr(base, attr)
    start = {k: getattr(table, k) for k in (*fwd_bounds, *bwd_bounds)}
    if kernel == "fa2":      # the MMA share scales both panels: one joint fit
        vals = fit(base, attr, fwd_bounds, lambda c: paper_rows(c, paper_key, ("fwd", "bwd")),
                   start)
    else:
        vals = fit(base, attr, fwd_bounds, lambda c: paper_rows(c, paper_key, ("fwd",)), start)
        vals = fit(base, attr, bwd_bounds, lambda c: paper_rows(c, paper_key, ("bwd",)), vals)
    vals = rounded(vals)
    clocked = dataclasses.replace(base, clock_ghz=va.FE_2024_CLOCK_GHZ)
    frac = fit(clocked, attr, {"bwd_causal_fraction": (0.5, 1.0)},
               lambda c: ratio_rows(c, fe_key), {**vals, "bwd_causal_fraction": 1.0},
               sweeps=1)["bwd_causal_fraction"]
    vals = {**vals, **rounded({"bwd_causal_fraction": frac})}
    at_fit = _chip(base, attr, vals)
    rows = (paper_rows(at_fit, paper_key, ("fwd", "bwd"))
            + ratio_rows(_chip(clocked, attr, vals), fe_key))
    return vals, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="default", choices=tuple(KERNELS))
    ap.add_argument("--chip", default="h100")
    args = ap.parse_args(argv)
    vals, rows = calibrate(args.kernel, args.chip)
    attr = KERNELS[args.kernel][0]
    print(f"[{attr}] fitted:")
    for k, v in vals.items():
        print(f"  {k} = {v:g}")
    print("\n| row | diptych | published | ratio |\n|---|---|---|---|")
    for label, d, p in rows:
        print(f"| {label} | {d:.3g} | {p:.3g} | {d / p:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
