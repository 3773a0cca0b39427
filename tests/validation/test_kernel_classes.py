"""The per-kernel-class breakdown of the H100 system checks (benchmarks/kernel_classes.py,
issue 21): every op of the rows' layers falls in a named class, and the classes behave as the
FP8 recipe says they must (docs/precision.md, "Training recipes": Transformer Engine's
per-tensor FP8 touches the linear layers' GEMMs, their casts, the dgrad and wgrad GEMMs' split
accumulator and the norms' outputs; attention,
RoPE, the residual adds, TE's ring-attention bookkeeping, the loss and the embedding stay
BF16 kernels of the same bytes)."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import kernel_classes as kc  # noqa: E402
import validate_system as vs  # noqa: E402


def _row(text: str) -> vs.Row:
    return next(r for r in vs._rows() if text in r.name)


@pytest.fixture(scope="module")
def llama8b():
    return {p: kc.class_seconds(_row(f"8B, 8 GPUs, CP2, {p}")) for p in ("BF16", "FP8")}


def test_an_op_without_a_class_is_named():
    with pytest.raises(ValueError, match="'mystery_op'"):
        kc.op_class("mystery_op", "vector")


def test_the_fp8_recipe_moves_only_the_classes_it_touches(llama8b):
    bf, f8 = llama8b["BF16"]["layers"], llama8b["FP8"]["layers"]
    assert set(bf) <= set(kc.CLASSES) and set(f8) <= set(kc.CLASSES)
    assert "fp8 casts" in f8 and "fp8 casts" not in bf
    # TE's split accumulator: the FP8 dgrad and wgrad GEMMs' exposed promotions
    assert "split accumulator" in f8 and "split accumulator" not in bf
    assert kc.op_class("down_proj.dgrad.promote", "scale") == "split accumulator"
    for c in ("attention", "rope", "residual adds", "cp bookkeeping", "activation"):
        assert f8[c] == pytest.approx(bf[c], rel=1e-9), c
    assert f8["gemm"] < 0.6 * bf["gemm"]          # FP8 operands at twice the MAC rate
    assert f8["norms"] < bf["norms"]              # TE 1.x's norms write FP8 outputs
    # the LM head and the loss stay BF16 (and FP32) under the recipe
    assert llama8b["FP8"]["head"] == pytest.approx(llama8b["BF16"]["head"], rel=1e-9)

