"""run_workload, the batching curve, memory fit advice and topology files, on a roofline double
of the engine (tests/roofline_double.py) so that aggregation is checked independently of sim/."""

from __future__ import annotations

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_curve, run_topology, run_workload
from diptych.workloads import load_topology

KEYS = {"seconds", "flops", "dram_bytes", "mfu", "hfu", "ttft_s", "tpot_s", "tokens_per_s",
        "tokens_per_s_per_user", "energy_j", "energy_j_per_token", "fits", "memory_bytes",
        "memory_breakdown", "bound", "layers", "phase"}


def run(chip, model, **k):
    return run_workload(chip, model, Scenario.of(**k), simulate=roofline)


def test_decode_result_fields_and_totals():
    chip = load_chip("train-2026")
    # the summed run (execution="sum"): its step is, by definition, the sum of its ops; the
    # schedule's bounds (critical path, busiest resource, serial sum) are tests/workloads/
    # test_execute.py's
    r = run(chip, "llama-3-8b", phase="decode", batch=4, prompt=512, gen=64, execution="sum")
    d = r.to_dict()
    assert KEYS <= set(d)
    # no collectives at tp=1: the step is the sum of every op × its repeats
    assert r.seconds == pytest.approx(sum(x["total_seconds"] for x in r.layers), rel=1e-12)
    assert r.tpot_s == r.seconds and r.ttft_s is None
    assert r.tokens_per_s == pytest.approx(4 / r.seconds)
    assert r.tokens_per_s_per_user == pytest.approx(1 / r.seconds)
    assert r.mfu == pytest.approx(r.flops / (chip.peak_ops_per_s["bf16"] * r.seconds))
    assert r.energy_j_per_token == pytest.approx(r.energy_j / 4)
    assert r.bound == "memory" and r.fits
    rec = r.layers[1]
    assert {"op", "shape", "seconds", "bound", "utilization", "flops", "dram_bytes"} <= set(rec)


def test_prefill_and_train_phase_semantics():
    r = run("train-2026", "llama-3-8b", phase="prefill", batch=2, prompt=1024)
    assert r.ttft_s == r.seconds and r.tokens_per_s == pytest.approx(2048 / r.seconds)
    t = run("train-2026", "llama-3-8b", phase="train", batch=4, seq=1024, tp=2, dp=2)
    assert t.chips == 4 and t.tokens_per_s == pytest.approx(4 * 1024 / t.seconds)
    # training model FLOPs ≈ 6·P·tokens plus attention
    assert t.flops == pytest.approx(6 * 8.03e9 * 4096, rel=0.15)
    tr = run("train-2026", "llama-3-8b", phase="train", batch=4, seq=1024, recompute=True)
    assert tr.hfu > tr.mfu


def test_overlap_hides_tp_collectives():
    # ``overlap`` is the summed run's block rule (max(compute, comm)); the schedule overlaps a
    # collective with exactly the work that does not wait for it (test_execute.py)
    kw = dict(phase="prefill", batch=1, prompt=2048, tp=8, execution="sum")
    a = run("train-2026", "llama-3-70b", **kw)
    b = run("train-2026", "llama-3-70b", overlap=False, **kw)
    comm = sum(x["total_seconds"] for x in b.layers if x["bound"] == "communication")
    assert comm > 0
    assert b.seconds == pytest.approx(sum(x["total_seconds"] for x in b.layers), rel=1e-12)
    assert a.seconds < b.seconds
    assert a.seconds >= b.seconds - comm - 1e-15


def test_batching_curve_marks_first_compute_bound_batch():
    curve = run_curve("infer-2026", "llama-3-8b", Scenario.of(phase="decode", prompt=16, gen=1),
                      batches=[1, 8, 64, 512, 2048], simulate=roofline)
    res = curve["results"]
    bounds = [r.bound for r in res]
    assert "compute" in bounds and bounds[0] == "memory"
    first = bounds.index("compute")
    assert curve["compute_bound_batch"] == res[first].batch
    per_user = [r.tokens_per_s_per_user for r in res]
    per_chip = [r.tokens_per_s for r in res]
    assert per_user == sorted(per_user, reverse=True) and per_chip == sorted(per_chip)


def test_does_not_fit_says_by_how_much_and_what_fits():
    chip = load_chip("h100")
    r = run(chip, "llama-3-70b", phase="decode", batch=8, prompt=4096, gen=128)
    assert not r.fits
    mem = r.memory
    assert mem["deficit_bytes"] == pytest.approx(r.memory_bytes - chip.dram.capacity_bytes)
    assert "short" in mem["advice"] and f"--tp {mem['min_tp']}" in mem["advice"]
    # the advice is right: the suggested TP fits, and the next smaller valid degree does not
    assert run(chip, "llama-3-70b", phase="decode", batch=8, prompt=4096, gen=128,
               tp=mem["min_tp"]).fits
    assert not run(chip, "llama-3-70b", phase="decode", batch=8, prompt=4096, gen=128,
                   tp=mem["min_tp"] // 2).fits
    s = mem["suggestion"]
    assert s is not None
    assert run(chip, "llama-3-70b", phase="decode", batch=8, prompt=4096, gen=128,
               weights_dtype=s["weights_dtype"], kv_dtype=s["kv_dtype"]).fits


def test_training_memory_state_and_recompute_advice():
    chip = load_chip("train-2026")
    r = run(chip, "llama-3-8b", phase="train", batch=8, seq=4096, micro_batch=8)
    bd = r.memory_breakdown
    n = 8_030_261_248
    assert bd["weights"] + bd["gradients"] + bd["optimizer_state"] == n * 16
    assert r.memory["activations_recompute"] < r.memory["activations_no_recompute"]
    # 16 B/param (120 GiB) + ~144 GiB of saved activations > 216 GiB; with recomputation fits
    assert not r.fits and "--recompute" in r.memory["advice"]
    assert "--micro-batch 1" in r.memory["advice"]
    assert run(chip, "llama-3-8b", phase="train", batch=8, seq=4096, micro_batch=1).fits
    assert run(chip, "llama-3-8b", phase="train", batch=8, seq=4096, micro_batch=8,
               recompute=True).fits
    # micro-batches of 2 sequences: a quarter of the activations live at once
    r2 = run(chip, "llama-3-8b", phase="train", batch=8, seq=4096, micro_batch=2)
    assert r2.memory["activations_no_recompute"] == pytest.approx(
        r.memory["activations_no_recompute"] / 4, rel=0.01)


def test_context_beyond_max_positions_warns():
    with pytest.warns(UserWarning, match="exceeds llama-3-8b's max_position_embeddings"):
        r = run("train-2026", "llama-3-8b", phase="decode", batch=1, prompt=9000, gen=10)
    assert r.warnings


@pytest.mark.parametrize("kw,match", [
    (dict(phase="decode", batch=0, prompt=10), "batch must be a positive integer, not 0"),
    (dict(phase="decode", batch=1, prompt=-5), "prompt must be a positive integer, not -5"),
    (dict(phase="prefill", batch=1), "prefill needs --prompt"),
    (dict(phase="decode", batch=1, prompt=8, dp=2), "dp applies to training only"),
    (dict(phase="train", batch=2, seq=8, chips=6, tp=4), r"--chips \(6\) must be a multiple"),
    (dict(phase="decode", batch=1, prompt=8, act_dtype="int8"), "cannot compute"),
    (dict(phase="sleep", batch=1, prompt=8), "phase must be one of"),
])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        run("train-2026", "llama-3-8b", **kw)


def test_scalesim_conv_topology_im2col(tmp_path):
    p = tmp_path / "net.csv"
    p.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
                 "Num Filter, Strides,\n"
                 "Conv1, 224, 224, 7, 7, 3, 64, 2,\n"
                 "FC, 1, 1, 1, 1, 2048, 1000, 1,\n\n")
    g1, g2 = load_topology(p)
    assert (g1.m, g1.k, g1.n) == (109 * 109, 7 * 7 * 3, 64)      # (224-7)//2+1 = 109
    assert (g2.m, g2.k, g2.n) == (1, 2048, 1000)
    r = run_topology("tpu-v1", p, simulate=roofline)
    assert r.flops == 2 * (109 * 109 * 147 * 64 + 2048 * 1000)
    assert r.seconds == pytest.approx(sum(x["seconds"] for x in r.layers))


def test_gemm_topologies(tmp_path):
    p = tmp_path / "gemm.csv"
    p.write_text("Layer,M,N,K,\nQKT,1024,1024,64,\nFF,1024,4800,1600,\n")
    a, b = load_topology(p)
    assert (a.m, a.n, a.k) == (1024, 1024, 64) and (b.m, b.n, b.k) == (1024, 4800, 1600)
    q = tmp_path / "plain.csv"
    q.write_text("k,m,n,batch\n64,128,256,4\n")
    (c,) = load_topology(q)
    assert (c.m, c.k, c.n, c.batch) == (128, 64, 256, 4)


@pytest.mark.parametrize("text,match", [
    ("Layer,M,N,K,\nA,1,2,3,\nB,1,x,3,\n", r"gemm.csv:3: column 'N' must be an integer"),
    ("Layer,M,N,K,\nA,1,2\n", r"gemm.csv:2: expected 4 columns"),
    ("Layer,M,N,K,\nA,0,2,3\n", r"gemm.csv:2: column 'M' must be a positive integer"),
    ("foo,bar\n1,2\n", r"gemm.csv:1: unrecognised header"),
    ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter,"
     " Strides,\nC,3,3,5,5,1,1,1,\n", r"gemm.csv:2: filter \(5x5\) is larger"),
])
def test_malformed_topology_rows(tmp_path, text, match):
    p = tmp_path / "gemm.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_topology(p)


def test_moe_and_mla_models_run():
    r = run("train-2026", "mixtral-8x7b", phase="decode", batch=16, prompt=1024, gen=16)
    assert r.fits and r.bound == "memory"
    d = run("train-2026", "deepseek-v3", phase="prefill", batch=1, prompt=512, tp=8)
    assert d.chips == 8 and d.seconds > 0
