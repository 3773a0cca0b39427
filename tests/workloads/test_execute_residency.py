"""The engine honours residency in the scheduled run (docs/program.md, "Phase 2b"): operands
the planner keeps on chip move no DRAM byte, a block whose repeats differ is timed per
segment, and more SRAM never adds DRAM traffic or time (the planner is monotone; the roofline
double charges only the operands left in DRAM)."""

from __future__ import annotations

import dataclasses

from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload


def _chip(mib: float):
    c = load_chip("infer-2026")
    sp = dataclasses.replace(c.core.scratchpad, capacity_mib=mib)
    return dataclasses.replace(c, core=dataclasses.replace(c.core, scratchpad=sp))


def _run(c, **kw):
    return run_workload(c, "llama-3-8b",
                        Scenario.of(phase="decode", batch=8, prompt=1024, execution="schedule",
                                    **kw),
                        simulate=roofline)


def test_more_sram_never_slower_and_segments_are_timed_apart():
    runs = [_run(_chip(m)) for m in (16.0, 64.0, 512.0, 2048.0)]
    for a, b in zip(runs, runs[1:]):
        assert b.dram_bytes <= a.dram_bytes
        assert b.seconds <= a.seconds * (1 + 1e-9)
    assert runs[-1].dram_bytes < runs[0].dram_bytes and runs[-1].seconds < runs[0].seconds
    # a partly pinned layer stack runs as two blocks, its first segment with less DRAM
    r = runs[2]
    names = [b["block"] for p in r.schedule["pieces"] for b in p["blocks"]]
    segs = [n for n in names if n.startswith("layers[")]
    assert len(segs) == 2 and sum(b["repeat"] for p in r.schedule["pieces"]
                                  for b in p["blocks"] if b["block"] in segs) == 32
    per_seg = {s: sum(x["dram_bytes"] for x in r.layers if x["block"] == s) for s in segs}
    assert per_seg[segs[0]] < per_seg[segs[1]]
    # the records report each segment's residency: what moved on chip moved no DRAM byte
    for x in r.layers:
        on_chip = all(a["location"] != "dram" for a in x["residency"])
        if on_chip and x["kind"] in ("gemm", "fused", "vector"):
            assert x["dram_bytes"] == 0


def test_everything_on_chip_moves_no_dram_byte():
    r = _run(_chip(2048.0))
    assert r.dram_bytes == 0
    assert all(a["location"] != "dram" for x in r.layers for a in x["residency"])
