"""End to end through the real engine (diptych.sim.simulate) on a small model: the totals obey
the roofline bounds, repeats scale, and the phases tell their different stories."""

from __future__ import annotations

import pytest

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import model_from_hf

TINY = model_from_hf({"architectures": ["LlamaForCausalLM"], "hidden_size": 512,
                      "intermediate_size": 1536, "num_attention_heads": 8,
                      "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 8192,
                      "max_position_embeddings": 4096}, name="tiny-llama")


@pytest.fixture(scope="module")
def chip():
    return load_chip("train-2026")


@pytest.mark.parametrize("phase,kw", [("prefill", dict(batch=2, prompt=256)),
                                      ("decode", dict(batch=4, prompt=256, gen=16)),
                                      ("train", dict(batch=2, seq=256))])
def test_roofline_bounds_hold(chip, phase, kw):
    r = run_workload(chip, TINY, Scenario.of(phase=phase, **kw))
    peak = chip.peak_ops_per_s["bf16"]
    assert r.seconds >= r.hardware_flops / peak * (1 - 1e-9)
    assert r.seconds >= r.dram_bytes / chip.dram_bytes_per_s * (1 - 1e-9)
    assert 0 < r.mfu <= r.hfu <= 1
    # the schedule is never longer than its ops run one after another, fixed costs included
    # (TP1: no collective to overlap or expose)
    assert r.seconds <= (sum(x["total_seconds"] for x in r.layers) + r.fixed_costs_s) * (1 + 1e-9)
    assert r.energy_j > 0 and r.fits
    again = run_workload(chip, TINY, Scenario.of(phase=phase, **kw))
    assert again.seconds == r.seconds                      # deterministic


def test_decode_is_memory_bound_and_batching_raises_throughput(chip):
    # llama-3-8b at batch 1 streams 16 GB of weights per token: bandwidth-bound
    one = run_workload(chip, "llama-3-8b", Scenario.of(phase="decode", batch=1, prompt=512, gen=4))
    many = run_workload(chip, "llama-3-8b",
                        Scenario.of(phase="decode", batch=64, prompt=512, gen=4))
    assert one.bound == "memory" and one.dram_bw_utilization > 0.5
    assert one.seconds >= 16.06e9 / chip.dram_bytes_per_s
    assert many.tokens_per_s > 8 * one.tokens_per_s
    assert many.tokens_per_s_per_user <= one.tokens_per_s_per_user


def test_layers_simulated_once_and_scaled(chip):
    r = run_workload(chip, TINY, Scenario.of(phase="prefill", batch=1, prompt=128))
    # one record per residency segment (all 4 layers' weights fit on chip here: one), the
    # projection fused with its prologue/epilogue ("attn_norm+qkv_proj+...")
    qkv = [x for x in r.layers if "qkv_proj" in x["op"].split("+")]
    assert len(qkv) == 1 and qkv[0]["repeat"] == 4
    assert qkv[0]["total_seconds"] == pytest.approx(4 * qkv[0]["seconds"])
