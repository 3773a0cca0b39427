"""Sequence parallelism's sharded ops (docs/workloads.md, "Tensor and sequence parallelism"):
under Megatron's ``sequence_parallel`` the layer's norms and residual adds, and the final
norm, run on the rank's ``s/tp`` tokens, the embedding reduce-scatters (no learned
positions), the output layer all-gathers its input; under TE 1.x delayed scaling the
tensor-parallel all-gathers move FP8. Checked against closed forms from the model's shapes;
nothing changes at tp = 1 or with sequence parallelism off."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diptych.sim.run.tp_overlap import gather_share
from diptych.workloads import Precision, load_model
from diptych.workloads.graph import Workload, program_pieces
from diptych.workloads.lower import SP_SHARD
from diptych.workloads.memory import layer_saved_bytes, replicated_saved_bytes
from diptych.workloads.ops import Collective
from diptych.workloads.program import Program
from diptych.workloads.train import _backward_block, backward_ops, train_forward

sys.path.insert(0, str(Path(__file__).parent))
from test_tensors import check_bytes  # noqa: E402

SEQ = 512
#: the ops of a layer on the residual stream, T·d elements each without sequence parallelism
STREAM = ("attn_norm", "attn_residual", "mlp_norm", "mlp_residual")


def _blocks(name: str, tp: int, sp: bool, p: Precision = Precision(), seq: int = SEQ):
    w = train_forward(load_model(name), 1, seq, precision=p, tp=tp, sequence_parallel=sp)
    return {b.name: b for b in w.blocks}


def _ops(block) -> dict:
    return {o.name: o for o in block.ops}


@pytest.mark.parametrize("tp", [2, 4])
def test_the_stream_ops_run_on_the_sequence_shard(tp):
    m = load_model("llama-3-70b")
    td = SEQ * m.hidden_size
    for sp, rows in ((True, td // tp), (False, td)):
        b = _blocks("llama-3-70b", tp, sp)
        layer, head = _ops(b["layers"]), _ops(b["head"])
        for n in STREAM:
            assert layer[n].elements == rows, n
            assert (SP_SHARD in layer[n].tags) == sp
        assert head["final_norm"].elements == rows
        # the norm's bytes: its shard in and out (BF16), one weight vector
        assert layer["attn_norm"].read_bytes == 2 * rows + 2 * m.hidden_size
        assert layer["attn_norm"].write_bytes == 2 * rows
        assert layer["attn_residual"].read_bytes == 4 * rows
        # their backward ops too (the norm's backward on the reduce-scattered gradient)
        for n in STREAM:
            (bwd,) = backward_ops(layer[n], Precision())
            assert bwd.elements == rows
        bwd = _ops(_backward_block(b["layers"], Precision()))
        assert bwd["attn_norm.bwd"].elements == rows


def test_the_rest_of_the_layer_is_the_same():
    on, off = _blocks("llama-3-70b", 4, True), _blocks("llama-3-70b", 4, False)
    rest = [o for o in on["layers"].ops if o.name not in STREAM]
    assert rest == [o for o in off["layers"].ops if o.name not in STREAM]
    # RoPE runs inside attention over the whole sequence of the rank's heads: not sharded
    m = load_model("llama-3-70b")
    rope = _ops(on["layers"])["rope"]
    assert rope.elements == SEQ * (m.heads + m.kv_heads) // 4 * m.head_dim


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-30b-a3b", "gpt3-175b"])
def test_nothing_changes_at_tp1_or_without_sequence_parallelism(name):
    assert _blocks(name, 1, True) == _blocks(name, 1, False)
    off = _blocks(name, 2, False)
    assert not any(SP_SHARD in o.tags for b in off.values() for o in b.ops)
    assert "embed_all_reduce" in _ops(off["embedding"])
    assert not any(isinstance(o, Collective) for o in off["head"].ops)


def test_the_embedding_reduce_scatters_unless_positions_are_learned():
    llama = _ops(_blocks("llama-3-8b", 4, True)["embedding"])
    rs = llama["embed_reduce_scatter"]
    m = load_model("llama-3-8b")
    assert (rs.kind, rs.bytes, rs.group) == ("reduce_scatter", SEQ * m.hidden_size * 2, 4)
    assert "embed_all_reduce" not in llama
    # its adjoint is an all-gather (Megatron's _ReduceScatterToSequenceParallelRegion)
    assert backward_ops(rs, Precision())[0].kind == "all_gather"
    gpt = _ops(_blocks("gpt3-175b", 4, True)["embedding"])       # learned positions
    assert gpt["embed_all_reduce"].kind == "all_reduce"
    assert gpt["embed_positions"].elements == SEQ * load_model("gpt3-175b").hidden_size


def test_the_output_layer_gathers_its_input():
    m = load_model("llama-3-8b")
    head = _ops(_blocks("llama-3-8b", 4, True)["head"])
    ag = head["head_all_gather"]
    assert (ag.kind, ag.bytes, ag.group, ag.tags) == ("all_gather", SEQ * m.hidden_size * 2,
                                                      4, ("tp", "wgrad_regather"))
    assert head["lm_head"].m == SEQ                  # the whole sequence after the gather


def test_a_sharded_norm_is_not_split_again_and_the_layer_stores_the_same():
    """Sequence parallelism stores a norm's input ÷ tp (memory.layer_saved_bytes): the
    sharded norm already reads its shard, so only its weight vector is split; the layer's
    saved bytes are those of the unsharded lowering with the split applied."""
    m = load_model("llama-3-8b")
    on, off = _blocks("llama-3-8b", 4, True)["layers"], _blocks("llama-3-8b", 4, False)["layers"]
    norm = _ops(on)["attn_norm"]
    assert replicated_saved_bytes([norm], m.hidden_size, SEQ) == 2 * m.hidden_size
    assert replicated_saved_bytes([_ops(off)["attn_norm"]], m.hidden_size, SEQ) == (
        2 * SEQ * m.hidden_size + 2 * m.hidden_size)
    want = layer_saved_bytes(off, 1.0, m.hidden_size, SEQ, 4)
    assert layer_saved_bytes(on, 1.0, m.hidden_size, SEQ, 4) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("name", ["gemma-3-27b", "deepseek-v2-lite", "qwen3-next-80b-a3b",
                                  "gpt3-175b"])
def test_the_shards_agree_with_their_tensors_and_the_program_validates(name):
    """Each op's bytes against the shares of the tensors it names, forward and backward
    (sandwich norms and a scaled embedding, MLA, linear attention, learned positions),
    BF16 and FP8."""
    for p in (Precision(), Precision(linear="fp8", recipe="fp8-delayed")):
        w = train_forward(load_model(name), 1, 64, precision=p, tp=2, sequence_parallel=True)
        assert any(SP_SHARD in o.tags for b in w.blocks for o in b.ops)
        blocks = list(w.blocks) + [_backward_block(b, p) for b in reversed(w.blocks)]
        full = Workload("train", tuple(blocks), tokens=w.tokens, batch=w.batch, info=w.info)
        assert check_bytes(full) == []
        assert all(isinstance(x.program, Program) for x in program_pieces(full))


def test_fp8_delayed_gathers_move_one_byte_per_element():
    fp8 = Precision(linear="fp8", recipe="fp8-delayed")
    for p, sp, want in ((fp8, True, 0.5), (fp8, False, 1.0), (Precision(), True, 1.0),
                        (Precision(linear="fp8", recipe="fp8-current"), True, 1.0)):
        layer = _blocks("llama-3-8b", 4, sp, p)["layers"]
        names = {o.name for o in layer.ops if isinstance(o, Collective)}
        for sub in ("attn", "mlp"):
            assert gather_share(layer.ops, names, sub, p, sp) == want, (p.recipe, sp, sub)
