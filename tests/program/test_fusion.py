"""Fusion: what fuses on a lowered layer (closed list), and the invariants of the pass on
random programs — every op survives exactly once, in dependency order inside its fused node;
the fused program validates; only tensors read solely inside one fused node disappear, and
nothing another block, the next repeat or the caller reads; FLOPs are conserved."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.workloads.ops import VECTOR_KINDS, Collective, Gemm, VectorOp
from diptych.sim.program import FusedOps, fuse_program
from diptych.workloads.program import Program
from diptych.sim.program.fusion import EPILOGUE_KINDS, PROLOGUE_KINDS
from progtest_helpers import random_program, random_program_with_imports


def with_payloads(p: Program, seed: int) -> Program:
    """``p`` with an op record on every node: a GEMM on the arrays, a vector op of a random
    kind (mostly fusable ones) on the vector unit, a collective on the links."""
    rng = random.Random(seed)
    blocks = []
    for b in p.blocks:
        nodes = []
        for n in b.nodes:
            if n.unit == "array":
                op = Gemm(name=n.name, m=rng.randint(1, 64), k=8, n=8)
            elif n.unit == "vector":
                kind = rng.choice(list(PROLOGUE_KINDS) * 2 + list(EPILOGUE_KINDS)
                                  + list(VECTOR_KINDS))
                op = VectorOp(name=n.name, kind=kind, elements=rng.randint(1, 99),
                              ops_per_element=rng.choice([1.0, 4.0]), read_bytes=10.0,
                              write_bytes=10.0)
            else:
                op = Collective(name=n.name, kind="all_reduce", bytes=10.0, group=2)
            nodes.append(replace(n, payload=op))
        blocks.append(replace(b, nodes=tuple(nodes)))
    return Program(p.name, blocks, p.tensors)


def members(node):
    pl = node.payload
    return pl.ops if isinstance(pl, FusedOps) else (pl,)


def external(p: Program, bi: int) -> set:
    b = p.blocks[bi]
    local = {t.name for t in b.tensors}
    out = {c.output for c in b.carry} | {t.name for t in b.tensors if t.live_out}
    out |= {t for n in b.nodes for t in n.writes if t not in local}
    out |= {i.tensor for bj in range(len(p.blocks)) for i in p.imported(bj).values()
            if i.block == b.name}
    return out


def check(p: Program, f: Program) -> int:
    """The invariants; returns the number of ops that were fused into another node."""
    fused = 0
    for bi, (b, fb) in enumerate(zip(p.blocks, f.blocks)):
        ids = lambda nodes: Counter(id(o) for n in nodes for o in members(n))
        assert ids(b.nodes) == ids(fb.nodes)                       # every op exactly once
        by_op = {id(n.payload): n for n in b.nodes}
        written = {t for n in b.nodes for t in n.writes}
        ext = external(p, bi)
        for n in fb.nodes:
            ms = [by_op[id(o)] for o in members(n)]
            fused += len(ms) - 1
            if len(ms) == 1:
                assert n == ms[0]
                continue
            pl = n.payload
            assert isinstance(pl.gemm, Gemm)
            assert all(v.kind in PROLOGUE_KINDS for v in pl.prologue)
            assert all(v.kind in EPILOGUE_KINDS for v in pl.epilogue)
            inside = {t for m in ms for t in m.writes}
            # the fused node reads what its members read from outside the group, writes a
            # subset of what they wrote, updates what they updated
            assert set(n.reads) == {t for m in ms for t in m.reads} - inside
            assert set(n.writes) <= inside and set(n.updates) == {
                t for m in ms for t in m.updates}
            for t in inside - set(n.writes):                  # a tensor that disappeared:
                assert t not in ext                           # nobody outside needs it
                readers = [m for m in b.nodes if t in m.reads + m.updates]
                assert all(any(m is x for x in ms) for m in readers)
            # members run in dependency order: each reads only what earlier members wrote
            seen = set()
            for m in ms:
                assert not (set(m.reads) & (inside - seen))
                seen |= set(m.writes)
        assert {t for n in fb.nodes for t in n.writes} <= written
    gf = lambda prog: sum(o.flops for b in prog.blocks for n in b.nodes for o in members(n)
                          if not isinstance(o, Collective))
    assert gf(p) == gf(f)
    return fused


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_fusion_invariants_on_random_programs(seed, imports):
    make = random_program_with_imports if imports else random_program
    p = with_payloads(make(seed, max_nodes=6, max_repeat=4, demands=False), seed)
    f = fuse_program(p)                               # validates, or raises
    check(p, f)
    assert fuse_program(f).blocks == f.blocks        # nothing left to fuse


def test_fusion_happens_on_random_programs():
    total = sum(check(p, fuse_program(p)) for p in (
        with_payloads(random_program(s, max_nodes=6, demands=False), s) for s in range(200)))
    assert total > 50


def test_llama_layer_fuses_as_documented():
    from diptych.workloads import decode, load_model, train_step
    from diptych.workloads.graph import program_pieces
    m = load_model("llama-3-70b")
    names = lambda w: [[n.name for n in b.nodes] for b in
                       fuse_program(program_pieces(w)[0].program).blocks]
    assert names(decode(m, 1, 2048))[1] == [
        "attn_norm+qkv_proj+rope+kv_write", "attention (fused)", "o_proj+attn_residual",
        "mlp_norm+gate_up_proj+swiglu", "down_proj+mlp_residual"]
    # with TP the all-reduces sit between the projections and the residual adds
    assert names(decode(m, 1, 2048, tp=8))[1] == [
        "attn_norm+qkv_proj+rope+kv_write", "attention (fused)", "o_proj", "attn_all_reduce",
        "attn_residual", "mlp_norm+gate_up_proj+swiglu", "down_proj", "mlp_all_reduce",
        "mlp_residual"]
    # training keeps what backward reads: h_attn and h_mlp are saved, so their norms do not
    # disappear into a prologue
    fwd = names(train_step(m, 1, 64))[1]
    assert fwd[:2] == ["attn_norm", "qkv_proj+rope"] and "o_proj+attn_residual+mlp_norm" in fwd
