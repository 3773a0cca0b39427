"""Decode over a generation: each layer kind attends its own mean keys over the steps.

Step ``i`` (0-based) of ``gen`` steps after a ``prompt``-token prompt attends the keys of
position ``p = prompt + i + 1``: ``p`` for a full-attention layer, ``min(p, window)`` for a
sliding one, ``((p - 1) mod chunk) + 1`` for a chunked one (Llama 4). The brute force below
walks the steps one by one; the lowering uses the closed form."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import decode, decode_context, load_model
from diptych.workloads.lower import decode_mean
from diptych.sim.run.summed import simulate_workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from roofline_double import roofline  # noqa: E402


def keys_at(spec, position: int) -> int:
    if spec.attention == "chunked":
        return (position - 1) % spec.window + 1
    if spec.attention == "sliding":
        return min(position, spec.window)
    return position


def brute_force(m, prompt: int, gen: int) -> list[int]:
    """Rounded-up mean keys per layer kind (``layer_groups`` order), step by step."""
    out = []
    for spec, _ in m.layer_groups():
        total = sum(keys_at(spec, prompt + i + 1) for i in range(gen))
        out.append(math.ceil(total / gen))
    return out


@pytest.mark.parametrize("name,prompt,gen", [
    ("llama-4-scout", 4096, 8192),      # chunked 8192 + full (NoPE) layers
    ("llama-4-scout", 8000, 300),       # a generation that crosses a chunk boundary
    ("llama-4-scout", 100, 7),
    ("gemma-3-12b", 512, 1024),         # sliding 1024: the generation crosses the window
    ("gemma-3-12b", 4096, 64),          # every step beyond the window
    ("gpt-oss-20b", 100, 200),          # sliding 128 and full
    ("llama-3-8b", 2048, 513),          # full attention only
])
def test_each_layer_kind_attends_its_mean_keys_over_the_steps(name, prompt, gen):
    m = load_model(name)
    w = decode_mean(m, 2, prompt, gen)
    got = list(w.info["keys_per_query_by_block"].values())
    assert got == brute_force(m, prompt, gen)
    # the attention GEMMs of each layer block attend those keys
    for b, k in zip((b for b in w.blocks if b.name.startswith("layers")), got):
        fused = next(o for o in b.ops if o.name == "attention (fused)")
        assert fused.parts[0].n == k


def test_llama_4_scout_chunked_layers_attend_half_a_chunk_not_one_key():
    # prompt 4096, 8192 steps: positions 4097..12288; chunked layers see 4097..8192 then
    # 1..4096 keys, a mean of 4096.5; at the mean context 8193 they would see 1
    m = load_model("llama-4-scout")
    by_block = decode_mean(m, 1, 4096, 8192).info["keys_per_query_by_block"]
    chunked = [k for name, k in by_block.items() if "chunked" in name]
    assert chunked == [4097]
    old = decode(m, 1, decode_context(4096, 8192)).info["keys_per_query_by_block"]
    assert [k for name, k in old.items() if "chunked" in name] == [1]


@pytest.mark.parametrize("name", ["llama-3-8b", "llama-3-70b", "deepseek-v3", "mixtral-8x7b"])
@pytest.mark.parametrize("prompt,gen", [(4096, 8192), (1000, 1), (100, 7), (7, 2)])
def test_full_attention_decode_is_the_step_at_the_mean_context(name, prompt, gen):
    # for full attention the mean keys are the mean context: the ops are exactly the one
    # step at decode_context, as run computed them before per-kind means
    m = load_model(name)
    new = decode_mean(m, 4, prompt, gen, tp=2)
    old = decode(m, 4, decode_context(prompt, gen), tp=2)
    assert new.blocks == old.blocks
    assert new.info["context_len"] == old.info["context_len"]


def test_run_decode_of_a_full_attention_model_is_unchanged():
    # diptych run's decode of Llama 3: the same time, FLOPs and bytes as the one step at the
    # mean context (the lowering before the per-kind means)
    m = load_model("llama-3-8b")
    # (the lowering's equivalence, compared in the summed run that simulate_workload is)
    r = run_workload("h100", m,
                     Scenario.of(phase="decode", batch=8, prompt=2048, gen=4096, execution="sum"),
                     simulate=roofline)
    ref = simulate_workload(decode(m, 8, decode_context(2048, 4096)), load_chip("h100"),
                            simulate=roofline)
    assert r.seconds == ref["seconds"] and r.dram_bytes == ref["dram_bytes"]
    assert r.info["context_len"] == decode_context(2048, 4096)


def test_bad_prompt_or_gen_names_the_field():
    m = load_model("llama-3-8b")
    with pytest.raises(ValueError, match="gen must be a positive integer, not 0"):
        decode_mean(m, 1, 100, 0)
    with pytest.raises(ValueError, match="prompt must be a positive integer, not -1"):
        decode_mean(m, 1, -1, 4)
