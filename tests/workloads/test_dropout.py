"""Dropout as Megatron-Core and its attention kernels run it (workloads/dropout.py): the
bias-dropout-add's bool mask and its backward kernel against byte counts computed by hand
from PyTorch's ``native_dropout`` decomposition (``bool_mask = rand_like(x) > p``, ``res =
bool_mask * x * scale``; backward ``grad · mask · scale``), the saved masks against
Korthikanti et al.'s ``2·s·b·h``, the attention kernel's measured share, and the eager
validation of the probabilities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.tools.cli import main
from diptych.workloads import load_model
from diptych.workloads.dropout import check_probability
from diptych.workloads.memory import saved_bytes
from diptych.workloads.precision import Precision
from diptych.workloads.train import train_forward, train_step

M = load_model("gpt3-175b")           # hidden 12,288, 96 heads of 128
D = 12288


def _step(seq, tp=1, sp=False, **drop):
    return train_step(M, 1, seq, tp=tp, micro_batch=1, sequence_parallel=sp,
                      precision=Precision(**drop))


def _layer(w, stage):
    return next(b for b in w.blocks if b.stage == stage and b.name not in ("embedding",
                                                                             "head",
                                                                             "embedding.bwd",
                                                                             "head.bwd"))


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_bias_dropout_add_writes_its_mask_and_its_backward_reads_it(tp, sp):
    # 512 tokens × 12,288 per layer, ÷ 4 on the rank's sequence shard under SP; BF16 (a = 2).
    # Forward: read x and the residual (2a), write the sum and the bool mask (a + 1).
    # Backward: a kernel of its own, grad·mask·scale: read the gradient and the mask (a + 1),
    # write the sub-block output's gradient (a); then the stream's accumulation as at p = 0
    # (read 2a, write a).
    e = 512 * D // (4 if sp else 1)
    w0, w = _step(512, tp, sp), _step(512, tp, sp, hidden_dropout=0.1)
    f0, f = _layer(w0, "forward"), _layer(w, "forward")
    adds = [o for o in f.ops if o.name.endswith("_residual")]
    assert [o.name for o in adds] == ["attn_residual", "mlp_residual"]
    for o in adds:
        assert (o.read_bytes, o.write_bytes) == (4 * e, 3 * e)
        assert "dropout" in o.tags
    assert [(o.read_bytes, o.write_bytes) for o in f0.ops if o.name.endswith("_residual")] \
        == [(4 * e, 2 * e)] * 2
    b0, b = _layer(w0, "backward"), _layer(w, "backward")
    drops = [o for o in b.ops if o.name.endswith(".dropout_bwd")]
    assert [o.name for o in drops] == ["mlp_residual.dropout_bwd", "attn_residual.dropout_bwd"]
    for o in drops:
        assert (o.read_bytes, o.write_bytes) == (3 * e, 2 * e)
    acc = [(o.read_bytes, o.write_bytes) for o in b.ops if o.name.endswith("_residual.bwd")]
    assert acc == [(4 * e, 2 * e)] * 2
    # lane ops per element (review finding 2): the add is 1, the dropout's compare and scale
    # 2 more in the forward; its backward grad·mask·scale 2 in dropout_bwd; the add's own
    # backward 2 as at p = 0 (not 2 × 3 = 6) and untagged, so the dropout is charged once
    assert [o.ops_per_element for o in adds] == [3.0, 3.0]
    assert [o.ops_per_element for o in drops] == [2.0, 2.0]
    bwds = [o for o in b.ops if o.name.endswith("_residual.bwd")]
    assert [o.ops_per_element for o in bwds] == [2.0, 2.0]
    assert all("dropout" not in o.tags for o in bwds)
    # nothing else moves: the step's other ops are the p = 0 step's
    rest = lambda blk: [o for o in blk.ops if "_residual" not in o.name]
    assert rest(b) == rest(b0) and rest(f) == rest(f0)
    # per layer 2 × (1 + 5) B per element more than at p = 0
    vec = lambda *blks: sum(o.read_bytes + o.write_bytes for blk in blks for o in blk.ops
                            if "_residual" in o.name)
    assert vec(f, b) - vec(f0, b0) == 12 * e


def test_the_dropout_backward_reads_the_saved_mask_and_feeds_the_sub_blocks_gradient():
    w = _step(256, hidden_dropout=0.1)
    b = _layer(w, "backward")
    acc = dict(zip((o.name for o in b.ops), b.access))
    reads = {u.tensor for u in acc["mlp_residual.dropout_bwd"].uses if u.mode == "read"}
    writes = acc["mlp_residual.dropout_bwd"].writes
    assert "mlp_dropout_mask" in reads and any(t.startswith("d.") for t in writes)
    # the mask is a forward tensor the backward imports, 1 B per element
    masks = {t.name: t.bytes for t in b.tensors if t.name.endswith("_dropout_mask")}
    assert masks == {"attn_dropout_mask": 256 * D, "mlp_dropout_mask": 256 * D}


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_saved_masks_are_korthikantis_2sbh(tp, sp):
    # two bool masks per layer: 2·s·b·h bytes, ÷ tp on the sequence shard
    s = 1024
    fwd = lambda **d: _layer(train_forward(M, 1, s, tp=tp, sequence_parallel=sp,
                                           precision=Precision(**d)), "forward")
    extra = saved_bytes(fwd(hidden_dropout=0.1)) - saved_bytes(fwd())
    assert extra == 2 * s * D / (tp if sp else 1)


def test_attention_dropout_tags_the_kernel_and_moves_no_bytes():
    w0, w = _step(512), _step(512, attention_dropout=0.1)
    for stage in ("forward", "backward"):
        a0 = [o for o in _layer(w0, stage).ops if "attn" in o.tags and hasattr(o, "calls")]
        a = [o for o in _layer(w, stage).ops if "attn" in o.tags and hasattr(o, "calls")]
        assert len(a) == 1 and "dropout" in a[0].tags and "dropout" not in a0[0].tags
        assert (a[0].read_bytes, a[0].write_bytes) == (a0[0].read_bytes, a0[0].write_bytes)


@pytest.mark.parametrize("kernel,table,share", [("default", "attention", 0.034),
                                                ("fa2", "attention_fa2", 0.047)])
def test_a_dropping_attention_kernel_takes_its_measured_share_longer(kernel, table, share):
    # the tile time × (1 + dropout_cost): TE #3312 (cuDNN, H200) 0.614 / 0.594 ms; TE #3313
    # (FA2 2.7.4, GB200) 0.728 / 0.695 ms
    import dataclasses

    from diptych.sim.api import simulate
    from diptych.sim.run.attention import fused_stats
    chip = load_chip("h100")
    chip = dataclasses.replace(chip, attention=getattr(chip, table))
    assert chip.attention.dropout_cost == share
    assert share == pytest.approx({"attention": 0.614 / 0.594,
                                   "attention_fa2": 0.728 / 0.695}[table] - 1, abs=5e-4)
    w = _step(2048, attention_dropout=0.1)
    for stage in ("forward", "backward"):
        op = next(o for o in _layer(w, stage).ops if "attn" in o.tags and hasattr(o, "calls"))
        plain = dataclasses.replace(op, tags=tuple(t for t in op.tags if t != "dropout"))
        t, t0 = (fused_stats(x, chip, simulate).compute_seconds for x in (op, plain))
        assert t == pytest.approx(t0 * (1 + share), rel=1e-12)


@pytest.mark.parametrize("field,value", [("hidden_dropout", 1.0), ("hidden_dropout", -0.1),
                                         ("attention_dropout", math.nan),
                                         ("attention_dropout", "0.1"),
                                         ("hidden_dropout", True),
                                         ("hidden_dropout", np.bool_(True)),
                                         ("attention_dropout", np.float64(1.0)),
                                         ("hidden_dropout", np.float32("nan"))])
def test_a_probability_outside_0_1_is_refused_naming_it(field, value):
    match = f"{field} must be a probability in \\[0, 1\\), not"
    with pytest.raises(ValueError, match=match):
        Scenario.of(phase="train", seq=128, **{field: value})
    with pytest.raises(ValueError, match=match):
        Precision(**{field: value})


@pytest.mark.parametrize("value", [np.float32(0.1), np.float64(0.1), np.int64(0)])
def test_a_numpy_probability_is_taken_as_its_float(value):
    # review finding 9: numbers.Real, not (int, float); stored as a float (JSON, hashing)
    s = Scenario.of(phase="train", seq=128, hidden_dropout=value, attention_dropout=value)
    p = Precision(hidden_dropout=value, attention_dropout=value)
    for x in (s.hidden_dropout, s.attention_dropout, p.hidden_dropout, p.attention_dropout):
        assert type(x) is float and x == float(value)
    assert check_probability("hidden_dropout", np.float32(0.5)) == 0.5


def test_dropout_is_refused_outside_training_and_attention_dropout_unfused():
    with pytest.raises(ValueError, match="hidden_dropout=0.1 applies to training"):
        Scenario.of(phase="prefill", prompt=128, hidden_dropout=0.1)
    with pytest.raises(ValueError, match="attention_dropout=0.1 is modelled in the fused"):
        Scenario.of(phase="train", seq=128, attention="unfused", attention_dropout=0.1)
    Scenario.of(phase="train", seq=128, attention="unfused", hidden_dropout=0.1)


@pytest.mark.parametrize("args,needle", [(["--hidden-dropout", "1"], "hidden_dropout"),
                                         (["--attention-dropout", "-0.5"], "attention_dropout"),
                                         (["--phase", "decode", "--prompt", "64",
                                           "--hidden-dropout", "0.1"], "hidden_dropout")])
def test_cli_exits_2_naming_the_bad_probability(args, needle):
    base = ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "train", "--seq",
            "128"]
    r = CliRunner().invoke(main, base + args)
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert needle in r.output


def test_a_training_run_states_its_dropout():
    from diptych.sim.run.stack import stack_info
    from diptych.tools.fmt import stack_text
    info = {"stack": stack_info(Scenario.of(phase="train", seq=128))}
    assert (info["stack"]["hidden_dropout"], info["stack"]["attention_dropout"]) == (0.0, 0.0)
    assert "dropout" not in stack_text(info)
    info = {"stack": stack_info(Scenario.of(phase="train", seq=128, hidden_dropout=0.1,
                                            attention_dropout=0.1))}
    assert "hidden dropout 0.1" in stack_text(info)
    assert "attention dropout 0.1" in stack_text(info)


@pytest.mark.parametrize("chip, kernel, cost", [("h100", "default", 0.034),
                                                ("h100", "fa2", 0.047),
                                                ("infer-2026", "default", 0.0)])
def test_a_run_states_whether_its_attention_dropout_is_charged(chip, kernel, cost):
    # review finding 5: only an [attention] table's dropout_cost charges attention dropout
    # (h100.toml's cuDNN 0.034 and FA2 0.047); infer-2026 has no such table: free, and said
    r = CliRunner().invoke(main, ["run", "--chip", chip, "--model", "llama-3-8b", "--phase",
                                  "train", "--seq", "128", "--attention-dropout", "0.1",
                                  "--attention-kernel", kernel, "--json"])
    assert r.exit_code == 0, r.output
    import json
    from diptych.tools.fmt import stack_text
    info = json.loads(r.output)["info"]
    assert info["stack"]["attention_dropout_cost"] == cost
    text = stack_text(info)
    assert "attention dropout 0.1" in text
    assert ("not charged: the chip has no attention table with a dropout_cost" in text) \
        == (cost == 0.0)
