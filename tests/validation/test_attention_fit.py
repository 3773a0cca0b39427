"""h100's fused-attention constants sit where benchmarks/calibrate_attention.py's fit puts
them on their component sources (the FlashAttention-3 paper's cuDNN panels, cudnn-frontend's
causal ÷ non-causal ratios): a step of the preset's rounding either way, on each solved
forward constant and on the causal-backward fraction, fits those sources worse. A change to
the tile rule or the engine that moves the kernel's time must recalibrate them (the FA2
table's joint fit is checked by `python benchmarks/calibrate_attention.py --kernel fa2`)."""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest

from diptych.arch import load_chip

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.mark.slow
def test_h100_cudnn_constants_are_the_fit_optimum():
    import calibrate_attention as ca
    import validate_attention as va

    base = load_chip("h100")
    at = base.attention
    fwd = lambda c: ca.loss(ca.paper_rows(c, "cuDNN", ("fwd",)))        # noqa: E731
    here = fwd(base)
    for name in ("tile_overhead_cycles", "softmax_overlap"):
        step = ca.ROUND[name] * 2
        for sign in (-1, 1):
            moved = ca._chip(base, "attention", {name: getattr(at, name) + sign * step})
            assert fwd(moved) > here, (name, sign)
    clocked = dataclasses.replace(base, clock_ghz=va.FE_2024_CLOCK_GHZ)
    ratio = lambda c: ca.loss(ca.ratio_rows(c, "cuDNN"))                  # noqa: E731
    here = ratio(clocked)
    for sign in (-1, 1):
        f = at.bwd_causal_fraction + sign * 2 * ca.ROUND["bwd_causal_fraction"]
        assert ratio(ca._chip(clocked, "attention", {"bwd_causal_fraction": f})) > here, sign
