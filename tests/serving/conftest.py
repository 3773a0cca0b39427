"""Shared fixtures of the serving tests: a tiny Llama-like model (fast on the real engine) and
the roofline double (tests/roofline_double.py) for the bulk."""

from __future__ import annotations

import json

import pytest

from diptych.workloads.config import model_from_hf

TINY_HF = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 1536,
           "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False}


@pytest.fixture(scope="session")
def tiny():
    return model_from_hf(TINY_HF, name="tiny-llama")


@pytest.fixture
def tiny_path(tmp_path):
    p = tmp_path / "tiny-llama" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(TINY_HF))
    return str(p)
