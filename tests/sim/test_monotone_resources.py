"""More hardware is never slower (issue 22 item 7; docs/engine.md, "More hardware is never
slower").

Per resource (``benchmarks/monotone_resources.py: RESOURCES``: tensor cores,
scratchpad capacity and bandwidth, DRAM, DMA bandwidth and engines, shared-buffer bandwidth and
capacity, NoC and die-to-die bandwidth, clock), random GEMMs on random presets: the preset
with more of the resource is never slower, in cycles (the clock: in seconds), beyond the
mapper's pruning tolerance (``SLACK`` = 1 / (1 − PRUNE_TOLERANCE)); cases whose search stops
on its block budget are not covered (none are drawn at these sizes). The cases are those of
the benchmark (plain ``random`` with fixed seeds: the same cases on every run):

* fast tier (default): :data:`N_FAST` cases per resource, M, K, N ≤ 128 (~10 s, the whole
  file's fast tier ~15 s, on the shared 2-core development machine);
* slow tier (``@pytest.mark.slow``): :data:`N_SLOW` cases per resource, M, K, N ≤ 512 (~85 s
  wall there: what fits the CI's budget, not 10,000 per resource);
* the full 10,000 cases per resource, M, K, N ≤ 16384: ``python
  benchmarks/monotone_resources.py``, which prints its counts (an hour or two of CPU).

Every tier times GEMMs with the mapper's plan and no statistics (``MR.timed``, checked equal
to :func:`~diptych.sim.gemm.gemm_stats` below).

Arrays per core are measured by the benchmark, not guaranteed (the mapper does not offer half
a core's arrays: :func:`~diptych.sim.mapper.sub_chips`).

Beside them, the mechanism itself: a chip's splits contain its sub-chips' (half the cores), a dropped packing is never faster than the split that dominates it,
and the split-K reduction may run on fewer cores.
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
import sys
from unittest import mock

import pytest

from diptych.arch import load_chip
from diptych.sim import mapper as MP
from diptych.sim.gemm import _reduction_op, gemm_stats, split_k_reduction
from diptych.sim.vector import vector_stats
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import monotone_resources as MR  # noqa: E402

N_FAST, TOP_FAST = 40, 128
N_SLOW, TOP_SLOW = 400, 512

_CHIPS = {}


def _chips() -> dict:
    if not _CHIPS:
        _CHIPS.update(MR._presets())
    return _CHIPS


def _check(resource: str, cases: int, top: int, seed: int) -> None:
    out = MR.run(MR.BY_NAME[resource], cases, top, seed, _chips())
    assert out["broken"] == 0, "\n".join(out["failures"][:20])
    # the cases were timed, not skipped
    assert out["budget"] == 0 and out["no_mapping"] + out["refused"] < cases // 2, out


@pytest.mark.parametrize("resource", [r.name for r in MR.RESOURCES if r.guaranteed])
def test_more_of_a_resource_is_never_slower(resource):
    _check(resource, N_FAST, TOP_FAST, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("resource", [r.name for r in MR.RESOURCES if r.guaranteed])
def test_more_of_a_resource_is_never_slower_many_cases(resource):
    _check(resource, N_SLOW, TOP_SLOW, seed=2)


def test_the_benchmark_times_gemms_as_diptych_gemm_does():
    """``timed`` (the plan's cycles, a split-K reduction added) is gemm_stats' cycles."""
    h100, infer = load_chip("h100"), load_chip("infer-2026")
    for chip, op in ((h100, Gemm(name="g", m=300, k=700, n=200)),
                     (infer, Gemm(name="g", m=4, k=8192, n=64)),          # split-K
                     (infer, Gemm(name="g", m=65, k=33, n=17, batch=3, b_is_weight=False))):
        cycles, seconds, budget = MR.timed(op, chip)
        st = gemm_stats(op, chip)
        assert (cycles, seconds, budget) == (st.cycles, st.seconds, False)
    assert gemm_stats(Gemm(name="g", m=4, k=8192, n=64), infer).mapping["split_k"]


def test_the_issue_cases_are_not_slower_on_twice_the_cores():
    """Issue 22 item 7's measurement: the GEMMs that doubling tensor_cores made slower. On one
    core, tpu-v5e's four MXUs share the core tile's blocks (a 1 × 4 core split); on two cores
    the one-wave core split of the same tile was no longer offered (its arrays would be packed
    4 to a core, the one-array-per-tile split spreads them 2 to a core), and the spread split
    took 17 % longer; groq-lpu lost 41 % the same way. Both chips now offer the one-core
    split."""
    for preset, dt, (m, k, n) in (("tpu-v5e", "bf16", (205, 918, 695)),
                                  ("groq-lpu", "int8", (582, 12069, 1912))):
        chip = load_chip(preset)
        op = Gemm(name="g", m=m, k=k, n=n, a_dtype=dt, b_dtype=dt, c_dtype=dt)
        one = MR.timed(op, chip)[0]
        two = MR.timed(op, dataclasses.replace(chip, tensor_cores=2 * chip.tensor_cores))[0]
        assert two <= one


def _splits_of(chip, batch, m, n, k):
    return set(MP.splits(chip, batch, m, n, k))


def _covered(sp, splits, engines) -> bool:
    return sp in splits or any(MP.packing_dominates(o, sp, engines) for o in splits
                               if MP._but_packing(o) == MP._but_packing(sp))


def test_splits_contain_the_sub_chips_splits():
    """Every split of the chip with half the tensor cores is a split of the chip (or a
    packing of one that a split of the chip dominates): the nesting that makes doubling the
    core count never slower. Real chips are built for the halves
    (dataclasses.replace), independently of :func:`mapper.sub_chips`."""
    rng = random.Random(5)
    base = load_chip("tpu-v4")
    for _ in range(60):
        cores, per_core = rng.choice([1, 2, 3, 5, 6, 12, 33]), rng.choice([1, 2, 3, 4, 6])
        engines = rng.choice([1, 2, 3, 4, 8])
        arr = dataclasses.replace(base.core.array, rows=rng.choice([8, 16, 128]),
                                  cols=rng.choice([8, 32, 128]))
        small = dataclasses.replace(base, tensor_cores=cores, core=dataclasses.replace(
            base.core, arrays=per_core, array=arr), dma=dataclasses.replace(
            base.dma, engines=engines))
        batch = rng.choice([1, 1, 3, 8])
        m, n, k = rng.randint(1, 3000), rng.randint(1, 3000), rng.choice([0, 64, 9000])
        for big in (dataclasses.replace(small, tensor_cores=2 * cores),):
            have = _splits_of(big, batch, m, n, k)
            for sp in _splits_of(small, batch, m, n, k):
                assert _covered(sp, have, engines), (cores, per_core, batch, m, n, k, sp)


def test_a_chip_offers_its_own_splits_first():
    """The sub-chips' splits follow the chip's own ones (ties in the search go to the
    chip's own), and a chip with an odd count of cores has none."""
    chip = load_chip("h100")
    got = MP.splits(chip, 1, 2048, 2048, 0)
    own = MP.own_splits(132, 4, 16, 32, 1, 2048, 2048, 0)
    assert got[:len(own)] == [sp for sp in own if sp in got] == list(own)
    assert len(got) > len(own)
    assert MP.sub_chips(132, 4) == [(66, 4)] and MP.sub_chips(33, 1) == []
    assert MP.core_counts(132) == [132, 66, 33]


def test_a_dominated_packing_is_never_faster():
    """:func:`mapper.packing_dominates` drops a split when another differs only in packing its
    arrays more thinly with no less DMA per array; the engine must then never be faster on
    the dropped one (every packing forced in turn, random GEMMs and DMA engine counts)."""
    rng = random.Random(11)
    for _ in range(12):
        engines = rng.choice([1, 2, 3, 4, 6])
        chip = small_chip(rng.choice([4, 8]), rng.choice([4, 8]), cores=1, arrays=8,
                          spad_mib=rng.choice([0.0625, 0.25]))
        chip = dataclasses.replace(chip, dma=dataclasses.replace(chip.dma, engines=engines))
        op = Gemm(name="g", m=rng.randint(1, 200), k=rng.randint(1, 200),
                  n=rng.randint(1, 200))
        sp = MP.Split(pb=1, pm=1, pn=1, batch=1, m=op.m, n=op.n, active=1, arrays_per_core=1)
        cycles = {}
        for apc in range(1, 9):
            forced = dataclasses.replace(sp, arrays_per_core=apc)
            with mock.patch.object(MP, "splits", lambda *a, _s=forced: [_s]):
                cycles[apc] = gemm_stats(op, chip).cycles
        for a in range(1, 9):
            for b in range(1, 9):
                if MP.packing_dominates(dataclasses.replace(sp, arrays_per_core=a),
                                        dataclasses.replace(sp, arrays_per_core=b), engines):
                    assert cycles[a] <= cycles[b] * MR.SLACK, (engines, op, a, b, cycles)


def test_split_k_reduction_takes_the_best_core_count():
    """The split-K reduction runs on all the cores or on a sub-chip's (half, a quarter, ...),
    whichever is faster, so that doubling the cores never slows it."""
    chip = load_chip("train-2026")
    op = Gemm(name="g", m=998, k=65536, n=1712)
    r = _reduction_op(op, 32)
    every = [vector_stats(r, chip, c).cycles for c in MP.core_counts(chip.tensor_cores)]
    split = MP.Split(pb=1, pm=1, pn=1, batch=1, m=998, n=1712, active=8, arrays_per_core=1,
                     pk=32, k=2048)
    assert split_k_reduction(op, chip, split).cycles == min(every)
    with pytest.raises(ValueError, match="cores must be 1..8"):
        vector_stats(r, chip, 16)
