"""Context and expert parallelism in the lowering (``_Ctx.cp``, ``_Ctx.ep``) against hand
counts: a context-parallel rank's queries, keys and K/V exchange; an expert-parallel rank's
experts, token-expert pairs and all-to-alls; their tensors and programs; bad degrees."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from diptych.workloads.ops import Collective, Gemm
from diptych.workloads.program import Program
from diptych.workloads import Precision, load_model, prefill, train_step
from diptych.workloads.graph import Workload, program_pieces
from diptych.workloads.lower import decode_mean
from diptych.workloads.moe import Routing, rank_load_factor
from diptych.workloads.train import _backward_block, train_forward

sys.path.insert(0, str(Path(__file__).parent))
from test_tensors import check_bytes  # noqa: E402

BF16 = 2


def layer_blocks(w):
    return [b for b in w.blocks if b.name.startswith("layers")]


def attention_macs(w) -> float:
    return sum(g.macs * b.repeat for b in layer_blocks(w) for o in b.ops
               if o.name == "attention (fused)" for g in o.gemms)


def test_context_parallel_rank_attends_the_whole_sequence():
    m = load_model("llama-3-8b")          # 32 heads, 8 KV heads of 128
    seq, cp = 4096, 4
    w = train_forward(m, 1, seq, cp=cp)
    q, hkv, dh = seq // cp, 8, 128
    assert w.tokens == q
    (blk,) = layer_blocks(w)
    (ag,) = [o for o in blk.ops if isinstance(o, Collective) and "cp" in o.tags]
    chunk = q * 2 * hkv * dh * BF16                      # this rank's K and V
    assert (ag.kind, ag.group, ag.bytes) == ("all_gather", cp, cp * chunk)
    fused = next(o for o in blk.ops if o.name == "attention (fused)")
    scores = fused.parts[0]
    assert (scores.m, scores.n) == (4 * q, math.ceil((seq + 1) / 2))   # g = 4 queries/KV head
    assert fused.saved_kv_bytes == pytest.approx(chunk)               # only its own chunk
    assert fused.read_bytes - scores.a_bytes == pytest.approx(cp * chunk)   # K, V streamed
    # the cp ranks together do the unsplit layer's attention work (the causal mean)
    whole = train_forward(m, 1, seq)
    assert cp * attention_macs(w) == pytest.approx(attention_macs(whole), rel=1e-3)


def test_context_parallel_sliding_layers_attend_their_window_over_the_whole_sequence():
    m = load_model("gemma-3-12b")         # sliding 1024 and full layers
    seq, cp = 8192, 4
    keys = train_forward(m, 1, seq, cp=cp).info["keys_per_query_by_block"]
    # sum_{i=1..8192} min(i, 1024) / 8192 and (8192 + 1) / 2
    sliding = (1024 * 1025 / 2 + (seq - 1024) * 1024) / seq
    assert sorted(keys.values()) == [math.ceil(sliding), math.ceil((seq + 1) / 2)]


def test_expert_parallel_rank_holds_its_experts_and_their_pairs():
    m = load_model("deepseek-v3")         # 256 routed experts, top-8, hidden 7168
    T, ep = 512, 8
    w = prefill(m, 1, T, ep=ep)
    blk = next(b for b in layer_blocks(w) if "moe" in b.name)
    experts = [o for o in blk.ops if isinstance(o, Gemm) and o.name.startswith("experts_gate")]
    pairs = sum(o.batch * o.m for o in experts)
    # the busiest rank: T·k pairs × the balanced router's sampling excess (tests/workloads/
    # test_moe_routing.py checks the factor against a simulated router)
    busiest = round(T * 8 * rank_load_factor(Routing(), 256, 8, T, ep))
    assert pairs == busiest and T * 8 < busiest < 1.05 * T * 8
    touched = 256 / ep * (1 - (1 - 8 / 256) ** (ep * T))   # expected local experts touched
    assert sum(o.batch for o in experts) == min(256 // ep, round(touched))
    a2a = [o for o in blk.ops if isinstance(o, Collective) and "ep" in o.tags]
    assert [(o.name, o.kind, o.group) for o in a2a] == [
        ("ep_dispatch", "all_to_all", ep), ("ep_combine", "all_to_all", ep)]
    assert all(o.bytes == busiest * 7168 * BF16 for o in a2a)
    # with tensor parallelism each rank dispatches its 1/tp share
    w2 = prefill(m, 1, T, ep=ep, tp=2)
    blk2 = next(b for b in layer_blocks(w2) if "moe" in b.name)
    assert next(o for o in blk2.ops if o.name == "ep_dispatch").bytes == busiest * 7168 * BF16 / 2


def test_expert_parallel_decode_touches_few_local_experts():
    m = load_model("deepseek-v3")
    ep, batch = 64, 16
    blk = next(b for b in layer_blocks(decode_mean(m, batch, 4096, 64, ep=ep))
               if "moe" in b.name)
    experts = [o for o in blk.ops if isinstance(o, Gemm) and o.name.startswith("experts_gate")]
    touched = 256 / ep * (1 - (1 - 8 / 256) ** (ep * batch))
    assert sum(o.batch for o in experts) == min(4, round(touched))
    assert sum(o.batch * o.m for o in experts) == round(
        batch * 8 * rank_load_factor(Routing(), 256, 8, batch, ep))


def test_no_parallelism_is_the_training_step_s_forward():
    m = load_model("mixtral-8x7b")
    fwd = [b for b in train_step(m, 2, 512, micro_batch=2, tp=2).blocks
           if b.stage == "forward"]
    assert list(train_forward(m, 2, 512, tp=2).blocks) == fwd


@pytest.mark.parametrize("name,ep", [("llama-3-8b", 1), ("deepseek-v3", 8),
                                     ("gpt-oss-20b", 4), ("llama-4-scout", 4)])
@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_parallel_blocks_agree_with_their_tensors_and_programs_validate(name, ep, attention):
    m = load_model(name)
    for w in (train_forward(m, 2, 256, tp=2, cp=4, ep=ep, attention=attention),
              prefill(m, 1, 256, tp=2, cp=2, ep=ep, attention=attention),
              decode_mean(m, 8, 1000, 64, tp=2, ep=ep, attention=attention)):
        assert check_bytes(w) == [], (name, w.phase)
        assert all(isinstance(p.program, Program) for p in program_pieces(w))


def _forward_and_backward(w, p=Precision()):
    """The training step's micro-batch of a context-parallel forward (``train_forward``):
    its blocks, then their backward blocks, as ``train_step`` derives them."""
    blocks = list(w.blocks) + [_backward_block(b, p) for b in reversed(w.blocks)]
    return Workload("train", tuple(blocks), tokens=w.tokens, batch=w.batch, info=w.info)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_context_parallel_backward_agrees_with_its_tensors(tp, attention):
    m = load_model("llama-3-8b")          # 32 heads, 8 KV heads of 128
    seq, cp = 512, 2
    w = _forward_and_backward(train_forward(m, 1, seq, tp=tp, cp=cp, attention=attention))
    assert check_bytes(w) == [], (tp, attention)
    assert all(isinstance(p.program, Program) for p in program_pieces(w))
    # hand counts: this rank's K+V chunk; the backward ring sums every rank's dK/dV onto
    # it (a reduce-scatter of the gathered buffer: the all-gather's adjoint)
    q_len, hkv, dh = seq // cp, 8 // tp, 128
    chunk = q_len * 2 * hkv * dh * BF16
    bwd = next(b for b in w.blocks if b.name == "layers.bwd")
    (rs,) = [o for o in bwd.ops if isinstance(o, Collective) and "cp" in o.tags]
    assert (rs.kind, rs.group, rs.bytes) == ("reduce_scatter", cp, cp * chunk)
    if attention == "fused":
        # the backward kernels read every step's K/V chunk and write each step's dK/dV
        # (TE's AttnFuncWithCPAndKVP2P.backward), not only the chunk the rank keeps
        fwd = next(o for o in layer_blocks(w)[0].ops if o.name == "attention (fused)")
        back = next(o for o in bwd.ops if o.name == "attention (fused).bwd")
        q = o = q_len * (32 // tp) * dh * BF16
        stats = 2 * 4 * (32 // tp) * q_len
        assert fwd.saved_kv_bytes == chunk
        assert (back.read_bytes, back.write_bytes) == (q + cp * chunk + 2 * o + stats,
                                                       q + cp * chunk)


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma-3-12b", "gpt-oss-20b"])
def test_context_parallel_backward_of_other_attentions_agrees_with_its_tensors(name):
    # MLA (V a slice of K's latent), sliding windows, attention sinks
    m = load_model(name)
    for tp in (1, 2):
        for attention in ("fused", "unfused"):
            w = _forward_and_backward(train_forward(m, 1, 256, tp=tp, cp=2,
                                                    attention=attention))
            assert check_bytes(w) == [], (name, tp, attention)


def test_bad_degrees_name_the_field():
    with pytest.raises(ValueError, match=r"ep=3 must divide the number of experts \(256"):
        prefill(load_model("deepseek-v3"), 1, 64, ep=3)
    with pytest.raises(ValueError, match="ep=2 needs a mixture-of-experts model"):
        prefill(load_model("llama-3-8b"), 1, 64, ep=2)
    with pytest.raises(ValueError, match=r"cp=3 must divide seq_len \(1024\)"):
        train_forward(load_model("llama-3-8b"), 1, 1024, cp=3)
    with pytest.raises(ValueError, match="cp must be a positive integer, not 0"):
        prefill(load_model("llama-3-8b"), 1, 64, cp=0)
    with pytest.raises(ValueError, match="ep must be a positive integer"):
        decode_mean(load_model("llama-3-8b"), 1, 64, 4, ep=-1)


def test_precision_reaches_the_collectives():
    m = load_model("mixtral-8x7b")
    w = prefill(m, 1, 128, ep=2, cp=2, precision=Precision(weights="fp8", activations="fp8",
                                                            kv="fp8"))
    colls = [o for b in layer_blocks(w) for o in b.ops if isinstance(o, Collective)]
    assert {o.name for o in colls} == {"cp_kv_all_gather", "ep_dispatch", "ep_combine"}
    disp = next(o for o in colls if o.name == "ep_dispatch")
    # fp8 activations, 1 byte; the busiest rank's pairs (64 tokens per rank, top-2 of 8)
    assert disp.bytes == round(64 * 2 * rank_load_factor(Routing(), 8, 2, 64, 2)) * 4096 * 1
