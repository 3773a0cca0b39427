"""The search's per-split floor (sim/mapper.py ``split_floor``, which skips building the
oriented problem) equals :func:`mapper.group_floor` of ``orient(...)`` — the reference — bit
for bit, for every split and dataflow of a spread of GEMMs (folded batches, split-K,
resident operands, shared buffers or none)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from diptych.arch import load_chip
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.sim.dram import pin_bytes_per_s
from diptych.workloads.ops import Gemm


@pytest.mark.parametrize("chip", ["tpu-v4", "infer-2026", "h100", "train-2026"])
def test_split_floor_equals_group_floor_of_the_oriented_problem(chip):
    c = load_chip(chip)
    rates = array_rates(c, c.default_dtype)
    rng = np.random.default_rng(11)
    checked = 0
    for i in range(6):
        m, k, n = (int(x) for x in 2 ** rng.uniform(0, 14, 3))
        batch = int(rng.integers(1, 5))
        weight = bool(rng.integers(0, 2))
        op = Gemm(name="g", m=m, k=k, n=n, batch=batch, a_dtype=c.default_dtype,
                  b_dtype=c.default_dtype, c_dtype=c.default_dtype, acc_dtype="fp32",
                  b_is_weight=weight)
        if i % 3 == 2 and c.has_dram:
            op = dataclasses.replace(op, a_source="scratchpad", resident_bytes=int(op.a_bytes))
        m_total = m * batch if weight and batch > 1 else m
        b = 1 if weight and batch > 1 else batch
        view = G._as_oriented(op, m_total, b)
        layout = MP.op_layout(view, m_total, c.tensor_cores, c)
        peak = pin_bytes_per_s(c) / c.clock_hz
        sps = MP.splits(c, b, m_total, n, k)
        # the batched form the search calls: (peak share, floor) of every split at once
        batched = {df: MP.split_floors(c, layout, df, sps, k, rates, pin_bytes_per_s(c))
                   for df in ("os", "ws", "is")}
        for i_sp, split in enumerate(sps):
            for df in ("os", "ws", "is"):
                pb = MP.orient(view, df, split, m_total, c.tensor_cores, layout)
                want = MP.group_floor(c, pb, rates, split, peak / split.active)
                got = MP.split_floor(c, layout, df, split, k, rates, peak / split.active)
                assert got == want, (op, split, df)
                assert batched[df][i_sp] == (peak / split.active, want), (op, split, df)
                checked += 1
    assert checked > 100


def test_but_packing_is_every_field_but_the_packing():
    """The splits' packing filter keys (``_but_packing``) equal the field-by-field reference,
    so the same packings are compared and dropped."""
    c = load_chip("infer-2026")
    names = [f.name for f in dataclasses.fields(MP.Split) if f.name != "arrays_per_core"]
    for split in MP.splits(c, 2, 3000, 5000, 8192):
        assert MP._but_packing(split) == tuple(getattr(split, f) for f in names)
