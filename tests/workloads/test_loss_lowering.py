"""The LM loss and the embedding table's gradient as Megatron-Core and PyTorch run them
(workloads/loss.py, workloads/embedding_grad.py): bytes per pass against closed forms from
the code's shapes (Megatron-LM core_r0.9.0 fused_cross_entropy.py; PyTorch's embedding
backward; Apex DistributedFusedAdam's gradient copy)."""

from __future__ import annotations

import pytest

from diptych.workloads import load_model
from diptych.workloads.train import train_forward, train_step

M = load_model("llama-3-8b")          # vocabulary 128,256, hidden 4,096


def _ops(w, stage, prefix):
    return [(b, o) for b in w.blocks if b.stage == stage for o in b.ops
            if o.name.startswith(prefix)]


@pytest.mark.parametrize("tp,cp", [(1, 2), (4, 1)])
def test_loss_passes_move_the_bytes_of_megatrons_fused_cross_entropy(tp, cp):
    # the 8B row's rank: 4,096 tokens (8k sequence, CP2) × the vocabulary shard; BF16 logits.
    # Forward: .float() + max (2 in, 4 out), sub + exp + sum (4, 4), div (4, 4; + the FP32
    # loss per row); backward: read the FP32 softmax, write it back and the BF16 gradient
    # (4 + the loss gradient per row; 4 + 2)
    rows, v = 8192 // cp, -(-128_256 // tp)
    w = train_step(M, 1, 8192 // cp, tp=tp, micro_batch=1)
    fwd = _ops(w, "forward", "cross_entropy")
    bwd = _ops(w, "backward", "cross_entropy")
    assert [o.name for _, o in fwd] == ["cross_entropy.max", "cross_entropy.exp",
                                        "cross_entropy.norm"]
    assert [o.name for _, o in bwd] == ["cross_entropy.bwd"]
    n = rows * v
    assert [(o.read_bytes, o.write_bytes) for _, o in fwd] == [
        (2 * n, 4 * n), (4 * n, 4 * n), (4 * n, 4 * n + 4 * rows)]
    (_, b), = bwd
    assert (b.read_bytes, b.write_bytes) == (4 * n + 4 * rows, 6 * n)
    # 32 bytes per logit in all (the one BF16 pass it replaces moved 6: read, then read +
    # write in backward): 4,096 × 128,256 logits, 13.7 GB more per micro-batch at tp 1
    total = sum(o.read_bytes + o.write_bytes for _, o in fwd + bwd)
    assert total == pytest.approx(32 * n, rel=1e-4)


def test_loss_gradient_feeds_the_lm_heads_backward_and_the_softmax_is_saved():
    w = train_step(M, 1, 512, micro_batch=1)
    head = next(b for b in w.blocks if b.name == "head.bwd")
    acc = dict(zip((o.name for o in head.ops), head.access))
    assert "d.logits" in acc["cross_entropy.bwd"].writes
    assert {"ce_softmax", "d.loss"} <= {u.tensor for u in acc["cross_entropy.bwd"].uses
                                       if u.mode == "read"}
    for g in ("lm_head.dgrad", "lm_head.wgrad"):
        assert "d.logits" in {u.tensor for u in acc[g].uses if u.mode == "read"}
    # what the head keeps for backward is the FP32 softmax (memory.saved_bytes)
    from diptych.workloads.memory import saved_bytes
    fwd = next(b for b in train_forward(M, 1, 512).blocks if b.name == "head")
    norm_in, head_in = 512 * 4096 * 2 + 4096 * 2, 512 * 4096 * 2
    assert saved_bytes(fwd) == norm_in + head_in + 512 * 128_256 * 4


@pytest.mark.parametrize("tp", [1, 8])
def test_embedding_backward_zeroes_scatters_and_accumulates_the_whole_table(tp):
    # PyTorch zeroes the (vocab / tp) × d gradient, scatters the tokens' rows into it, and
    # the optimizer adds it into the accumulated gradient: BF16 throughout
    T, d, v = 1024, 4096, -(-128_256 // tp)
    w = train_step(M, 1, T, tp=tp, micro_batch=1)
    ops = [o for b in w.blocks if b.name == "embedding.bwd" for o in b.ops]
    names = [o.name for o in ops]
    assert names[-3:] == ["embed_tokens.bwd.zero", "embed_tokens.bwd",
                          "embed_tokens.bwd.accumulate"]
    zero, scatter, acc = ops[-3:]
    assert (zero.read_bytes, zero.write_bytes) == (0, v * d * 2)
    assert (scatter.read_bytes, scatter.write_bytes) == (T * d * 2, T * d * 2)
    assert (acc.read_bytes, acc.write_bytes) == (2 * v * d * 2, v * d * 2)


def test_cluster_layers_charge_the_same_embedding_backward():
    # the cluster step's per-layer ops (sim/cluster/layers.py) run the same backward passes
    from diptych.sim.cluster.layers import layer_ops
    from diptych.workloads import Precision
    lo = layer_ops(M, Precision(), phase="train", tp=1, cp=1, ep=1, micro_batch=1, seq=1024)
    w = train_step(M, 1, 1024, micro_batch=1)
    want = [o for b in w.blocks if b.name == "embedding.bwd" for o in b.ops]
    assert list(lo["embedding"].backward) == want
    assert [o.name for o in lo["head"].backward][0] == "cross_entropy.bwd"


def test_unfused_loss_moves_the_bytes_of_megatrons_eager_cross_entropy():
    # cross_entropy_loss_fusion false (Megatron-Core's default; the GPT-3 and Grok-1 configs):
    # core_r0.9.0 VocabParallelCrossEntropy, one PyTorch kernel per operation. Forward:
    # .float() (2 in, 4 out), max (4 in, the row max), -= max (4, 4), exp (4, 4), sum (4 in,
    # the row sum), div_ (4, 4; + the FP32 loss per row); backward: mul_ (4 + the loss
    # gradient per row, 4), the cast's backward (4, 2)
    from diptych.workloads import Precision
    rows, v = 2048, 128_256
    w = train_step(M, 1, rows, micro_batch=1, precision=Precision(cross_entropy="unfused"))
    fwd = _ops(w, "forward", "cross_entropy")
    bwd = _ops(w, "backward", "cross_entropy")
    assert [o.name for _, o in fwd] == ["cross_entropy.cast", "cross_entropy.max",
                                        "cross_entropy.sub", "cross_entropy.exp",
                                        "cross_entropy.sum", "cross_entropy.div"]
    assert [o.name for _, o in bwd] == ["cross_entropy.bwd", "cross_entropy.cast.bwd"]
    n = rows * v
    assert [(o.read_bytes, o.write_bytes) for _, o in fwd] == [
        (2 * n, 4 * n), (4 * n, 4 * rows), (4 * n, 4 * n), (4 * n, 4 * n), (4 * n, 4 * rows),
        (4 * n, 4 * n + 4 * rows)]
    assert [(o.read_bytes, o.write_bytes) for _, o in bwd] == [
        (4 * n + 4 * rows, 4 * n), (4 * n, 2 * n)]
    total = sum(o.read_bytes + o.write_bytes for _, o in fwd + bwd)
    assert total == pytest.approx(52 * n, rel=1e-4)       # 20 B per logit more than fused
    # the eager path's dataflow: the row reductions order the passes after them, the
    # multiply writes the softmax back and the cast's backward the logits' gradient
    head = next(b for b in w.blocks if b.name == "head")
    acc = dict(zip((o.name for o in head.ops), head.access))
    assert ("ce_max", "dep") in {(u.tensor, u.role) for u in acc["cross_entropy.sub"].uses}
    assert ("ce_sum", "dep") in {(u.tensor, u.role) for u in acc["cross_entropy.div"].uses}
    hb = next(b for b in w.blocks if b.name == "head.bwd")
    acc = dict(zip((o.name for o in hb.ops), hb.access))
    assert "d.logits" in acc["cross_entropy.cast.bwd"].writes
    assert "d.logits" not in acc["cross_entropy.bwd"].writes


def test_an_unknown_loss_implementation_is_refused_naming_it():
    from diptych.sim.run import Scenario
    from diptych.workloads import Precision
    for make in (lambda: Precision(cross_entropy="liger"),
                 lambda: Scenario.of(phase="train", seq=128, cross_entropy="liger")):
        with pytest.raises(ValueError, match="cross_entropy must be one of fused, unfused, "
                                             "not 'liger'"):
            make()

