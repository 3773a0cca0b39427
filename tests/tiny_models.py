"""Four-layer HuggingFace configs that keep the engine's part of command tests short, shared
by the ``plan``, ``run --cluster`` and ``compare --cluster-chips`` tests (``tests/`` is put on
``sys.path`` by each test module, as for :mod:`roofline_double`)."""

from __future__ import annotations

import json

TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 4,
        "vocab_size": 1024, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "head_dim": 32}
#: The same with 8 experts, top-2 (Mixtral's layout).
TINY_MOE = {**TINY, "architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
            "num_experts_per_tok": 2}

#: A four-layer Qwen3-Next (linear, full, linear, full): gated DeltaNet with 2 q/k heads of 16
#: and 4 value heads of 24 (d_k != d_v, two value heads per q/k head), a 4-tap conv, gated
#: attention on the full layers, 8 experts top-2 and a gated shared expert of 128.
TINY_NEXT = {**TINY, "architectures": ["Qwen3NextForCausalLM"], "full_attention_interval": 2,
             "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
             "linear_value_head_dim": 24, "linear_conv_kernel_dim": 4, "num_experts": 8,
             "num_experts_per_tok": 2, "moe_intermediate_size": 64,
             "shared_expert_intermediate_size": 128}

#: A four-layer DeepSeek-V3.2 (DeepSeek Sparse Attention on MLA): 8 heads, query latent 64, KV
#: latent 32, q/k 16 + 8 RoPE, v 16; one dense layer then 8 experts top-2 with a shared expert;
#: an indexer of 4 heads of 16 keeping the top 64 keys per query.
TINY_DSA = {"architectures": ["DeepseekV32ForCausalLM"], "hidden_size": 256,
            "intermediate_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
            "vocab_size": 1024, "max_position_embeddings": 4096, "q_lora_rank": 64,
            "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "n_shared_experts": 1, "moe_intermediate_size": 64, "first_k_dense_replace": 1,
            "index_n_heads": 4, "index_head_dim": 16, "index_topk": 64}


def write_config(directory, config: dict, name: str = "config.json") -> str:
    """Write ``config`` as ``directory/name`` and return its path."""
    path = directory / name
    path.write_text(json.dumps(config))
    return str(path)
