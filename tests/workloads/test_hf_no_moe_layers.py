"""A MoE config whose layer pattern selects no MoE layer is the dense model transformers
builds from it (a plain MLP of ``intermediate_size`` in every layer not selected for
experts), and runs through the cluster step."""

from __future__ import annotations

import dataclasses
import json

import pytest
from roofline_double import roofline

from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.params import layer_params
from diptych.sim.run import Scenario
from diptych.workloads import model_from_hf, param_count
from diptych.workloads.params import params_per_chip


def _cfg(name: str) -> dict:
    from importlib import resources
    return json.loads(resources.files("diptych.workloads.models").joinpath(f"{name}.json")
                      .read_text())


def _qwen3_dense_params(layers=48, d=2048, h=32, kv=4, dh=128, f=6144, vocab=151936) -> int:
    """Qwen3-30B-A3B's shapes with a SwiGLU MLP of ``intermediate_size`` in every layer:
    q, k, v, o; q/k norms; two RMSNorms; gate/up/down; untied embeddings and the final norm."""
    attn = d * h * dh + 2 * d * kv * dh + h * dh * d + 2 * dh + 2 * d
    return layers * (attn + 3 * d * f) + 2 * vocab * d + d


@pytest.mark.parametrize("override", [{"decoder_sparse_step": 100},
                                      {"mlp_only_layers": list(range(48))}])
def test_qwen3_moe_without_moe_layers_is_dense(override):
    m = model_from_hf(dict(_cfg("qwen3-30b-a3b"), **override), name="q")
    assert not m.is_moe and m.experts == 0 and m.moe_layers == 0
    assert param_count(m) == _qwen3_dense_params()
    # the cluster layer used to divide by the (zero) MoE layer count
    r = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=4, dp=2),
                              Scenario.of(phase="train", batch=4, seq=512), simulate=roofline)
    assert r.seconds > 0 and "ep all-to-all dispatch" not in r.comm


def test_llama4_with_empty_moe_layers_is_dense():
    cfg = _cfg("llama-4-scout")
    cfg["text_config"] = dict(cfg["text_config"], moe_layers=[])
    m = model_from_hf(cfg, name="s")
    assert not m.is_moe and m.shared_experts == 0
    t = cfg["text_config"]
    # every layer's MLP is Llama4TextMLP of intermediate_size_mlp
    assert m.intermediate_size == t["intermediate_size_mlp"]
    assert [s.moe for s in m.layer_specs()] == [False] * t["num_hidden_layers"]


def test_deepseek_with_every_layer_dense_is_dense():
    cfg = _cfg("deepseek-v3")
    m = model_from_hf(dict(cfg, first_k_dense_replace=cfg["num_hidden_layers"]), name="d")
    assert not m.is_moe and m.dense_layers == m.layers


def test_cluster_parameters_of_a_config_without_moe_layers():
    # a ModelConfig built directly with experts but no MoE layer: no expert, router or shared
    # expert tensors, and the per-layer split still adds up
    from diptych.workloads import load_model
    m = dataclasses.replace(load_model("qwen3-30b-a3b"), layer_moe=(False,) * 48)
    lp = layer_params(m, 4)
    assert lp.stage(m.dense_layers, 0, True, True)[0] == pytest.approx(params_per_chip(m, 4))
