"""``diptych models``: list and show transformer models (built-ins and HF config.json files)."""

from __future__ import annotations

import click

from .errors import echo_err, friendly
from .jsonout import dumps


def model_summary(name_or_path: str) -> dict:
    """Shapes, parameter counts, KV bytes per token by dtype and FLOPs per token, JSON-ready."""
    from dataclasses import asdict

    from ..arch.dtypes import DTYPES
    from ..workloads import load_model
    from ..workloads.params import (active_param_count, attention_flops_per_token,
                                    kv_bytes_by_layer_kind, kv_bytes_per_token,
                                    index_key_bytes_per_token, matmul_param_count,
                                    param_count, state_bytes_per_layer,
                                    state_bytes_per_sequence)

    m = load_model(name_or_path)
    state = {}
    if m.state_layers:     # linear attention, Mamba-2: a fixed state per sequence (conv bf16)
        state = {"state_bytes_per_sequence": state_bytes_per_sequence(m, "bf16"),
                 "state_bytes_per_layer": state_bytes_per_layer(m, 1, "bf16"),
                 "state_layers": m.state_layers, "kv_layers": m.kv_layers}
    indexer = 0.0
    if m.sparse_attention:  # DSA: the indexer's own key cache beside the MLA latent
        indexer = 2.0 * m.kv_layers * m.index_heads * m.index_head_dim
        state["index_key_bytes_per_token_per_layer"] = index_key_bytes_per_token(m)
        state["indexer_flops_per_token_per_context_token"] = indexer
    return {
        "config": asdict(m),
        "layer_pattern": m.describe_layers(),
        "parameters": param_count(m),
        "active_parameters": active_param_count(m),
        "kv_bytes_per_token": {d: kv_bytes_per_token(m, d) for d in DTYPES},
        "kv_bytes_by_layer_kind": kv_bytes_by_layer_kind(m, "bf16"),
        "flops_per_token": 2.0 * matmul_param_count(m),
        "attention_flops_per_token_per_context_token": attention_flops_per_token(m, 1)
        - indexer,
        **state,
    }


def _console():
    """A rich console; when output is not a terminal (pipes, files, tests) tables are laid
    out 160 columns wide instead of wrapping at 80."""
    import sys

    from rich.console import Console
    return Console() if sys.stdout.isatty() else Console(width=160)


def _b(x: float) -> str:
    return f"{x / 1e9:.2f} B"


@click.group("models")
def models():
    """Transformer models: built-ins and your own HuggingFace config.json files."""


@models.command("list")
@friendly
def models_list():
    """List the built-in models."""
    from rich.table import Table

    from ..workloads import builtin_names

    t = Table("name", "architecture", "layers", "d_model", "heads (kv)", "params", "active",
              "KV/token bf16")
    for n in builtin_names():
        s = model_summary(n)
        c = s["config"]
        kv = "latent" if c["kv_lora_rank"] else str(c["kv_heads"])
        t.add_row(n, c["architecture"], str(c["layers"]), str(c["hidden_size"]),
                  f"{c['heads']} ({kv})", _b(s["parameters"]), _b(s["active_parameters"]),
                  f"{s['kv_bytes_per_token']['bf16'] / 1024:.1f} KiB")
    _console().print(t)


@models.command("show")
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@friendly
def models_show(model: str, as_json: bool):
    """Show MODEL (a built-in name or a path to a config.json): shapes, parameters, active
    parameters, KV-cache bytes per token per dtype, FLOPs per token."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = model_summary(model)
    for msg in dict.fromkeys(str(w.message) for w in caught):
        echo_err(f"Warning: {msg}")
    if as_json:
        click.echo(dumps(s))
        return
    from rich.table import Table

    c = s["config"]
    con = _console()
    con.print(f"[bold]{c['name']}[/bold]: {c['architecture']} ({c['family']})")
    t = Table("quantity", "value", show_header=False)
    t.add_row("layers", f"{c['layers']} ({s['layer_pattern']})")
    t.add_row("hidden size", str(c["hidden_size"]))
    if c["kv_lora_rank"]:
        t.add_row("attention", f"MLA, {c['heads']} heads, q_lora {c['q_lora_rank']}, kv_lora "
                  f"{c['kv_lora_rank']}, qk {c['qk_nope_head_dim']}+{c['qk_rope_head_dim']}, "
                  f"v {c['v_head_dim']}")
    else:
        t.add_row("attention", f"{c['heads']} heads, {c['kv_heads']} KV heads, head dim "
                  f"{c['head_dim']}" + (", output gate" if c["attn_output_gate"] else ""))
    if c["linear_key_heads"] and s.get("state_bytes_per_sequence"):
        t.add_row("linear attention", f"gated DeltaNet on {s['state_layers']} "
                  f"layers: {c['linear_key_heads']} q/k heads × {c['linear_key_head_dim']}, "
                  f"{c['linear_value_heads']} v heads × {c['linear_value_head_dim']}, conv "
                  f"{c['linear_conv_kernel']}")
    if c["parallel_ssm"]:
        t.add_row("Mamba-2", f"beside the attention on every layer: {c['ssm_heads']} heads × "
                  f"{c['ssm_head_dim']}, state {c['ssm_state_size']}, {c['ssm_groups']} "
                  f"group(s), conv {c['ssm_conv_kernel']}, chunk {c['ssm_chunk_size']}")
    if c["index_topk"]:
        t.add_row("sparse attention", f"DSA: a lightning indexer of {c['index_heads']} heads × "
                  f"{c['index_head_dim']} (FP8) scores every earlier token; attention reads "
                  f"the top {c['index_topk']:,} per query")
    if c["experts"]:
        t.add_row("MoE", f"{c['experts']} experts, top-{c['experts_per_token']}, "
                  f"{c['shared_experts']} shared, width {c['moe_intermediate_size']}")
    t.add_row("FFN", f"{c['intermediate_size']} ({c['activation']})")
    t.add_row("vocab", str(c["vocab_size"]))
    t.add_row("max positions", str(c["max_position_embeddings"]))
    if c.get("checkpoint_dtype") or c.get("checkpoint_quant"):
        t.add_row("checkpoint", ", ".join(x for x in (
            c.get("checkpoint_dtype") and f"torch_dtype {c['checkpoint_dtype']}",
            c.get("checkpoint_quant") and f"{c['checkpoint_quant']} weights "
                                           f"(quantization_config)") if x))
    if c.get("mtp_layers"):
        t.add_row("MTP", f"{c['mtp_layers']} next-token-prediction layer"
                  f"{'s' if c['mtp_layers'] > 1 else ''} (num_nextn_predict_layers), not "
                  f"counted below; serve's --speculative draft=mtp")
    if c.get("vision_tower"):
        t.add_row("vision tower", "in the checkpoint (vision_config), not simulated: the "
                                  "counts below are the text model's")
    t.add_row("parameters", f"{s['parameters']:,} ({_b(s['parameters'])})")
    t.add_row("active parameters", f"{s['active_parameters']:,.0f} "
              f"({_b(s['active_parameters'])})")
    for d in ("bf16", "fp8", "int4"):
        t.add_row(f"KV bytes/token {d}", f"{s['kv_bytes_per_token'][d]:,.0f}")
    if s.get("index_key_bytes_per_token_per_layer"):
        lat = c["kv_lora_rank"] + c["qk_rope_head_dim"]
        t.add_row("  KV bytes/token parts", f"{c['layers']} layers × ({lat} latent + RoPE key "
                  f"elements in the KV dtype + {s['index_key_bytes_per_token_per_layer']:,.0f} "
                  f"B indexer key: FP8 and its FP32 scale)")
    if s.get("state_bytes_per_sequence"):
        per = s["state_bytes_per_layer"]
        n = s["state_layers"]
        if s["kv_layers"] < c["layers"]:
            t.add_row("  K/V cached by", f"{s['kv_layers']} of {c['layers']} layers (the "
                      f"linear ones keep a fixed state instead)")
        t.add_row("state bytes/sequence", f"{s['state_bytes_per_sequence']:,.0f} ({n} layers × "
                  f"({per['recurrent']:,.0f} B recurrent {c['state_dtype']} + "
                  f"{per['conv']:,.0f} B conv bf16), whatever the context)")
    kinds = s["kv_bytes_by_layer_kind"]
    if any(k["window"] is not None for k in kinds):     # full vs windowed layers' share
        for k in kinds:
            held = ("every token" if k["window"] is None
                    else f"at most {k['window']:,} tokens a sequence")
            t.add_row(f"  bf16, {k['layers']} × {k['attention']}",
                      f"{k['bytes_per_token_per_layer'] * k['layers']:,.0f} B/token ({held})")
    if s.get("indexer_flops_per_token_per_context_token"):
        t.add_row("FLOPs/token (forward)", f"{s['flops_per_token']:.3e} + "
                  f"{s['attention_flops_per_token_per_context_token']:.3e} per context token "
                  f"up to {c['index_topk']:,} (attention) + "
                  f"{s['indexer_flops_per_token_per_context_token']:.3e} per context token "
                  f"(indexer)")
    else:
        t.add_row("FLOPs/token (forward)", f"{s['flops_per_token']:.3e} + "
                  f"{s['attention_flops_per_token_per_context_token']:.3e} per context token")
    con.print(t)

