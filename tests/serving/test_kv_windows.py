"""Sliding-window and chunked layers hold only their window of KV (issue 25 item 5): in the
memory fit of ``run`` and ``plan`` exactly ``min(window, context)`` tokens per layer, in the
paged cache of ``serve`` the blocks vLLM's sliding-window manager keeps (page-granular).
Every expected number is a closed form from the model's ``config.json`` fields, read here
from the file itself."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from roofline_double import roofline
from serving_twin import serve_against_twin

from diptych.sim.cluster import Plan, check_plan, plan_memory
from diptych.sim.run import Scenario, run_workload
from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.kv import KvLayout, kv_budget
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.workloads import load_model, model_from_hf
from diptych.workloads.precision import Precision

MODELS = Path(__file__).parents[2] / "workloads" / "models"


def _hf(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def _closed_form_kv(cfg: dict, context: int, dtype_bytes: float, tp: int = 1) -> float:
    """KV bytes of one sequence from the config's own fields: every layer caches
    ``2 · kv_heads/tp · head_dim`` elements per token, a ``sliding_attention`` layer at most
    ``sliding_window`` tokens."""
    per_token_layer = 2 * max(1, cfg["num_key_value_heads"] // tp) * cfg["head_dim"] * dtype_bytes
    tokens = sum(min(context, cfg["sliding_window"]) if t == "sliding_attention" else context
                 for t in cfg["layer_types"])
    assert len(cfg["layer_types"]) == cfg["num_hidden_layers"]
    return tokens * per_token_layer


@pytest.mark.parametrize("name,context", [("gpt-oss-120b", 131_072), ("gpt-oss-20b", 100),
                                          ("gpt-oss-20b", 8_000)])
def test_run_memory_fit_holds_min_window_context_per_layer(name, context):
    cfg = _hf(name)
    r = run_workload("h100", load_model(name),
                     Scenario.of(phase="decode", batch=2, prompt=context - 1, gen=1),
                     simulate=roofline)
    assert r.memory["breakdown"]["kv_cache"] == pytest.approx(
        2 * _closed_form_kv(cfg, context, 2), rel=1e-12)


def test_plan_memory_fit_holds_min_window_context_per_layer():
    cfg, m = _hf("gpt-oss-120b"), load_model("gpt-oss-120b")
    context = 65_536
    plan = Plan(tp=4, dp=2)
    info = check_plan(plan, m, chips=plan.chips, batch=8, seq_len=1, phase="decode")
    rep = plan_memory(m, plan, Precision(), phase="decode", seq=1,
                      micro_batches=info["micro_batches"],
                      layers_per_chunk=info["layers_per_chunk"], global_batch=8,
                      context=context, capacity_bytes=2**50)
    assert rep.breakdown["kv_cache"] == pytest.approx(
        4 * _closed_form_kv(cfg, context, 2, tp=4), rel=1e-12)


def _held_tokens(window: int | None, att: str, context: int, bs: int) -> int:
    """Tokens of one layer's kept blocks at rest with ``context`` tokens computed, counted
    block by block: vLLM frees a block once its last token is before the next query's window
    (sliding: ``context − window + 1``) or before its chunk (``context // chunk · chunk``)."""
    first = 0 if window is None else (
        max(0, context - window + 1) if att == "sliding" else context // window * window)
    return sum(bs for b in range(math.ceil(context / bs)) if b >= first // bs)


@pytest.mark.parametrize("context", [1, 100, 128, 1024, 1030, 131_072])
def test_paged_cache_holds_min_window_context_per_layer(context):
    # gpt-oss-120b: 18 sliding (128) + 18 full layers; 16-token blocks of 18 layers
    cfg = _hf("gpt-oss-120b")
    m, bs = load_model("gpt-oss-120b"), 16
    r = colocated("h100", m, tp=2, weights_dtype="mxfp4").pool.replica
    b = kv_budget(r, block_tokens=bs, max_batched_tokens=2048, reserve_fraction=0.1)
    assert b.layout.unit_layers == 18
    held = b.layout.blocks(0, context, context) * b.block_bytes
    per_token_layer = 2 * (cfg["num_key_value_heads"] // 2) * cfg["head_dim"] * 2
    n_slide = cfg["layer_types"].count("sliding_attention")
    n_full = cfg["num_hidden_layers"] - n_slide
    w = cfg["sliding_window"]
    want = per_token_layer * (n_full * _held_tokens(None, "full", context, bs)
                              + n_slide * _held_tokens(w, "sliding", context, bs))
    assert held == pytest.approx(want, rel=1e-12)
    # page-granular: at a block-aligned context exactly min(window, context) tokens of a
    # sliding layer, otherwise less than two blocks more (a partial block at each end)
    slide = _held_tokens(w, "sliding", context, bs)
    assert min(w, context) <= slide < min(w, context) + 2 * bs
    if context % bs == 0:
        assert slide == min(w, context)


@pytest.mark.parametrize("att,window", [("sliding", 128), ("sliding", 100), ("sliding", 1),
                                        ("chunked", 64), ("chunked", 40)])
def test_layout_blocks_match_a_block_by_block_count(att, window):
    bs = 16
    lay = KvLayout(bs, 2, (("full", None, 3), (att, window, 5)))
    for shared in (0, 32):
        for start in range(shared, 400, 7):
            for upto in (start, start + 1, start + 37):
                if upto <= shared:
                    continue
                first = max(0, start - window + 1) if att == "sliding" else \
                    start // window * window
                kept = sum(1 for blk in range(math.ceil(upto / bs))
                           if blk >= shared // bs and blk >= first // bs)
                own = math.ceil(upto / bs) - shared // bs
                assert lay.blocks(shared, upto, start) == 3 * own + 5 * kept


def test_a_model_without_windows_keeps_the_classic_block():
    r = colocated("h100", "llama-3-8b").pool.replica
    b = kv_budget(r, block_tokens=16, max_batched_tokens=8192, reserve_fraction=0.1)
    assert b.layout == KvLayout(16, 32, (("full", None, 1),))
    assert not b.layout.windowed
    assert b.block_bytes == 16 * b.bytes_per_token                # bit for bit
    assert b.tokens == b.blocks * 16


def test_windows_free_capacity_for_more_sequences():
    # gpt-oss-120b at 32k-token sequences on two H100s: the sliding layers' blocks hold 128
    # tokens, so nearly twice the sequences fit as when every layer keeps every token
    m = load_model("gpt-oss-120b")
    r = colocated("h100", m, tp=2, weights_dtype="mxfp4").pool.replica
    b = kv_budget(r, block_tokens=16, max_batched_tokens=8192, reserve_fraction=0.1)
    per_seq = b.layout.blocks(0, 32_768, 32_768)
    assert per_seq == 2048 + 8          # full: 32768/16 blocks; sliding: 128/16
    full_history = b.layout.units_per_block * 2048
    assert full_history / per_seq > 1.99 and b.blocks // per_seq >= 20


#: a four-layer Qwen2 with three sliding (64) and one full layer: small enough for a twin
#: with explicit block ids, its cache shrunk by the reserve so that requests are preempted
TINY_WINDOWED = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256,
                 "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
                 "num_hidden_layers": 4, "vocab_size": 1024, "max_position_embeddings": 4096,
                 "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention",
                                                       "sliding_attention", "sliding_attention"]}


def _tiny():
    return model_from_hf(TINY_WINDOWED, name="tiny-windowed")


def _small_cache(dep, cfg: ServeConfig, kv_bytes: float = 2400 * 1024) -> ServeConfig:
    """``cfg`` with the reserve that leaves ``kv_bytes`` per chip for the cache (2,400 tokens
    of every layer of the tiny model, 1 KiB each)."""
    r = dep.pool.replica
    b = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                  max_batched_tokens=cfg.max_batched_tokens, reserve_fraction=0.0)
    return dataclasses.replace(cfg, kv_reserve_fraction=(b.kv_bytes - kv_bytes)
                               / b.capacity_bytes)


CASES = {
    "chunked-recompute": ServeConfig(max_batched_tokens=256),
    "swap": ServeConfig(max_batched_tokens=256, preemption="swap"),
    "whole-prompts": ServeConfig(chunked_prefill=False, max_batched_tokens=2048),
    "speculative-prefix": ServeConfig(speculative=Speculation(3, 0.7), prefix_share=0.5),
    "static": ServeConfig(scheduler="static", max_batch=8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_windowed_engine_equals_its_golden_twin(case):
    dep = colocated("h100", _tiny())
    cfg = _small_cache(dep, CASES[case])
    load = Load(qps=200, prompt=P("uniform:lo=20,hi=700"), gen=P("uniform:lo=1,hi=300"),
                requests=80)
    res, inst = serve_against_twin(dep, load, cfg)
    assert inst.layout.windowed and inst.layout.kinds == (("sliding", 64, 3), ("full", None, 1))
    if case in ("chunked-recompute", "swap"):
        assert res.preemptions > 0


def test_windowed_cache_admits_more_than_the_full_history_would():
    # the same load on the tiny model: its cache holds the same bytes either way, but with
    # the windows freed the sequences' peak share of it is lower and fewer are preempted
    load = Load(qps=200, prompt=P("uniform:lo=200,hi=700"), gen=P("uniform:lo=100,hi=300"),
                requests=80)
    dep = colocated("h100", _tiny())
    cfg = _small_cache(dep, ServeConfig(max_batched_tokens=256))
    windowed = serve(dep, load, cfg, oracles=StepTimerCache("grid", roofline))
    full = {**TINY_WINDOWED, "layer_types": ["full_attention"] * 4}
    plain = serve(colocated("h100", model_from_hf(full, name="tiny-full")), load, cfg,
                  oracles=StepTimerCache("grid", roofline))
    assert windowed.preemptions < plain.preemptions
    assert windowed.to_dict()["kv"][0]["block_layers"] == 1
