"""simulate() shares its memo between chips that differ only in ``[overheads]`` (the
waterfall's ``no_launches`` variant): the shared results equal a fresh simulation of the
variant chip by the engine itself (sim/gemm ``gemm_stats``, sim/vector ``vector_stats``, no
memo), and a chip differing in anything else is not shared."""

from __future__ import annotations

import dataclasses

from diptych.arch import load_chip
from diptych.sim import api
from diptych.sim.gemm import gemm_stats
from diptych.sim.run.variant import Variant, variant_chip
from diptych.sim.vector import vector_stats
from diptych.workloads.ops import Gemm, VectorOp


def test_variant_chip_shares_the_memo_and_the_numbers():
    chip = load_chip("train-2026")
    assert chip.overheads is not None and chip.overheads.op_launch_us > 0
    quiet = variant_chip(chip, Variant(no_launches=True))
    assert quiet != chip and quiet.overheads.op_launch_us == 0
    assert api.op_chip(quiet) is api.op_chip(chip)
    other = dataclasses.replace(chip, clock_ghz=chip.clock_ghz * 0.9)
    assert api.op_chip(other) is not api.op_chip(chip)

    g = Gemm(name="g", m=1000, k=3000, n=700, batch=1, a_dtype="bf16", b_dtype="bf16",
             c_dtype="bf16", acc_dtype="fp32")
    v = VectorOp(name="v", kind="add", elements=1 << 20, ops_per_element=1.0,
                 read_bytes=4 << 20, write_bytes=2 << 20, dtype="bf16")
    api.simulate(g, chip), api.simulate(v, chip)                  # fill the memo with `chip`
    for op, fresh in ((g, gemm_stats(dataclasses.replace(g, name=""), quiet)),
                      (v, vector_stats(dataclasses.replace(v, name=""), quiet))):
        shared = api.simulate(op, quiet)
        assert dataclasses.replace(shared, name="") == fresh
