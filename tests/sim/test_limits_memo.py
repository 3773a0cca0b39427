"""The memoised block estimate (sim/limits.py ``min_blocks``) equals the original per-op
computation, kept here as the reference, on every preset and a spread of GEMM shapes; a
second call (a memo hit) returns the same number."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diptych.arch import load_chip
from diptych.arch.dtypes import DTYPE_BYTES
from diptych.sim.limits import _grid, min_blocks
from diptych.workloads.ops import Gemm


def min_blocks_ref(op, chip) -> int:
    """The estimate as written before the memo: straight from the op and the chip."""
    sp = chip.core.scratchpad
    cap = sp.capacity_mib * 2**20 / chip.core.arrays
    acc = sp.accumulator_mib * 2**20 / chip.core.arrays
    xb, wb = DTYPE_BYTES[op.a_dtype], DTYPE_BYTES[op.b_dtype]
    ab = DTYPE_BYTES[op.acc_dtype]
    m_ext = op.m * op.batch if op.b_is_weight else op.m
    mb = _grid(m_ext)[:, None]
    nb = _grid(op.n)[None, :]
    out = 2.0 * mb * nb * ab
    room = np.where(out <= acc, cap, cap - out)
    vol = 0.0
    per_core = chip.core.arrays
    subs = [(1, 1)] + [(q, per_core // q) for q in range(1, per_core + 1) if per_core % q == 0]
    for qm, qn in subs:
        if qm > m_ext or qn > op.n:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            kb = np.minimum(op.k, room / (2.0 * (mb * xb / qn + nb * wb / qm)))
        vol = max(vol, np.where(kb >= 1.0, mb * nb * kb, 0.0).max())
    if vol <= 0:
        return 1
    return max(1, math.ceil(op.macs / chip.arrays / vol))


@pytest.mark.parametrize("chip", ["tpu-v4", "infer-2026", "h100", "train-2026"])
def test_memoised_estimate_equals_the_reference(chip):
    c = load_chip(chip)
    rng = np.random.default_rng(7)
    for _ in range(40):
        m, k, n = (int(x) for x in 2 ** rng.uniform(0, 17, 3))
        batch = int(rng.integers(1, 9))
        dt = str(rng.choice(["bf16", "fp8", "fp32"]))
        op = Gemm(name="g", m=m, k=k, n=n, batch=batch, a_dtype=dt, b_dtype=dt, c_dtype=dt,
                  acc_dtype="fp32", b_is_weight=bool(rng.integers(0, 2)))
        want = min_blocks_ref(op, c)
        assert min_blocks(op, c) == want, (op, chip)
        assert min_blocks(op, c) == want, (op, chip)      # the memo's hit


def test_ops_differing_in_one_field_each_get_their_own_estimate():
    """One shape under every batch, weight flag and dtype: a memo keyed on too little would
    hand one of them another's number."""
    c = load_chip("infer-2026")
    for batch in (1, 4):
        for weight in (True, False):
            for dt in ("bf16", "fp8", "fp32"):
                op = Gemm(name="g", m=3000, k=50000, n=70000, batch=batch, a_dtype=dt,
                          b_dtype=dt, c_dtype=dt, acc_dtype="fp32", b_is_weight=weight)
                assert min_blocks(op, c) == min_blocks_ref(op, c), op
