"""The lowering names its tensors: every op's bytes agree with the tensors it uses, every
program validates (every read has a producer or is an input), the op lists are unchanged, and
the names stay out of the ops (the engine memoises on shape)."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.workloads.ops import Gemm, VectorOp
from diptych.workloads.program import Program
from diptych.workloads import Precision, decode, load_model, prefill, train_step
from diptych.workloads.dataflow import Flow
from diptych.workloads.fused_attention import FusedAttention
from diptych.workloads.graph import program_pieces
from diptych.workloads.lower import _Ctx, layer_kinds, layer_ops, valid_tp_degrees
from diptych.workloads.params import kv_bytes_per_token, params_per_chip
from diptych.workloads.precision import FP8_RECIPES
from diptych.workloads.registry import builtin_names
from diptych.workloads.train import dp_buckets, layer_params_per_chip


def workloads(name: str):
    """Every phase of a model at every TP degree up to 8 (lowering only: fast)."""
    m = load_model(name)
    for tp in valid_tp_degrees(m, 8):
        for att in ("fused", "unfused"):
            yield prefill(m, 2, 48, tp=tp, attention=att)
            yield decode(m, 3, 300, tp=tp, attention=att)
            yield train_step(m, 4, 32, tp=tp, dp=2, attention=att, micro_batch=1)
        yield train_step(m, 2, 32, tp=tp, recompute=True)
        for recipe in FP8_RECIPES:     # the casts and amax passes name their tensors too
            yield train_step(m, 4, 32, tp=tp, dp=2, micro_batch=1, precision=Precision(
                linear="fp8", recipe=recipe))


def moved(uses, table) -> float:
    return sum(table[u.tensor].bytes * u.share for u in uses)


def check_bytes(w) -> list:
    """Each op's byte counts against the tensors it names (an independent sum over the
    block's tensor table): a GEMM's A, B and C operands; a vector op's, fused attention's
    reads and writes; a collective's output (a reduce-scatter's: its buffer ÷ the group)."""
    bad = []
    for b in w.blocks:
        assert b.access, f"{b.name} has no tensor names"
        table = {t.name: t for t in b.tensors + b.program_tensors}
        for op, a in zip(b.ops, b.access):
            if isinstance(op, Gemm):
                got = (moved(a.of(role="a"), table), moved(a.of(role="b"), table),
                       moved(a.of(mode="write") + a.of(mode="update"), table))
                want = (op.a_bytes, op.b_bytes, op.c_bytes)
            elif isinstance(op, VectorOp):
                reads = a.of(mode="read") + (a.of(mode="update") if a.rmw else ())
                got = (moved(reads, table), moved(a.of(mode="write") + a.of(mode="update"),
                                                  table))
                want = (op.read_bytes, op.write_bytes)
            elif isinstance(op, FusedAttention):
                got = (moved(a.of(mode="read"), table), moved(a.of(mode="write"), table))
                want = (op.read_bytes, op.write_bytes)
            else:   # a reduce-scatter's buffer is its input (NCCL's count): a 1/group output
                got = (moved(a.of(mode="write"), table),)
                want = (op.bytes / (op.group if op.kind == "reduce_scatter" else 1),)
            # a vector op's element count is rounded up to an integer: a few bytes
            if not all(abs(x - y) <= 1e-9 * max(x, y) + 8 for x, y in zip(got, want)):
                bad.append((b.name, op.name, got, want))
            assert all(u.share == 0 for u in a.of(role="dep"))
    return bad


@pytest.mark.parametrize("name", builtin_names())
def test_every_op_agrees_with_its_tensors_and_programs_validate(name):
    for w in workloads(name):
        assert check_bytes(w) == [], (name, w.phase, w.info["tp"])
        m = load_model(name)
        buckets = dp_buckets(m, Precision(), w.info["tp"]) if w.info.get("dp", 1) > 1 else None
        pieces = program_pieces(w, dp_buckets=buckets)     # Program() validates each
        assert all(isinstance(p.program, Program) for p in pieces)
        if w.phase != "train":
            # the op list is the program's nodes, in order, one to one
            (piece,) = pieces
            assert [n.payload for b in piece.program.blocks for n in b.nodes] == \
                [o for b in w.blocks for o in b.ops]


def test_weights_named_once_each_add_up_to_the_parameters():
    # llama-3 has no biases and no tied head: every parameter of a TP rank is one weight tensor
    m = load_model("llama-3-70b")
    p = Precision(weights="fp8")
    for tp in (1, 8):
        w = decode(m, 1, 100, precision=p, tp=tp)
        total = sum(b.repeat * t.bytes for b in w.blocks for t in b.tensors if t.kind == "weight")
        total += sum(t.bytes for t in {t for b in w.blocks for t in b.program_tensors
                                       if t.kind == "weight"})
        assert total == params_per_chip(m, tp) * 1.0


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_ranks_beyond_the_kv_heads_each_hold_one_head(tp):
    """Llama-3-8B with two KV heads: beyond two ranks each holds one K and one V head whole
    (replicated, as the lowering runs them: ``kv_heads_per_rank``), so a rank's parameters are
    its ``1/tp`` share of the rest plus ``2 · d · head_dim`` per layer, and the weights a
    decode step reads add up to them; before, the inventory split the heads as if they
    divided, short of the lowering by the replicated part."""
    m = dataclasses.replace(load_model("llama-3-8b"), kv_heads=2)
    d, hd, L = m.hidden_size, m.head_dim, m.layers
    kv = 2 * d * hd * L                      # one K and one V head's projections, every layer
    norms = 2 * d * L + d                    # every rank's whole: two per layer, the final
    rest = params_per_chip(m, 1) - norms - 2 * kv
    expect = norms + rest / tp + (2 * kv / tp if tp <= 2 else kv)
    assert params_per_chip(m, tp) == pytest.approx(expect, rel=1e-12)
    w = decode(m, 1, 100, precision=Precision(weights="fp8"), tp=tp)
    total = sum(b.repeat * t.bytes for b in w.blocks for t in b.tensors if t.kind == "weight")
    total += sum(t.bytes for t in {t for b in w.blocks for t in b.program_tensors
                                   if t.kind == "weight"})
    assert total == pytest.approx(params_per_chip(m, tp), rel=1e-12)


def test_decode_kv_cache_and_new_entries():
    m = load_model("llama-3-70b")
    B, ctx, tp = 4, 2048, 8
    w = decode(m, B, ctx, tp=tp)
    layers = next(b for b in w.blocks if b.name == "layers")
    t = {x.name: x for x in layers.tensors}
    per_layer = kv_bytes_per_token(m, "bf16") / m.layers / tp
    assert t["kv_cache"].bytes == B * (ctx - 1) * per_layer and t["kv_cache"].kind == "kv_cache"
    assert t["kv_new"].bytes == B * per_layer and t["kv_new"].live_out
    assert t["w_qkv"].bytes == 8192 * (64 // 8 + 2) * 128 * 2
    # gemma-2's sliding layers hold their window: 4095 earlier tokens at context 8192
    g = load_model("gemma-2-9b")
    w = decode(g, 1, 8192)
    sizes = {b.name: b.tensor("kv_cache").bytes for b in w.blocks if b.name.startswith("layers")}
    per = 2 * g.kv_heads * g.head_dim * 2
    assert sorted(sizes.values()) == [4095 * per, 8191 * per]


def test_layer_tensor_names_follow_the_model():
    names = lambda w: {t.name for b in w.blocks for t in b.tensors + b.program_tensors}
    llama = names(prefill(load_model("llama-3-8b"), 1, 16))
    assert {"x", "h_attn", "qkv", "qk_rot", "attn", "attn_out", "h1", "h_mlp", "gate_up", "act",
            "mlp_out", "y", "emb", "hidden", "logits", "w_qkv", "w_o", "w_gate_up",
            "w_down", "w_embed", "w_head"} <= llama
    gemma = names(prefill(load_model("gemma-2-9b"), 1, 16, tp=2))
    assert {"attn_red", "attn_pn", "mlp_pn", "logits_capped", "logits_all", "hidden[0]"} <= gemma
    assert "w_head" not in gemma                   # tied: the head reads w_embed
    assert {"qk_n", "w_qk_norm"} <= names(prefill(load_model("qwen3-8b"), 1, 16))
    moe = names(decode(load_model("mixtral-8x7b"), 2, 64))
    assert {"router_logits", "topk", "experts_act", "moe_out", "w_experts_gate_up"} <= moe
    mla = names(decode(load_model("deepseek-v3"), 1, 64))
    assert {"q_lat", "o_lat", "c_kv", "qk_pe", "w_kv_b", "shared_out"} <= mla


def test_names_stay_out_of_the_ops():
    # gemma-2's sliding and full layers share their projections' shapes: the same op records,
    # equal and hashing equal, so the engine simulates each shape once
    w = prefill(load_model("gemma-2-9b"), 1, 64)
    a, b = (bl for bl in w.blocks if bl.name.startswith("layers"))
    qa = next(o for o in a.ops if o.name == "qkv_proj")
    qb = next(o for o in b.ops if o.name == "qkv_proj")
    assert qa == qb and hash(qa) == hash(qb)
    assert {f.name for f in dataclasses.fields(Gemm)} == {
        "name", "m", "k", "n", "batch", "a_dtype", "b_dtype", "c_dtype", "acc_dtype",
        "b_is_weight", "tags",
        # residency (phase 2b): where operands live, set only when a plan is timed
        "a_source", "b_source", "c_dest", "resident_bytes",
        # a weight gradient accumulating into the gradient buffer (cuBLAS beta = 1)
        "c_accumulate"}
    # with or without a flow, a layer lowers to the same ops
    m = load_model("deepseek-v3")
    c = _Ctx(m, Precision(), 8, 2, 1, 0, "decode", past=99)
    for _, _, ck in layer_kinds(c):
        fl = Flow()
        assert layer_ops(ck, flow=fl) == layer_ops(ck)
        assert [o for o, _ in fl.records] == layer_ops(ck)


def test_backward_reads_forward_tensors_by_name():
    m = load_model("llama-3-8b")
    w = train_step(m, 4, 64, dp=2, micro_batch=1)          # two micro-batches per replica
    bwd = next(b for b in w.blocks if b.name == "layers.bwd")
    assert bwd.source == "layers" and bwd.carry[0].input == "d.y"
    assert (bwd.carry[0].output, bwd.carry[0].entry, bwd.carry[0].exit) == \
        ("d.x", "d.hidden", "d.emb")
    t = {x.name: x for x in bwd.tensors}
    assert t["g.w_qkv"].kind == "gradient" and t["w_qkv"].kind == "weight"
    dgrad = dict(zip((o.name for o in bwd.ops), bwd.access))["qkv_proj.dgrad"]
    assert dgrad.reads == ("w_qkv", "d.qkv") and dgrad.writes == ("d.h_attn",)
    wgrad = dict(zip((o.name for o in bwd.ops), bwd.access))["qkv_proj.wgrad"]
    assert wgrad.reads == ("h_attn", "d.qkv") and wgrad.updates == ("g.w_qkv",)
    pieces = program_pieces(w, dp_buckets=dp_buckets(m, Precision(), 1))
    assert [(p.times, p.label) for p in pieces] == [
        (1, "micro-batch"), (1, "last micro-batch + gradient all-reduce"), (1, "optimizer")]
    blk = next(b for b in pieces[0].program.blocks if b.name == "layers.bwd")
    assert blk.repeat == m.layers                  # per micro-batch
    imported = {i.local for i in blk.imports}
    assert {"x", "h_attn", "w_qkv", "qkv", "attn"} <= imported
    assert all(i.block == "layers" and i.reverse for i in blk.imports)


def test_dp_buckets_add_up_to_the_gradient_all_reduce():
    for name in ("llama-3-70b", "mixtral-8x7b", "gemma-2-9b", "deepseek-v3"):
        m = load_model(name)
        for tp in (1, 2):
            per = layer_params_per_chip(m, tp)
            layers = sum(len(ix) * per["moe" if s.moe else "dense"]
                         for s, ix in m.layer_groups())
            assert layers + per["embedding"] + per["head"] == pytest.approx(
                params_per_chip(m, tp), rel=1e-12)
            w = train_step(m, 2, 16, tp=tp, dp=2, micro_batch=1)
            b = dp_buckets(m, Precision(), tp)
            total = sum(b[bl.name] * bl.repeat for bl in w.blocks
                        if bl.stage == "forward")
            ar = next(o for o in w.blocks if o.name == "grad_all_reduce").ops[0]
            assert total == pytest.approx(ar.bytes, rel=1e-9)


def test_recompute_runs_behind_the_gradient():
    w = train_step(load_model("llama-3-8b"), 2, 32, recompute=True)
    (mb, opt) = program_pieces(w)
    blk = next(b for b in mb.program.blocks if b.name == "layers.bwd")
    names = [n.name for n in blk.nodes]
    assert names[0] == "attn_norm" and names.index("mlp_residual") < names.index(
        "mlp_residual.bwd")
    assert "d.y" in blk.nodes[0].reads               # the recomputation waits for d.y
    imported = {i.local for i in blk.imports}
    assert "x" in imported and "h_attn" not in imported   # recomputed locally
