"""Ring attention's bookkeeping outside the attention kernels (workloads/cp_attention.py):
bytes per rank against the passes of Transformer Engine v1.10's AttnFuncWithCPAndKVP2P listed
one by one, and its place in the training lowering."""

from __future__ import annotations

import dataclasses

import pytest

from diptych.workloads import Precision, load_model
from diptych.workloads.cp_attention import backward_bytes, forward_bytes
from diptych.workloads.graph import Workload
from diptych.workloads.train import _backward_block, train_forward

Q, O, KV = 3.0e6, 5.0e6, 7.0e6       # distinct sizes, so that a swapped term shows


def _sum(passes):
    return (sum(r for r, _ in passes), sum(w for _, w in passes))


def test_cp2_forward_passes_per_rank():
    # rank 0: cat(k, v); step 1 after its turn: q[1].contiguous(); zeros_like(q); the merge of
    # step 0 (whole: read o_0, read + write out) and of step 1 (half the queries)
    r0 = [(KV, KV), (Q / 2, Q / 2), (0, O), (2 * O, O), (O, O / 2)]
    # rank 1: cat(k, v); step 1 before its turn: kv[0].contiguous(); zeros; two whole merges
    r1 = [(KV, KV), (KV / 2, KV / 2), (0, O), (2 * O, O), (2 * O, O)]
    assert forward_bytes(2, 0, Q, O, KV) == pytest.approx(_sum(r0))
    assert forward_bytes(2, 1, Q, O, KV) == pytest.approx(_sum(r1))


def test_cp2_backward_passes_per_rank():
    # rank 0: copy_(kv) into the ring buffer; step 0: q[1], out[1], dout[1] .contiguous(),
    # dq[1].copy_(dq_), cat(dk_, dv_) whole, dkv.copy_; step 1 (its own chunk): dq[0].copy_ +
    # dq[1].add_, cat whole, dkv[0].add_ + dkv[1].copy_
    r0 = [(KV, KV), (Q / 2 + O, Q / 2 + O), (Q / 2, Q / 2), (KV, KV), (KV, KV),
          (Q / 2, Q / 2), (Q, Q / 2), (KV, KV), (KV, KV / 2), (KV / 2, KV / 2)]
    # rank 1: copy_(kv); step 0: kv[0].contiguous(), dq.copy_ whole, cat of the half,
    # dkv[0].copy_; step 1: dq.add_ whole, cat whole, dkv.add_ whole
    r1 = [(KV, KV), (KV / 2, KV / 2), (Q, Q), (KV / 2, KV / 2), (KV / 2, KV / 2),
          (2 * Q, Q), (KV, KV), (2 * KV, KV)]
    assert backward_bytes(2, 0, Q, O, KV) == pytest.approx(_sum(r0))
    assert backward_bytes(2, 1, Q, O, KV) == pytest.approx(_sum(r1))


def _layer(cp, phase="train"):
    m = load_model("llama-3-8b")
    fw = train_forward(m, 1, 8192, cp=cp)
    b = dataclasses.replace(next(x for x in fw.blocks if x.name == "layers"), repeat=1)
    return Workload(fw.phase, (b, _backward_block(b, Precision())), tokens=fw.tokens,
                    batch=fw.batch, info={"micro_batches": 1, "dp": 1, "steps": 1})


def test_training_layer_merges_its_ring_steps_and_accumulates_their_gradients():
    # the 8B row's rank: 4,096 tokens, 32 query heads and 8 KV heads of 128: Q = O = 33.6 MB,
    # K + V = 16.8 MB; the busier rank each way (rank 1 forward, rank 0 backward)
    q, kv = 4096 * 32 * 128 * 2, 2 * 4096 * 8 * 128 * 2
    w = _layer(2)
    fwd, bwd = w.blocks
    names = [o.name for o in fwd.ops]
    assert names[names.index("attention (fused)") + 1] == "attention.cp_merge"
    merge = fwd.ops[names.index("attention.cp_merge")]
    assert (merge.read_bytes, merge.write_bytes) == pytest.approx(
        (1.5 * kv + 4 * q, 1.5 * kv + 3 * q))
    bnames = [o.name for o in bwd.ops]
    assert bnames.index("attention.cp_merge.bwd") < bnames.index("attention (fused).bwd")
    back = bwd.ops[bnames.index("attention.cp_merge.bwd")]
    assert back.read_bytes + back.write_bytes == pytest.approx(6.5 * q + 10.5 * kv)
    # the dataflow: the kernels write the steps' outputs, the merge the layer's; backward the
    # other way round, every byte named
    acc = dict(zip(names, fwd.access))
    assert acc["attention (fused)"].writes[0] == "attn_steps"
    assert acc["attention.cp_merge"].writes == ("attn",)
    table = {t.name: t for t in bwd.tensors + bwd.program_tensors}
    a = dict(zip(bnames, bwd.access))["attention.cp_merge.bwd"]
    assert sum(table[u.tensor].bytes * u.share for u in a.of(mode="read")) == \
        pytest.approx(back.read_bytes)
    assert "d.attn_steps" in {u.tensor for u in dict(zip(bnames, bwd.access))[
        "attention (fused).bwd"].of(mode="read")}


def test_no_merge_without_context_parallelism():
    assert not any("cp_merge" in o.name for b in _layer(1).blocks for o in b.ops)
