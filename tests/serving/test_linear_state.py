"""A linear-attention layer's fixed state in serve's paged cache (issue 25 item 5, second
half): counted once per sequence, whatever its length, as whole blocks beside the attention
layers' per-token blocks; the event loop equals its golden twin (explicit block ids) on a
hybrid model with preemption; serve runs on Qwen3-Next. Expected numbers are closed forms
from the config's own fields."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from roofline_double import roofline
from serving_twin import serve_against_twin
from tiny_models import TINY_NEXT

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.workloads import model_from_hf

MODELS = Path(__file__).parents[2] / "workloads" / "models"


def _state_per_chip(c: dict, tp: int) -> float:
    """One sequence's state on one TP rank, from the config: each linear layer's value heads'
    d_k × d_v FP32 matrices and the conv's kernel − 1 inputs of its q/k/v channels (BF16)."""
    lin = c["num_hidden_layers"] - c["num_hidden_layers"] // c["full_attention_interval"]
    rec = c["linear_num_value_heads"] // tp * c["linear_key_head_dim"] \
        * c["linear_value_head_dim"] * 4
    conv = (2 * c["linear_num_key_heads"] * c["linear_key_head_dim"]
            + c["linear_num_value_heads"] * c["linear_value_head_dim"]) // tp \
        * (c["linear_conv_kernel_dim"] - 1) * 2
    return lin * (rec + conv)


def test_budget_gives_each_request_its_state_once():
    c = json.loads((MODELS / "qwen3-next-80b-a3b.json").read_text())
    r = colocated("h100", "qwen3-next-80b-a3b", tp=4).pool.replica
    b = kv_budget(r, block_tokens=16, max_batched_tokens=8192, reserve_fraction=0.1)
    # a block: 16 tokens of the 12 full-attention layers (2 KV heads replicated on 4 ranks)
    full = c["num_hidden_layers"] // c["full_attention_interval"]
    assert b.block_bytes == 16 * full * 2 * 1 * c["head_dim"] * 2
    assert b.layout.kinds == (("full", None, 1),)
    state = _state_per_chip(c, 4)
    assert b.layout.state_blocks == math.ceil(state / b.block_bytes) == 99
    # a request's blocks: its state's, plus one per 16 tokens (the state does not grow)
    for tokens in (1, 16, 17, 100_000):
        assert b.layout.blocks(0, tokens, tokens) == 99 + math.ceil(tokens / 16)
    assert b.layout.max_blocks(1000, 0, 1000) == 99 + math.ceil(1000 / 16)
    assert b.layout.blocks(0, 0, 0) == 0


CASES = {
    "chunked-recompute": ServeConfig(max_batched_tokens=256),
    "swap": ServeConfig(max_batched_tokens=256, preemption="swap"),
    "whole-prompts": ServeConfig(chunked_prefill=False, max_batched_tokens=2048),
    "static": ServeConfig(scheduler="static", max_batch=8),
}


def _small_cache(dep, cfg: ServeConfig, kv_bytes: float = 2_000 * 512) -> ServeConfig:
    """``cfg`` with the reserve that leaves ``kv_bytes`` per chip for the cache (2,000 tokens
    of the two full layers, 256 B each per token)."""
    r = dep.pool.replica
    b = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                  max_batched_tokens=cfg.max_batched_tokens, reserve_fraction=0.0)
    return dataclasses.replace(cfg, kv_reserve_fraction=(b.kv_bytes - kv_bytes)
                               / b.capacity_bytes)


@pytest.mark.parametrize("case", list(CASES))
def test_state_engine_equals_its_golden_twin(case):
    dep = colocated("h100", model_from_hf(TINY_NEXT, name="tiny-next"))
    cfg = _small_cache(dep, CASES[case])
    load = Load(qps=200, prompt=P("uniform:lo=20,hi=700"), gen=P("uniform:lo=1,hi=300"),
                requests=60)
    res, inst = serve_against_twin(dep, load, cfg)
    # the tiny model's state, 2 linear layers × (4·16·24 FP32 + 160 conv channels × 3 BF16)
    # = 14,208 B, over blocks of 16 tokens × 2 full layers × 256 B: 2 blocks a request
    assert inst.block_bytes == 16 * 2 * 256
    assert inst.layout.state_blocks == math.ceil(2 * (4 * 16 * 24 * 4 + 160 * 3 * 2)
                                                 / (16 * 2 * 256)) == 2
    if case in ("chunked-recompute", "swap"):
        assert res.preemptions > 0


def test_serve_runs_on_qwen3_next():
    res = serve(colocated("h100", "qwen3-next-80b-a3b", tp=4),
                Load(qps=4, prompt=P("64"), gen=P("8"), requests=6),
                oracles=StepTimerCache("grid", roofline))
    assert res.requests == 6
