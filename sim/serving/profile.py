"""Export the per-step latency tables diptych computed for a chip, in Vidur's profile layout.

Vidur (microsoft/vidur), a request-level LLM serving simulator, predicts step times from
per-operation profiles measured on a GPU (``data/profiling/compute/<device>/<model>/mlp.csv``
and ``attention.csv``, ``data/profiling/network/<network>/all_reduce.csv``; written by
``vidur/profiling/{mlp,attention,collectives}/main.py``, read by
``vidur/execution_time_predictor/sklearn_execution_time_predictor.py``). :func:`export_profile`
writes the same files from diptych's simulation of a chip that may not exist, so Vidur users
can model it. Layout (times in milliseconds, as Vidur's CUDA timers record them; every
``time_stats.<op>`` has ``min/max/mean/median/std`` columns, all equal, std 0, since a
simulation is deterministic):

* ``mlp.csv``, one row per token count: Vidur's ``time_stats.{emb, input_layernorm,
  attn_pre_proj, attn_rope, attn_post_proj, post_attention_layernorm, mlp_up_proj, mlp_act,
  mlp_down_proj, add}`` from diptych's per-layer ops (embed_tokens, attn_norm, qkv_proj, rope,
  o_proj, mlp_norm, gate_up_proj/fc1, swiglu/gelu, down_proj/fc2, the two residual adds
  summed), plus ``n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp,
  num_tokens, num_tensor_parallel_workers``; ops with no Vidur name (MoE, MLA) get a
  ``time_stats.diptych_<op>`` column.
* ``attention.csv``: decode rows (``batch_size`` sequences, ``kv_cache_size`` cached tokens
  each, ``prefill_chunk_size`` 0, ``is_prefill`` False, ``time_stats.attn_decode``) and
  prefill rows (one sequence, ``prefill_chunk_size`` new tokens after ``kv_cache_size``,
  ``time_stats.attn_prefill``), both with ``time_stats.attn_kv_cache_save`` (the KV write),
  ``n_embd, n_q_head, n_kv_head, block_size, num_tensor_parallel_workers, max_model_len,
  attention_backend``.
* ``all_reduce.csv`` (tensor parallelism only): ``size`` in bytes (Vidur converts with 2 bytes
  per element), ``num_workers, devices_per_node, collective, time_stats.all_reduce``.
* ``steps.csv``, diptych's own whole-step table: ``decode_batch, decode_context,
  prefill_chunk, prefill_past, step_s, energy_j_per_chip`` (context = cached tokens per
  decode sequence), one row per grid point, each a full mixed-step simulation.
* ``profile.json``: chip, model, tp, precision, units and the files' meaning.

Every time includes the ops the chip runs beside a GEMM for its precision (block scales'
stream, rescale, weight dequantisation: :func:`~diptych.sim.run.precision_ops.with_precision_ops`),
as the step oracles charge them; in ``mlp.csv`` they count in their GEMM's column (one kernel,
as a fused W4A16 kernel's measured time would).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...arch.atomic import atomic_csv, atomic_text
from ..run.summed import simulate_workload
from ...workloads.serving_step import Step, decode_cores, frame, prefill_cores
from ..run.summed import block_costs
from .step_time import Replica

#: diptych op → Vidur's op name in mlp.csv
VIDUR_MLP = {"embed_tokens": "emb", "attn_norm": "input_layernorm", "qkv_proj": "attn_pre_proj",
             "rope": "attn_rope", "o_proj": "attn_post_proj",
             "mlp_norm": "post_attention_layernorm", "gate_up_proj": "mlp_up_proj",
             "fc1": "mlp_up_proj", "swiglu": "mlp_act", "gelu": "mlp_act",
             "down_proj": "mlp_down_proj", "fc2": "mlp_down_proj", "attn_residual": "add",
             "mlp_residual": "add"}
STATS = ("min", "max", "mean", "median", "std")


def _pow2_upto(lo: int, hi: int, half: bool = False) -> list[int]:
    out, x = [], lo
    while x <= hi:
        out.append(x)
        if half and x * 3 // 2 <= hi and x >= 2:
            out.append(x * 3 // 2)
        x *= 2
    if out and out[-1] != hi and hi > lo:
        out.append(hi)
    return sorted(set(out))


def _stat_cols(op: str, ms: float) -> dict:
    return {f"time_stats.{op}.{s}": (0.0 if s == "std" else ms) for s in STATS}


def _write(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    atomic_csv(path, keys, rows)      # a failed or interrupted export leaves no half file


def _mlp_rows(r: Replica, tokens: list[int], tick, simulate) -> tuple[list, list]:
    """Vidur's mlp.csv rows (one per token count, descending) and all_reduce.csv rows."""
    m, tp = r.model, r.tp
    common = {"n_head": m.heads, "n_kv_head": m.kv_heads, "n_embd": m.hidden_size,
              "n_expanded_embd": m.intermediate_size, "vocab_size": m.vocab_size,
              "use_gated_mlp": m.activation == "swiglu"}
    mlp_rows, ar_rows = [], []
    for n in sorted(tokens, reverse=True):          # Vidur lists token counts descending
        t = simulate_workload(r.frame_workload(n, n), r.chip, overlap=r.overlap, simulate=simulate)
        row: dict = {}
        ms: dict[str, float] = {}
        for rec in t["layers"]:
            if rec["block"] == "head":
                continue
            share = 1.0 if rec["block"] == "embedding" else rec["repeat"] / m.layers
            if rec["bound"] == "communication":
                if rec["op"].startswith("mlp_all_reduce") and \
                        not any(a["size"] == int(n * m.hidden_size * 2) for a in ar_rows):
                    ar_rows.append({"size": int(n * m.hidden_size * 2), "num_workers": tp,
                                    "devices_per_node": tp, "collective": "all_reduce",
                                    **_stat_cols("all_reduce", rec["seconds"] * 1e3),
                                    "rank": 0, "max_devices_per_node": tp})
                continue
            if rec["op"] == "kv_write":
                continue
            op = _gemm_of(rec["op"])   # a GEMM's precision ops count as the GEMM (one kernel)
            name = VIDUR_MLP.get(op, "diptych_" + op)
            ms[name] = ms.get(name, 0.0) + rec["seconds"] * 1e3 * share
        for name, v in ms.items():
            row.update(_stat_cols(name, v))
        row.update(common, num_tokens=n, num_tensor_parallel_workers=tp)
        mlp_rows.append(row)
        tick()
    return mlp_rows, ar_rows


def _attention_rows(r: Replica, batches: list[int], contexts: list[int], chunks: list[int],
                    ctx_max: int, block_tokens: int, tick, simulate) -> tuple[list, list]:
    """Vidur's attention.csv rows (decode batches, then prefill chunks, over the contexts)
    and diptych's whole-step rows (steps.csv) for the same points."""
    m, p, tp = r.model, r.precision, r.tp
    acommon = {"n_embd": m.hidden_size, "n_q_head": m.heads, "n_kv_head": m.kv_heads,
               "block_size": block_tokens, "num_tensor_parallel_workers": tp,
               "max_model_len": m.max_position_embeddings,
               "attention_backend": f"diptych_{r.attention}"}

    reps = {name: rep for name, rep in
            ((b.name, b.repeat) for b in frame(m, 1, 1, precision=p, tp=tp,
                                               attention=r.attention).blocks)}

    def core_ms(cores) -> float:
        """One layer's attention, averaged over the layer kinds by their layer counts."""
        return 1e3 * sum(b.compute_s * reps[b.name] for b in
                         block_costs(r.cores_workload(cores), r.chip, simulate)) / m.layers

    def kv_save_ms(n: int) -> float:
        t = simulate_workload(r.frame_workload(n, 1), r.chip, simulate=simulate)
        return 1e3 * sum(x["seconds"] * x["repeat"] for x in t["layers"]
                         if x["op"] == "kv_write") / m.layers

    att_rows, step_rows = [], []
    for b in batches:
        save = kv_save_ms(b)
        for c in contexts:
            a = core_ms(decode_cores(m, b, b * (c + 1), 1, precision=p, tp=tp,
                                       attention=r.attention))
            att_rows.append({**_stat_cols("attn_decode", a), **_stat_cols("attn_kv_cache_save",
                                                                          save),
                             **acommon, "batch_size": b, "prefill_chunk_size": 0,
                             "kv_cache_size": c, "is_prefill": False})
            st = simulate_workload(r.step_workload(Step(b, b * (c + 1))), r.chip, overlap=r.overlap,
                                   simulate=simulate)
            step_rows.append({"decode_batch": b, "decode_context": c, "prefill_chunk": 0,
                              "prefill_past": 0, "step_s": st["seconds"],
                              "energy_j_per_chip": st["energy_j"]})
            tick()
    for ch in chunks:
        save = kv_save_ms(ch)
        for c in contexts:
            if c + ch > ctx_max:
                tick()
                continue
            a = core_ms(prefill_cores(m, ch, c, 1, precision=p, tp=tp,
                                      attention=r.attention))
            att_rows.append({**_stat_cols("attn_prefill", a), **_stat_cols("attn_kv_cache_save",
                                                                           save),
                             **acommon, "batch_size": 1, "prefill_chunk_size": ch,
                             "kv_cache_size": c, "is_prefill": True})
            st = simulate_workload(r.step_workload(Step(prefill=((ch, c),))), r.chip,
                                   overlap=r.overlap, simulate=simulate)
            step_rows.append({"decode_batch": 0, "decode_context": 0, "prefill_chunk": ch,
                              "prefill_past": c, "step_s": st["seconds"],
                              "energy_j_per_chip": st["energy_j"]})
            tick()
    return att_rows, step_rows


def export_profile(replica: Replica, out_dir, *, max_tokens: int = 8192, max_batch: int = 256,
                   max_context: int | None = None, block_tokens: int = 16, simulate=None,
                   progress=None) -> list[Path]:
    """Write the files of the module docstring to ``out_dir``; return their paths.

    Token counts: powers of two and their 1.5× up to ``max_tokens``; decode batches: powers of
    two up to ``max_batch``; contexts: 0 and powers of two from 16 up to ``max_context``
    (default: the model's context)."""
    r = replica
    m, p, tp = r.model, r.precision, r.tp
    ctx_max = min(max_context or m.max_position_embeddings, m.max_position_embeddings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokens = _pow2_upto(1, max_tokens, half=True)
    batches = _pow2_upto(1, max_batch)
    contexts = [0] + _pow2_upto(16, ctx_max - 1)
    chunks = _pow2_upto(16, min(max_tokens, ctx_max))
    total = len(tokens) + len(batches) * len(contexts) + len(chunks) * len(contexts)
    done = [0]

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    mlp_rows, ar_rows = _mlp_rows(r, tokens, tick, simulate)
    files = [out / "mlp.csv"]
    _write(files[0], mlp_rows)
    if tp > 1 and ar_rows:
        files.append(out / "all_reduce.csv")
        _write(files[-1], sorted(ar_rows, key=lambda x: x["size"]))
    att_rows, step_rows = _attention_rows(r, batches, contexts, chunks, ctx_max, block_tokens,
                                          tick, simulate)
    files.append(out / "attention.csv")
    _write(files[-1], att_rows)
    files.append(out / "steps.csv")
    _write(files[-1], step_rows)
    meta = {"chip": r.chip.name, "model": m.name, "tensor_parallel": tp,
            "precision": {"weights": p.weights, "activations": p.activations, "kv": p.kv},
            "attention": r.attention, "time_unit": "ms (mlp, attention, all_reduce); s (steps)",
            "source": "diptych serve --export-profile (simulated, not measured)",
            "layout": "microsoft/vidur data/profiling (compute: mlp.csv, attention.csv; "
                      "network: all_reduce.csv); steps.csv is diptych's whole-step table",
            "files": [f.name for f in files]}
    files.append(out / "profile.json")
    atomic_text(files[-1], json.dumps(meta, indent=2))
    return files


#: Name suffixes of a GEMM's precision ops (sim/run/precision_ops.py)
_PRECISION_SUFFIXES = (".scales", ".rescale", ".dequant")


def _gemm_of(op: str) -> str:
    """The GEMM a precision op belongs to (``qkv_proj.dequant`` → ``qkv_proj``), else ``op``."""
    return op.rsplit(".", 1)[0] if op.endswith(_PRECISION_SUFFIXES) else op
