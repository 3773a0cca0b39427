"""Megatron-Core's GeGLU (``bias_geglu_impl``, Grok-1's and Gemma's gated activation) as its own
op kind, ``geglu``: timed at the h100 preset's ``[elementwise_kernels_megatron]`` ``geglu``
rates, measured on a GH100 at a Grok-1 expert's shape (arch/chips/h100.toml; the comparison
with the measurement is tests/validation/test_elementwise_kernels.py's); at the copy rate,
exactly as the ``gelu`` kind it was lowered to before, on every other stack.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import pytest

from diptych.arch import load_chip
from diptych.sim.api import simulate
from diptych.sim.run.stack import stack_chip
from diptych.sim.vector import stream_fraction
from diptych.workloads import load_model, train_step
from diptych.workloads.ops import VectorOp

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
import validate_elementwise as ve  # noqa: E402
from tiny_models import TINY_MOE, write_config  # noqa: E402

H100 = load_chip("h100")
MEGATRON = stack_chip(H100, elementwise_kernels="megatron")
GROK1 = ROOT / "benchmarks" / "models" / "grok-1.json"


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_geglu_time_is_its_bytes_over_the_copy_rate_times_its_fraction(backward):
    """Closed form on toy shapes (1,024 and 2,048 tokens × 8,192: 50-134 MB): the time the
    second shape's extra bytes take is those bytes ÷ (copy rate × the preset's fraction),
    the copy rate measured by ``copy`` ops of the same bytes on the same chip (the launch,
    the DMA setup and the first chunk's ALU work are fixed costs: they cancel), within
    0.1 %; on the default chip the GeGLU streams at the copy rate."""
    rates = MEGATRON.elementwise_kernels
    frac = rates.geglu_bwd if backward else rates.geglu
    ops = [ve.swiglu_ops(t, 8192, kind="geglu")[1 if backward else 0] for t in (1024, 2048)]
    b = [op.read_bytes + op.write_bytes for op in ops]
    t = lambda op, c: simulate(op, c).seconds   # noqa: E731
    copies = [dataclasses.replace(op, kind="copy", ops_per_element=0.0, tags=()) for op in ops]
    rate = (b[1] - b[0]) / (t(copies[1], H100) - t(copies[0], H100))
    assert t(ops[1], MEGATRON) - t(ops[0], MEGATRON) == pytest.approx(
        (b[1] - b[0]) / (rate * frac), rel=1e-3)
    assert t(ops[1], H100) - t(ops[0], H100) == pytest.approx((b[1] - b[0]) / rate, rel=1e-3)
    assert frac == min(1.0, round(ve.measured_fractions()["geglu_bwd" if backward
                                                        else "geglu"], 2))
    assert 2.9e12 < rate < 3.1e12


def test_geglu_is_the_old_gelu_kind_bit_for_bit_without_the_table():
    """Renaming the kind moves nothing on a stack without a GeGLU rate: the ``geglu`` op of a
    shape times exactly as the ``gelu``-kind op the lowering made of it before, on the
    default h100 and on a chip that fuses elementwise work (tpu-v4)."""
    fwd, bwd, _ = ve.swiglu_ops(2048, 4096, kind="geglu")
    for chip in (H100, load_chip("tpu-v4")):
        for op in (fwd, bwd):
            assert simulate(op, chip) == simulate(dataclasses.replace(op, kind="gelu"), chip)


def test_grok1_and_gemma_lower_their_activation_as_geglu(tmp_path):
    """Grok-1's shapes (a Mixtral config whose hidden_act is tanh-GELU) and Gemma 2 lower a
    GeGLU reading gate and up and writing their product (backward: reads dy and gate_up,
    writes d gate_up), of kind ``geglu``; a SiLU Mixtral keeps its SwiGLU; Grok-1's experts
    stream at the measured GeGLU rates under the Megatron table, at the copy rate without."""
    grok = load_model(str(GROK1))
    assert (grok.activation, grok.experts, grok.experts_per_token) == ("geglu", 8, 2)
    silu = load_model(write_config(tmp_path, TINY_MOE))
    assert silu.activation == "swiglu"
    for m, name in ((grok, "experts_geglu"), (load_model("gemma-2-9b"), "geglu")):
        w = train_step(m, 1, 512)
        ops = {o.name: o for _, o in w.items() if isinstance(o, VectorOp)}
        f, b = ops[name], ops[f"{name}.bwd"]
        a, n = 2, f.elements
        assert (f.kind, b.kind) == ("geglu", "geglu")
        assert (f.read_bytes, f.write_bytes, b.read_bytes, b.write_bytes) == (
            2 * n * a, n * a, 3 * n * a, 2 * n * a)
    rates = MEGATRON.elementwise_kernels
    assert (stream_fraction(f, MEGATRON), stream_fraction(b, MEGATRON)) == (rates.geglu,
                                                                             rates.geglu_bwd)
    assert rates.geglu_bwd < 1.0
    assert (stream_fraction(f, H100), stream_fraction(b, H100)) == (1.0, 1.0)


def test_a_mixtral_config_refuses_an_activation_it_cannot_lower(tmp_path):
    path = write_config(tmp_path, {**TINY_MOE, "hidden_act": "relu"})
    with pytest.raises(ValueError, match=r"hidden_act: unsupported activation 'relu' for "
                                         r"MixtralForCausalLM; expected silu or swish or "
                                         r"gelu_pytorch_tanh"):
        load_model(path)
    assert json.loads(GROK1.read_text())["hidden_act"] == "gelu_pytorch_tanh"
