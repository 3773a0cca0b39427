"""The mixed-step lowering (workloads/serving_step.py): it reduces to `decode` and `prefill`
exactly, its pieces recombine to the direct simulation, and a chunk's past is read from the
cache."""

from __future__ import annotations

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.sim.serving.grid_timer import exact_parts_cost
from diptych.workloads import decode, load_model, prefill
from diptych.workloads.fused_attention import FusedAttention
from diptych.workloads.params import kv_bytes_per_token_per_chip
from diptych.sim.run.node import default_precision
from diptych.sim.run.summed import simulate_workload
from diptych.sim.run.scheduled import schedule_workload
from diptych.sim.run.node import run_workload
from diptych.workloads.serving_step import CORE_OPS, Step, base_name, lower_step, prefill_cores

#: uniform, MoE, MLA + MoE, and models whose layers differ (sliding/global windows, attention
#: sinks, chunked attention and NoPE layers), DeepSeek Sparse Attention (an indexer before MLA)
MODELS = [("llama-3-70b", 2), ("mixtral-8x7b", 2), ("deepseek-v3", 8), ("gemma-3-12b", 2),
          ("gpt-oss-20b", 1), ("llama-4-scout", 8), ("deepseek-v3.2-exp", 8)]


def _ops(w):
    """A workload's blocks as (name, repeat, ops): the lowering's tensor-access records, which
    the step lowering does not carry, left aside."""
    return [(b.name, b.repeat, b.ops) for b in w.blocks]


@pytest.mark.parametrize("name,tp", MODELS)
def test_pure_decode_and_pure_prefill_steps_are_run_workloads(name, tp):
    chip = load_chip("h100")
    m = load_model(name)
    p = default_precision(chip, "decode", None, None, None)
    assert _ops(lower_step(m, Step(5, 5 * 1500), precision=p, tp=tp)) == \
        _ops(decode(m, 5, 1500, precision=p, tp=tp))
    assert _ops(lower_step(m, Step(prefill=((700, 0),) * 3), precision=p, tp=tp)) == \
        _ops(prefill(m, 3, 700, precision=p, tp=tp))


@pytest.mark.parametrize("name,tp", MODELS)
def test_pieces_recombine_to_the_direct_simulation(name, tp):
    # the summed model's pieces (the scheduled step is not a sum of pieces: docs/serving.md)
    r = make_replica("h100", name, Scenario.of(phase="decode", tp=tp, execution="sum"))
    for st in (Step(7, 7 * 900 + 13, ((300, 200), (1000, 0), (300, 200))),
               Step(prefill=((4096, 8192),)), Step(64, 64 * 3000), Step(3, 3 * 500 + 9, (), 4)):
        d = DirectStepTimer(r, roofline).cost(st)
        e = exact_parts_cost(r, st, roofline)
        assert e.seconds == pytest.approx(d.seconds, rel=1e-12)
        assert e.energy_j == pytest.approx(d.energy_j, rel=1e-12)


def test_mixed_step_linear_ops_see_all_tokens_as_one_gemm():
    m = load_model("llama-3-8b")
    w = lower_step(m, Step(10, 10 * 400, ((256, 0), (100, 50))))
    ops = {op.name: op for op in w.blocks[1].ops}
    assert ops["qkv_proj"].m == 10 + 256 + 100 and ops["down_proj"].m == 366
    attn = [op for op in w.blocks[1].ops if isinstance(op, FusedAttention)]
    assert len(attn) == 3                    # decode batch + two distinct chunks
    head = {op.name: op for op in w.blocks[2].ops}
    assert head["lm_head"].m == 10 + 2       # one logits row per decode sequence and chunk


def test_chunk_reads_its_past_kv_from_the_cache():
    m = load_model("llama-3-8b")
    p = default_precision(load_chip("h100"), "decode", None, None, None)
    fresh = [o for o in prefill_cores(m, 512, 0, precision=p, tp=1)["layers"]
             if isinstance(o, FusedAttention)][0]
    later = [o for o in prefill_cores(m, 512, 3000, precision=p, tp=1)["layers"]
             if isinstance(o, FusedAttention)][0]
    per_layer = kv_bytes_per_token_per_chip(m, p.kv, 1) / m.layers
    assert later.read_bytes - fresh.read_bytes == pytest.approx(3000 * per_layer)
    # causal work: 512 queries over 3000 + (512+1)/2 keys on average
    sc = later.parts[0]
    assert sc.n == 3000 + 257


def test_mla_chunk_expands_the_past_latents():
    m = load_model("deepseek-v3")
    cores = prefill_cores(m, 256, 1024, precision=default_precision(load_chip("h100"), "decode",
                                                                    None, None, None), tp=8)
    ops = cores["layers[3:61] (moe)"]
    names = [o.name for o in ops]
    assert "kv_b_proj (past)" in names
    past = ops[names.index("kv_b_proj (past)")]
    assert past.m == 1024


@pytest.mark.parametrize("kw,match", [
    ({}, "at least one"),
    ({"decode_batch": 2, "decode_keys": 1}, "decode_keys"),
    ({"prefill": ((0, 5),)}, "prefill entries"),
    ({"decode_batch": -1}, "decode_batch"),
    ({"decode_batch": 1, "decode_keys": 5, "decode_queries": 0}, "decode_queries"),
    ({"prefill": ((4, 0),), "logits_rows": 9}, "logits_rows"),
])
def test_step_rejects_bad_fields(kw, match):
    with pytest.raises(ValueError, match=match):
        Step(**kw)


def test_decode_with_speculative_rows_widens_the_gemms():
    m = load_model("llama-3-8b")
    w = lower_step(m, Step(8, 8 * 1000, (), 5))
    ops = {op.name: op for op in w.blocks[1].ops}
    assert ops["qkv_proj"].m == 40
    t1 = simulate_workload(lower_step(m, Step(8, 8 * 1000)), load_chip("h100"),
                           simulate=roofline)["seconds"]
    t5 = simulate_workload(w, load_chip("h100"), simulate=roofline)["seconds"]
    # a 5-row verify step reads the same weights: far cheaper than 5 decode steps
    assert t1 < t5 < 2 * t1


def _named(w):
    return [(b.name, b.repeat, b.ops, b.access, b.tensors, b.program_tensors, b.carry)
            for b in w.blocks]


@pytest.mark.parametrize("name,tp", MODELS)
def test_a_decode_step_names_its_tensors_as_decode_does(name, tp):
    """Tensor names, shares, state and carries of a decode-only step are decode()'s: residency
    and fusion see the step as they see `run --phase decode`."""
    chip = load_chip("h100")
    m = load_model(name)
    p = default_precision(chip, "decode", None, None, None)
    assert _named(lower_step(m, Step(5, 5 * 1500), precision=p, tp=tp)) == \
        _named(decode(m, 5, 1500, precision=p, tp=tp))


@pytest.mark.parametrize("chip", ["h100", "infer-2026", "tpu-v5e"])
def test_decode_step_scheduled_equals_run_decode_schedule(chip):
    r = run_workload(chip, "llama-3-8b",
                     Scenario.of(phase="decode", batch=6, prompt=799, gen=1, execution="schedule",
                                 power_limit=False),
                     simulate=roofline)
    rep = make_replica(chip, "llama-3-8b", Scenario.of(phase="decode", execution="schedule"))
    assert DirectStepTimer(rep, roofline).cost(Step(6, 6 * 800)).seconds == \
        pytest.approx(r.seconds, rel=1e-12)


def _rows_read(blk) -> float:
    """Bytes a layer's cores read of tensors the layer's other ops make (q, K/V rows)."""
    by = {t.name: t for t in blk.tensors}
    made = {t for op, a in zip(blk.ops, blk.access) if base_name(op.name) not in CORE_OPS
            for t in a.writes}
    return sum(u.share * by[u.tensor].bytes for op, a in zip(blk.ops, blk.access)
               if base_name(op.name) in CORE_OPS for u in a.of(mode="read") if u.tensor in made)


@pytest.mark.parametrize("name,tp", MODELS)
def test_mixed_step_program_links_every_group(name, tp):
    """Every sequence group's cores read their share of the step's q and K/V rows, their own
    cache, and write their own output, which the op after attention reads in full; the
    program validates and schedules (fused and not)."""
    chip = load_chip("h100")
    m = load_model(name)
    p = default_precision(chip, "decode", None, None, None)
    st = Step(7, 7 * 900 + 13, ((300, 200), (1000, 0), (300, 200)))
    w = lower_step(m, st, precision=p, tp=tp)
    layer = w.blocks[1]
    cores = [(op, a) for op, a in zip(layer.ops, layer.access)
             if base_name(op.name) in CORE_OPS]
    outs = [t for op, a in cores for t in a.writes
            if not any(t in a2.reads for _, a2 in cores)]
    assert len(outs) == 3                                # decode batch + two distinct chunks
    after = [a for op, a in zip(layer.ops, layer.access)
             if base_name(op.name) not in CORE_OPS and set(outs) & set(a.reads)]
    assert len(after) == 1 and set(outs) <= set(after[0].reads)
    by = {t.name: t for t in layer.tensors}
    assert by["kv_cache"].kind == "kv_cache"
    # the chunk after a past of 200 reads that past from the cache: its own state tensor
    assert by["kv_past@1"].kind == "kv_cache" and by["kv_past@1"].bytes > 0
    assert "kv_past@2" not in by                        # the chunk without a past reads none
    # the bytes the cores read of the step's token-parallel tensors (q, K/V rows) are what
    # each group's own lowering reads of its own rows (decode() and prefill() of the group)
    ref = [decode(m, 7, 900, precision=p, tp=tp), prefill(m, 2, 300, precision=p, tp=tp),
           prefill(m, 1, 1000, precision=p, tp=tp)]
    st = Step(7, 7 * 900, ((300, 0), (1000, 0), (300, 0)))
    w = lower_step(m, st, precision=p, tp=tp)
    got = _rows_read(w.blocks[1])
    assert got > 0
    assert got == pytest.approx(sum(_rows_read(r.blocks[1]) for r in ref), rel=1e-12)
    for fusion in (True, False):
        assert schedule_workload(w, chip, simulate=roofline, fusion=fusion)["seconds"] > 0
