"""``execution="schedule"``: the program's list schedule against closed forms of the summed
run (a chain of ops is its sum; the fixed costs add on a chain; a decode TP all-reduce sits on
the chain: the sum without overlap), fusion's conservation laws, training's data-parallel
all-reduce, the per-op records, the trace, and bad input. Engine replaced by the roofline
double (tests/roofline_double.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.arch import load_chip
from diptych.arch.chip import FUSABLE_KINDS
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.program import Block, Node, Program, Tensor
from diptych.tools.cli import main
from diptych.sim.run.trace import schedule_trace

#: the scheduler counts whole picoseconds, at least one per phase
PS = 1e-12


def chip(name="h100", *, overheads=True, fusion=True, residency=True):
    """``residency=False``: the planner may keep nothing on chip (every operand in DRAM);
    ``fusion=True``: a stack that fuses every kind it can into GEMMs (h100 as shipped fuses
    none: ``core.vector.gemm_fused_kinds = []``)."""
    c = load_chip(name)
    if fusion:
        c = dataclasses.replace(c, core=dataclasses.replace(c.core, vector=dataclasses.replace(
            c.core.vector, gemm_fused_kinds=FUSABLE_KINDS)))
    if not residency:
        from diptych.arch.chip import ResidencyPolicy
        c = dataclasses.replace(c, residency=ResidencyPolicy(scratchpad_kinds=(),
                                                             shared_buffer_kinds=()))
    if not overheads:
        c = dataclasses.replace(c, overheads=None)
    if not fusion:
        c = dataclasses.replace(c, core=dataclasses.replace(c.core, vector=dataclasses.replace(
            c.core.vector, on_array_output_path=False)))
    return c


def run(c, model="llama-3-8b", **kw):
    return run_workload(c, model, Scenario.of(**kw), simulate=roofline)


def phases(r) -> int:
    return sum(len(x["phases"]) for x in r.timeline) + sum(
        b["repeat"] * 3 for p in r.schedule["pieces"] for b in p["blocks"])


def test_a_chain_of_ops_is_its_sum():
    # h100 keeps no weights between ops (no prefetch), decode at tp=1 is one chain of ops:
    # without fixed costs, fusion and residency the schedule is the summed run, to the
    # picosecond
    c = chip(overheads=False, fusion=False, residency=False)
    kw = dict(phase="decode", batch=4, prompt=512)
    s, x = run(c, execution="sum", **kw), run(c, execution="schedule", **kw)
    assert x.seconds == pytest.approx(s.seconds, abs=phases(x) * PS)
    assert x.fixed_costs_s == 0 and x.execution == "schedule" and s.fixed_costs_s is None
    assert x.dram_bytes == pytest.approx(s.dram_bytes, rel=1e-12)
    assert x.energy_j == pytest.approx(s.energy_j, rel=1e-12)
    # with TP the all-reduces sit on that chain: the sum without overlap, not max(comp, comm)
    kw = dict(phase="decode", batch=1, prompt=2048, tp=8)
    s_ov = run(c, "llama-3-70b", execution="sum", **kw)
    s_no = run(c, "llama-3-70b", overlap=False, execution="sum", **kw)
    x = run(c, "llama-3-70b", execution="schedule", **kw)
    assert x.seconds == pytest.approx(s_no.seconds, abs=phases(x) * PS)
    assert x.seconds > s_ov.seconds
    comm = sum(r["total_seconds"] for r in s_no.layers if r["bound"] == "communication")
    assert x.communication_seconds == pytest.approx(comm, rel=1e-6)


def test_fixed_costs_add_on_a_chain():
    c0, c1 = chip(overheads=False, fusion=False), chip(fusion=False)
    kw = dict(phase="decode", batch=1, prompt=256, execution="schedule")
    a, b = run(c0, **kw), run(c1, **kw)
    fc = c1.fixed_costs
    ops = sum(r["repeat"] for r in b.layers)
    expect = ops * fc.op_launch_us * 1e-6 + fc.step_sync_us * 1e-6
    assert b.fixed_costs_s == pytest.approx(expect, rel=1e-12)
    assert b.seconds - a.seconds == pytest.approx(expect, abs=phases(b) * PS)
    assert b.schedule["step_sync_s"] == pytest.approx(20e-6)


def test_fusion_conserves_work_and_saves_traffic():
    c = chip()
    kw = dict(phase="decode", batch=8, prompt=1024, execution="schedule")
    on, off = run(c, fusion=True, **kw), run(c, fusion=False, **kw)
    work = lambda r: sum((x["flops"] + x.get("vector_flops", 0.0)) * x["repeat"]  # noqa: E731
                         for x in r.layers)
    assert work(on) == pytest.approx(work(off), rel=1e-12)       # GEMM + vector ALU work
    # only decreases; equal here: h100's L2 already keeps the activations between the
    # unfused ops (the engine honours residency), so fusion saves launches, not DRAM bytes
    assert on.dram_bytes <= off.dram_bytes
    assert on.seconds < off.seconds                               # fewer launches
    c0 = chip(residency=False)                                    # everything in DRAM:
    assert run(c0, fusion=True, **kw).dram_bytes < run(c0, fusion=False, **kw).dram_bytes
    assert len(on.layers) < len(off.layers)
    fused = [x for x in on.layers if x["kind"] == "fused"]
    assert {"attn_norm", "qkv_proj", "rope", "kv_write"} <= set(fused[0]["fused"])
    # a chip whose vector unit is off the arrays' path does not fuse
    nf = run(chip(fusion=False), fusion=True, **kw)
    assert not nf.schedule["fused"] and len(nf.layers) == len(off.layers)
    # h100 as shipped: its stacks run every elementwise op and norm as a kernel of its own
    shipped = run(load_chip("h100"), fusion=True, **kw)
    assert not shipped.schedule["fused"] and len(shipped.layers) == len(off.layers)
    assert shipped.seconds == off.seconds


def test_a_chip_fuses_only_the_kinds_its_kernels_fuse():
    """``gemm_fused_kinds`` restricts the fusion pass: with only the norms, the norms fuse
    into the GEMMs that read them and nothing else fuses (RoPE, SwiGLU, residual adds stay
    kernels of their own); the time lies between no fusion and full fusion."""
    c = load_chip("h100")
    norms = dataclasses.replace(c, core=dataclasses.replace(c.core, vector=dataclasses.replace(
        c.core.vector, gemm_fused_kinds=("rmsnorm",))))
    kw = dict(phase="prefill", batch=1, prompt=2048, execution="schedule")
    part, full, off = run(norms, **kw), run(chip(), **kw), run(c, fusion=False, **kw)
    fused = {o for x in part.layers if x["kind"] == "fused" for o in x["fused"]}
    assert {"attn_norm", "mlp_norm"} <= fused
    assert not fused & {"rope", "swiglu", "attn_residual", "mlp_residual"}
    assert full.seconds <= part.seconds <= off.seconds
    assert full.seconds < off.seconds


def test_records_and_steady_state():
    r = run(chip(), "llama-3-70b", phase="decode", batch=1, prompt=2048, tp=8,
            execution="schedule")
    (piece,) = r.schedule["pieces"]
    layers = next(b for b in piece["blocks"] if b["block"] == "layers")
    assert layers["simulated_repeats"] < 10 and layers["period_s"] > 0
    for x in r.layers:
        assert 0 <= x["start_s"] <= x["end_s"] <= r.seconds
        assert 0 <= x["exposed_s"] <= x["end_s"] - x["start_s"] + 1e-12
        assert x["residency"] and all(a["location"] in ("scratchpad", "shared_buffer", "dram")
                                      for a in x["residency"])
    qkv = next(x for x in r.layers if "qkv_proj" in x["op"])
    where = {a["tensor"].rsplit("].", 1)[-1]: a["location"] for a in qkv["residency"]}
    assert where["w_qkv"] == "dram"            # h100 keeps only activations in its L2
    assert set(r.utilization) == {"array", "vector", "dram", "link"}
    assert 0 < r.utilization["dram"] <= 1
    d = r.to_dict()
    json.dumps(d)
    assert "timeline" not in d and d["execution"] == "schedule"
    ev = schedule_trace(r.timeline, r.schedule)["traceEvents"]
    names = {e["name"] for e in ev if e.get("ph") == "X"}
    assert "attn_all_reduce" in names and any(n.startswith("layers × 80, period") for n in names)
    tracks = {e["tid"] for e in ev if e.get("ph") == "X"}
    assert {1, 2, 3, 5} <= tracks


def test_training_data_parallel_all_reduce_overlaps_backward():
    c = chip(overheads=False)
    kw = dict(phase="train", batch=4, seq=1024, execution="schedule", micro_batch=1)
    one = run(c, dp=1, **kw)
    two = run(c, dp=2, batch=8, **{k: v for k, v in kw.items() if k != "batch"})
    assert [p["label"] for p in two.schedule["pieces"]] == [
        "micro-batch", "last micro-batch + gradient all-reduce", "optimizer"]
    assert [p["times"] for p in two.schedule["pieces"]] == [3, 1, 1]
    buckets = [x for x in two.layers if x["op"] == "grad_all_reduce"]
    ar = sum(x["total_seconds"] for x in buckets)
    assert ar > 0
    # the gradient buckets run beside the backward pass: more than nothing, less than all
    assert one.seconds < two.seconds < one.seconds + ar


def test_bad_input_is_a_clear_error(monkeypatch, tmp_path):
    # a tensor larger than every memory of the chip: the LM head of a 405B model on an h100
    # with 1 GiB of DRAM
    from pathlib import Path
    text = (Path(load_chip.__code__.co_filename).parent / "chips" / "h100.toml").read_text()
    text = text.replace('name = "h100"', 'name = "small"')
    path = tmp_path / "small.toml"
    path.write_text(text.replace("capacity_gib = 80.0", "capacity_gib = 1.0"))
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    cli = CliRunner()
    r = cli.invoke(main, ["run", "--chip", str(path), "--model", "llama-3.1-405b", "--phase",
                          "decode", "--prompt", "16", "--execution", "schedule"])
    assert r.exit_code == 2, r.output
    assert "is larger than every memory of chip 'small'" in r.output
    assert "tensor 'w_embed'" in r.output
    # a negative fixed cost in the chip file
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("op_launch_us = 2.0", "op_launch_us = -1.0"))
    r = cli.invoke(main, ["run", "--chip", str(bad), "--model", "llama-3-8b", "--phase",
                          "decode", "--prompt", "16", "--execution", "schedule"])
    assert r.exit_code == 2 and "op_launch_us" in r.output and "-1.0" in r.output
    # the default execution (the schedule) and compare refuse them the same way
    r = cli.invoke(main, ["run", "--chip", str(path), "--model", "llama-3.1-405b", "--phase",
                          "decode", "--prompt", "16"])
    assert r.exit_code == 2 and "tensor 'w_embed'" in r.output, r.output
    r = cli.invoke(main, ["compare", str(bad), "h100", "--model", "llama-3-8b"])
    assert r.exit_code == 2 and "op_launch_us" in r.output and "-1.0" in r.output
    # a graph with a cycle (the lowering never makes one: injected)
    def cyclic(*a, **k):
        Program("p", [Block("b", (Tensor("t1", 1), Tensor("t2", 1)),
                            (Node("a", reads=("t1",), writes=("t2",)),
                             Node("b", reads=("t2",), writes=("t1",))))])
    monkeypatch.setattr("diptych.sim.run.scheduled.program_pieces", cyclic)
    for extra in ([], ["--execution", "schedule"]):
        r = cli.invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                              "decode", "--prompt", "16", *extra])
        assert r.exit_code == 2
        assert "block 'b' has a cycle: b -> a -> b (through tensors" in r.output
    with pytest.raises(ValueError, match="execution must be one of sum, schedule"):
        run(load_chip("h100"), phase="decode", batch=1, prompt=16, execution="fast")


def test_run_table_shows_residency_and_fixed_costs(monkeypatch):
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    r = CliRunner().invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                                  "train", "--batch", "4", "--seq", "256", "--dp", "2",
                                  "--execution", "schedule"])
    assert r.exit_code == 0, r.output
    assert "fixed costs" in r.output and "exposed communication" in r.output
    assert "g.w_qkv" in r.output                # a bucket reads the layer's gradients
    assert "attn_norm+qkv_proj" not in r.output   # training keeps h_attn for backward
    r = CliRunner().invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                                  "decode", "--prompt", "64", "--execution", "schedule",
                                  "--no-fusion"])
    assert r.exit_code == 0 and "no fusion" in r.output and "attn_norm+" not in r.output


def test_blocks_without_names_run_as_a_chain():
    # a hand-made block (a topology's GEMM list, a block built without a flow): each op reads
    # its predecessor's output, repeats chain too; on a chip without fixed costs and prefetch
    # its schedule is its sum
    from diptych.workloads.ops import Gemm, VectorOp
    from diptych.sim.run.scheduled import schedule_workload
    from diptych.workloads.graph import Workload
    from diptych.workloads.program import Block as WBlock
    ops = (Gemm(name="a", m=64, k=512, n=512), VectorOp(name="v", kind="add", elements=4096,
                                                         ops_per_element=1.0, read_bytes=8e3,
                                                         write_bytes=8e3),
           Gemm(name="a", m=64, k=512, n=256))           # names may repeat
    w = Workload("topology", (WBlock.of_ops("one", 1, ops[:1]), WBlock.of_ops("rep", 3, ops)), 1, 1)
    c = chip(overheads=False, fusion=False, residency=False)
    t = schedule_workload(w, c, simulate=roofline, fusion=False)
    s = run_mod.simulate_workload(w, c, simulate=roofline)
    assert t["seconds"] == pytest.approx(s["seconds"], abs=20 * PS)
    assert [r["op"] for r in t["layers"]] == ["a", "a", "v", "a#2"]
