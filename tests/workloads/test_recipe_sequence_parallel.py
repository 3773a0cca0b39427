"""FP8 delayed scaling under sequence parallelism (docs/precision.md, "Training recipes"): TE
1.x's row-parallel ``Linear`` casts its input row-wise only and transposes it in backward,
and casts its output gradient's sequence shard row-wise, transposing the gathered tensor
(TE v1.11 ``linear.py``, ``base.py grad_output_preprocess``). Checked against closed forms
from the model's shapes; everything else (column-parallel linears, GEMMs, BF16, tp = 1,
current scaling) is the same with and without sequence parallelism."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diptych.sim.cluster.layers import layer_ops
from diptych.workloads import Precision, load_model
from diptych.workloads.graph import Workload, program_pieces
from diptych.workloads.lower import SP_SHARD
from diptych.workloads.ops import Gemm
from diptych.workloads.program import Program
from diptych.workloads.train import _backward_block, train_forward

sys.path.insert(0, str(Path(__file__).parent))
from test_tensors import check_bytes  # noqa: E402

M = "llama-3-8b"
TP, SEQ = 2, 1024


def _fp8(recipe: str = "fp8-delayed") -> Precision:
    return Precision(linear="fp8", recipe=recipe)


def _layer(p: Precision, sp: bool, tp: int = TP):
    """(forward, backward) ops of the dense layer block of one 1 × SEQ micro-batch."""
    w = train_forward(load_model(M), 1, SEQ, precision=p, tp=tp, sequence_parallel=sp)
    b = next(b for b in w.blocks if b.name.startswith("layers"))
    return list(b.ops), list(_backward_block(b, p).ops)


def _recipe(ops) -> dict[str, tuple[float, float, float]]:
    return {o.name: (o.elements, o.read_bytes, o.write_bytes) for o in ops
            if "recipe" in o.tags}


def test_row_parallel_linears_cast_row_wise_and_transpose():
    m = load_model(M)
    t, h, f = SEQ, m.hidden_size, m.intermediate_size
    q = m.heads * m.head_dim
    ex = {"o_proj": t * q // TP, "down_proj": t * f // TP}   # the row-parallel inputs
    ey = t * h                                             # their output gradients, gathered
    fw, bw = _layer(_fp8(), sp=True)
    fw0, bw0 = _layer(_fp8(), sp=False)
    got, was = _recipe(fw + bw), _recipe(fw0 + bw0)
    for gemm, x in (("o_proj", "attn"), ("down_proj", "act")):
        e = ex[gemm]
        assert was[f"{x}.cast"] == (e, 2 * e, 2 * e)             # fp8_cast_transpose_fused
        assert got[f"{x}.cast"] == (e, 2 * e, e)                 # cast_to_fp8, row-wise
        assert got[f"{gemm}.x.transpose"] == (e, e, e)           # fp8_transpose in backward
        assert f"{gemm}.x.transpose" not in was
        assert was[f"{gemm}.dy.cast"] == (ey, 2 * ey, 2 * ey)
        assert got[f"{gemm}.dy.cast"] == (ey // TP, 2 * ey // TP, ey // TP)   # the shard
        assert got[f"{gemm}.dy.transpose"] == (ey, ey, ey)       # the gathered tensor
    # the column-parallel linears' casts and transposes are the same
    for k in ("qkv_proj.dy.cast", "gate_up_proj.dy.cast", "qkv_proj.x.transpose",
              "gate_up_proj.x.transpose"):
        assert got[k] == was[k]
    # bytes per layer: +1 B per row-parallel input element, 3/tp + 2 − 4 B per output-gradient
    # element of each row-parallel linear
    moved = sum(r + w for _, r, w in got.values()) - sum(r + w for _, r, w in was.values())
    assert moved == sum(ex.values()) + 2 * (3 * ey / TP + 2 * ey - 4 * ey)


def _unsharded(ops):
    """The ops not on the sequence shard (the norms and residual adds that are, and their
    backward, are checked in test_sequence_parallel_shard.py)."""
    return [o for o in ops if SP_SHARD not in o.tags]


def test_the_gemms_and_every_other_op_are_the_same():
    fw, bw = _layer(_fp8(), sp=True)
    fw0, bw0 = _layer(_fp8(), sp=False)

    def key(o):
        return {k: v for k, v in vars(o).items() if k != "tags"}
    gemms = [key(o) for o in fw + bw if isinstance(o, Gemm)]
    assert gemms == [key(o) for o in fw0 + bw0 if isinstance(o, Gemm)]
    rest = [o for o in _unsharded(fw + bw) if "recipe" not in o.tags
            and not isinstance(o, Gemm)]
    off = [o for o in fw0 + bw0 if "recipe" not in o.tags and not isinstance(o, Gemm)]
    assert rest == [o for o in off if o.name.split(".")[0] not in
                    {x.name.split(".")[0] for x in fw + bw if SP_SHARD in x.tags}]


@pytest.mark.parametrize("p,tp", [(Precision(), TP), (_fp8("fp8-current"), TP),
                                  (_fp8(), 1)])
def test_nothing_changes_without_te1_delayed_fp8_or_tensor_parallelism(p, tp):
    """The recipe's ops: the same with and without sequence parallelism (BF16, current
    scaling, tp = 1); at tp = 1 every op is."""
    on, off = _layer(p, sp=True, tp=tp), _layer(p, sp=False, tp=tp)
    assert [_unsharded(x) for x in on] == [[o for o in x if o.name.split(".")[0] not in
                                            {s.name.split(".")[0] for s in on[0]
                                             if SP_SHARD in s.tags}] for x in off]
    if tp == 1:
        assert on == off


def test_the_cluster_layer_ops_follow_the_plan():
    m, p = load_model(M), _fp8()
    kw = dict(phase="train", tp=TP, cp=1, ep=1, micro_batch=1, seq=SEQ)
    on = next(v for k, v in layer_ops(m, p, sequence_parallel=True, **kw).items()
              if k.startswith("layers"))
    off = next(v for k, v in layer_ops(m, p, sequence_parallel=False, **kw).items()
               if k.startswith("layers"))
    assert {o.name for o in on.backward} - {o.name for o in off.backward} == {
        "o_proj.dy.transpose", "down_proj.dy.transpose", "o_proj.x.transpose",
        "down_proj.x.transpose"}


@pytest.mark.parametrize("name", ["llama-3-8b", "gpt3-175b", "mixtral-8x7b"])
def test_the_casts_agree_with_their_tensors_and_the_program_validates(name):
    """Each op's bytes against the tensors it names (the shard cast writes 1/tp of the
    gathered FP8 gradient, the transposes read and write whole FP8 tensors), forward and
    backward, and the program validates."""
    p = _fp8()
    w = train_forward(load_model(name), 1, 64, precision=p, tp=TP, sequence_parallel=True)
    assert any(o.name.endswith(".dy.transpose") for b in w.blocks
               for o in _backward_block(b, p).ops)
    blocks = list(w.blocks) + [_backward_block(b, p) for b in reversed(w.blocks)]
    full = Workload("train", tuple(blocks), tokens=w.tokens, batch=w.batch, info=w.info)
    assert check_bytes(full) == []
    assert all(isinstance(x.program, Program) for x in program_pieces(full))
