"""A GEMM that accumulates into its output (``c_accumulate``, cuBLAS ``beta = 1``): the
read-back of C is charged as DRAM bytes, and as time where the op's DRAM traffic with it
outlasts the engine's run (sim/gemm.py)."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.arch import load_chip
from diptych.sim import simulate
from diptych.sim.regime import memory_roof_bytes_per_s
from diptych.workloads import load_model
from diptych.workloads.ops import Gemm
from diptych.workloads.train import train_step

H100 = load_chip("h100")


@pytest.mark.parametrize("m,k,n", [(4096, 4096, 4096), (4096, 16, 4096)])
def test_accumulating_gemm_reads_its_output_back(m, k, n):
    # a compute-bound weight gradient (k = 4,096 tokens) and a memory-bound one (k = 16)
    g = Gemm(name="w.wgrad", m=m, k=k, n=n, c_dtype="bf16", c_accumulate=True)
    plain = simulate(dataclasses.replace(g, c_accumulate=False), H100)
    acc = simulate(g, H100)
    assert acc.dram_read_bytes - plain.dram_read_bytes == m * n * 2
    assert acc.dram_write_bytes == plain.dram_write_bytes
    assert acc.seconds >= plain.seconds
    # never faster than its DRAM bytes at the memory roof
    roof = (acc.dram_read_bytes + acc.dram_write_bytes) / memory_roof_bytes_per_s(H100)
    assert acc.seconds >= roof * (1 - 1e-9)
    if k == 16:            # memory-bound: the read-back costs its bytes' time
        assert acc.seconds > plain.seconds


def test_c_accumulate_must_be_a_bool():
    with pytest.raises(ValueError, match="c_accumulate must be true or false, not 1"):
        Gemm(name="g", m=8, k=8, n=8, c_accumulate=1)


def test_weight_gradients_accumulate_into_the_gradient_buffer():
    # gradient_accumulation_fusion (all the published configs): Transformer Engine's wgrad
    # GEMM writes into weight.main_grad with accumulate=True (cuBLAS beta = 1), reading the
    # BF16 buffer (grad_sync_dtype bf16) back: in × out × 2 bytes per linear weight, once
    # per micro-batch; activation-gradient GEMMs write fresh outputs
    w = train_step(load_model("llama-3-8b"), 1, 512, micro_batch=1)
    gemms = [o for b in w.blocks if b.stage == "backward" for o in b.ops
             if o.name.endswith(("wgrad", "dgrad"))]
    for g in gemms:
        want = g.name.endswith(".wgrad")
        assert g.c_accumulate is want, g.name
        assert g.c_read_bytes == (g.m * g.n * 2 if want else 0.0)
    qkv = next(g for g in gemms if g.name == "qkv_proj.wgrad")
    assert qkv.c_read_bytes == 4096 * (4096 + 2 * 1024) * 2
