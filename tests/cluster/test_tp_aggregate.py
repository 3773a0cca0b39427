"""A run's own Transformer Engine userbuffers settings (``tp_overlap_config``,
sim/run/stack.py) over the chip's ``[tp_overlap]`` table, and TE's ``aggregate`` ring exchange
(sim/run/tp_overlap.py ``aggregate_s``/``ring_chunks``) against TE v1.11 (c27ee60)
transformer_engine/pytorch/csrc/comm_gemm_overlap.h ``split_overlap_ag``, ``_aggregate2``
branch (L952-L1008): one 1X exchange with the neighbour first, then ``tp_size / 2`` GEMMs of
``n_chunk * 2`` rows, each next one after a 2X exchange with the rank two away."""

from __future__ import annotations

import dataclasses
import pathlib
import random
import sys

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.sim.run.stack import scenario_chip, stack_chip
from diptych.sim.run.tp_overlap import (SubBlockGemms, aggregate_s, chunk_op, ring_chunks,
                                        ring_exchange_s, sub_block_overlap)
from diptych.workloads.ops import Gemm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import validate_system  # noqa: E402


def _aggregate_events(gemm, comm, ranks):
    """TE's ``_aggregate2`` loop as events: the first GEMM's stream waits for the 1X
    exchange (one piece, ``comm / (ranks - 1)``); GEMM i + 1 waits for the i-th 2X exchange,
    sent after GEMM i is issued (two pieces to the rank two away), and for the GEMM before it
    (the cores)."""
    piece = comm / (ranks - 1)
    steps = ranks // 2
    chunk, recv, end = gemm / steps, piece, 0.0
    for _ in range(steps):
        end = max(end, recv) + chunk
        recv += 2 * piece
    return end


def test_aggregate_chunks_are_te_s_shapes():
    """TP4 on GPT-3's 2,048 tokens: ``n_chunk`` = 512 rows a rank; aggregate runs
    ``num_steps = 4 / 2`` = 2 GEMMs of ``{n_chunk * 2, k}`` = 1,024 rows, each against the whole
    weight; TP8: 4 GEMMs of 2 x 256 = 512 rows; the plain ring 4 (8) of 512 (256)."""
    g = Gemm(name="fc2.dgrad", m=2048, k=3072, n=12288)
    assert ring_chunks(4, True) == 2 and ring_chunks(4, False) == 4
    assert ring_chunks(8, True) == 4 and ring_chunks(2, True) == 1
    c = chunk_op(g, rows=ring_chunks(4, True))
    assert (c.m, c.k, c.n) == (1024, 3072, 12288)
    assert chunk_op(g, rows=ring_chunks(8, True)).m == 512
    assert chunk_op(g, rows=ring_chunks(4, False)).m == 512


def test_aggregate_seconds_against_te_s_event_order():
    # hand-computed: GEMM 4 s, all-gather 3 s on 4 ranks: a piece 1 s, chunks of 2 s;
    # 1 (1X exchange) + 2 + max(2, 2 x 1) = 5 s (the plain ring 1 + 3 x max(1, 1) = 4 s)
    assert aggregate_s(4.0, 3.0, 4) == pytest.approx(5.0)
    assert ring_exchange_s(4.0, 3.0, 4) == pytest.approx(4.0)
    # a slow link: pieces of 3 s: 3 + 2 + max(2, 6) = 11 s
    assert aggregate_s(4.0, 9.0, 4) == pytest.approx(11.0)
    assert aggregate_s(4.0, 0.0, 4) == 4.0 and aggregate_s(4.0, 3.0, 1) == 4.0
    rng = random.Random(5)
    for _ in range(300):
        g, c, r = rng.uniform(1e-6, 1e-3), rng.uniform(1e-7, 2e-3), rng.choice([2, 4, 8])
        assert aggregate_s(g, c, r) == pytest.approx(_aggregate_events(g, c, r), rel=1e-12)


def test_a_sub_block_charges_its_aggregate_ring():
    g = SubBlockGemms(col_fprop_s=4.0, row_fprop_s=2.0, row_fprop_margin_s=2.0,
                      col_dgrad_s=1.0, col_wgrad_s=1.0, row_dgrad_s=4.0)
    kw = dict(all_gather_s=3.0, reduce_scatter_s=0.0, ranks=4, splits=4, dgrad_cores=0,
              wgrad_cores=0, total_cores=132)
    plain, agg = sub_block_overlap(g, **kw), sub_block_overlap(g, dgrad_aggregate=True, **kw)
    assert agg.bwd_s - plain.bwd_s == pytest.approx(5.0 - 4.0)
    assert agg.fwd_s == plain.fwd_s
    fwd = sub_block_overlap(g, fprop_aggregate=True, **kw)
    assert fwd.fwd_s - plain.fwd_s == pytest.approx(1.0) and fwd.bwd_s == plain.bwd_s


def test_the_layer_times_aggregate_chunks_at_their_shapes():
    """With ``fc2_dgrad_aggregate`` a TP4 layer times the MLP's row-parallel data gradient as
    (``down_proj``) two chunks of half the 2,048 rows; the attention's (``proj_dgrad``) keeps
    four of 512."""
    from diptych.sim.cluster.layers import layer_ops
    from diptych.sim.run.node import default_precision
    from diptych.sim.run.tp_overlap import overlap_gemms
    from diptych.workloads import load_model

    h100 = load_chip("h100")
    lo = layer_ops(load_model("llama-3-8b"), default_precision(h100, "train"), phase="train",
                   tp=4, cp=1, ep=1, micro_batch=1, seq=2048)["layers"]
    seen = []

    def alone(op, chip):
        seen.append((op.name, op.m))
        return 1e-3

    chip = stack_chip(h100, tp_overlap_config="fc2_dgrad_aggregate=1")
    overlap_gemms(lo.forward, lo.backward, {c.name for c in lo.tp}, chip, alone, None, 4)
    chunks = {(n, m) for n, m in seen if n.endswith(".dgrad") and m < 2048}
    assert len(chunks) == 2 and sorted(m for _, m in chunks) == [512, 1024]
    assert [n for n, m in chunks if m == 1024] == ["down_proj.dgrad"]


def test_gpt3_rows_carry_the_published_config():
    """35a9aec nemo_megatron/gpt3_175b_hydra.yaml L177-220: qkv_dgrad 4, qkv_wgrad 8,
    fc1_dgrad 2, fc1_wgrad 4 SMs (bulk); proj_fprop 24 and fc2_fprop 20 SMs, 4 splits
    (pipeline); fc2_dgrad ring exchange with ``aggregate: 1``, the other three without."""
    h100 = load_chip("h100")
    rows = validate_system._rows()
    gpt3 = [r for r in rows if r.name.startswith("GPT-3")]
    assert len(gpt3) == 2
    for r in gpt3:
        t = scenario_chip(h100, validate_system.scenario(r)).tp_overlap
        assert t.cores() == {"proj_fprop": 24, "fc2_fprop": 20, "qkv_dgrad": 4,
                             "qkv_wgrad": 8, "fc1_dgrad": 2, "fc1_wgrad": 4}
        assert t.splits == 4 and t.userbuffers
        assert t.aggregate() == {"qkv_fprop": False, "proj_dgrad": False,
                                 "fc1_fprop": False, "fc2_dgrad": True}
    for r in rows:
        if not r.name.startswith("GPT-3"):
            assert scenario_chip(h100, validate_system.scenario(r)).tp_overlap == \
                h100.tp_overlap, r.name


def test_the_default_is_the_chip_s_table():
    h100 = load_chip("h100")
    assert stack_chip(h100) is h100
    assert scenario_chip(h100, Scenario.of(phase="train", seq=128)) is h100
    t = stack_chip(h100, tp_overlap_config="splits=2").tp_overlap
    assert t == dataclasses.replace(h100.tp_overlap, splits=2)


@pytest.mark.parametrize("value, needle", [
    ("foo=1", "'foo=1' is not key=value"),
    ("splits=0", "splits='0'; expected an integer in 1..1024"),
    ("fc2_dgrad_aggregate=2", "fc2_dgrad_aggregate='2'; expected an integer in 0..1"),
    ("qkv_wgrad_cores=x", "qkv_wgrad_cores='x'"),
    ("splits=2,splits=4", "splits is given twice"),
    ("splits=+3", "splits='+3'; expected an integer"),
    ("splits=1_0", "splits='1_0'; expected an integer"),
])
def test_bad_settings_name_the_field(value, needle):
    with pytest.raises(ValueError, match="tp_overlap_config") as e:
        Scenario.of(phase="train", seq=128, tp_overlap_config=value)
    assert needle in str(e.value)
    from diptych.tools.cli import main
    r = CliRunner().invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                                  "train", "--seq", "128", "--tp-overlap-config", value])
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert "tp_overlap_config" in r.output


@pytest.mark.parametrize("cores", [132, 500])
def test_cores_at_or_above_the_chips_are_refused(cores):
    """h100 has 132 SMs: a collective taking all of them leaves the GEMM none (the chip
    file's own rule, arch/chip.py), refused naming the setting, not a ZeroDivisionError."""
    with pytest.raises(ValueError, match=f"tp_overlap_config: fc2_fprop_cores={cores}; "
                                         "expected fewer than chip 'h100'.s 132"):
        stack_chip(load_chip("h100"), tp_overlap_config=f"fc2_fprop_cores={cores}")
    from diptych.tools.cli import main
    r = CliRunner().invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                                  "train", "--seq", "2048", "--tp", "4", "--chips", "4",
                                  "--tp-overlap-config", f"fc2_fprop_cores={cores}"])
    assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
    assert "tp_overlap_config" in r.output


def test_a_chip_without_the_table_refuses_it():
    with pytest.raises(ValueError, match="tp_overlap_config .* needs a \\[tp_overlap\\]"):
        stack_chip(load_chip("tpu-v5e"), tp_overlap_config="splits=2")
