"""The compiled split enumeration (sim/split_kernels.py, ``mapper.split_rows``) and the
vectorised floors (``mapper.split_floor_arrays``, ``mapper.split_fold_floor_array``) against
the plain Python they replace, the reference: the same splits in the same order
(``mapper.splits_ref``: ``own_splits`` per sub-chip, merged, less the dominated packings),
the same own-split flags, and the search's groups (``gemm._groups`` against
``gemm._groups_ref``) equal bit for bit, on random shapes and the preset chips."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import struct
from unittest import mock

import pytest

from diptych.arch import load_chip
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.sim.dram import pin_bytes_per_s
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip

CHIPS = {
    # 132 cores of 4 arrays (sub-chips 66, 33; wave grids), 2 cores of 4 (power-of-two
    # units: no wave splits), a chip with a shared buffer, a small odd one of 3 cores of 2
    "h100": lambda: load_chip("h100"),
    "tpu-v4": lambda: load_chip("tpu-v4"),
    "infer-2026": lambda: load_chip("infer-2026"),
    "small-sb": lambda: small_chip(rows=8, cols=8, cores=3, arrays=2, spad_mib=0.05, sb_mib=0.5),
    "six-by-three": lambda: small_chip(rows=16, cols=16, cores=12, arrays=3),
}


def _dims(rng: random.Random, n: int) -> list[tuple[int, int, int, int]]:
    """(batch, m, n, k) with edge sizes (1, powers of two, just off them) and K deep enough
    for split-K or not (0: no split-K)."""
    sizes = [1, 2, 3, 7, 16, 17, 100, 128, 511, 1024, 2049, 6144, 14336, 70000]
    out = []
    for _ in range(n):
        out.append((rng.choice([1, 1, 1, 2, 3, 8, 40, 8952]), rng.choice(sizes),
                    rng.choice(sizes), rng.choice([0, 0, 64, 300, 4096, 65536])))
    return out


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_compiled_splits_equal_the_python_reference(name):
    chip = CHIPS[name]()
    arr = chip.core.array
    rng = random.Random(sorted(CHIPS).index(name))
    for batch, m, n, k in _dims(rng, 12):
        got = MP.splits(chip, batch, m, n, k)
        want = MP.splits_ref(chip, batch, m, n, k)
        assert got == want, (name, batch, m, n, k)
        own = set(MP.own_splits(chip.tensor_cores, chip.core.arrays, arr.rows, arr.cols,
                                batch, m, n, k))
        rows, mine = MP.split_rows(chip, batch, m, n, k)
        assert mine.tolist() == [sp in own for sp in want]
        assert [tuple(r) for r in rows.tolist()] == [dataclasses.astuple(s) for s in want]


def _bits(x) -> tuple:
    """A group's numbers as exact bits (floats packed: equal means bit for bit)."""
    return tuple(struct.pack("<d", v) if isinstance(v, float) else (type(v), v) for v in x)


def _gemm(i: int, dims, dt: str) -> Gemm:
    """The ``i``-th random GEMM of ``dims`` (batch, m, n, k), every other one a weight."""
    batch, m, n, k = dims
    return Gemm(name="g", m=m, k=max(k, 8), n=n, batch=min(batch, 40), a_dtype=dt,
                b_dtype=dt, c_dtype=dt, acc_dtype="fp32", b_is_weight=i % 2 == 0)


def _group_key(g) -> tuple:
    return _bits((g[0], g[1], g[4], g[5], g[8], g[9])) + (g[3], g[6], g[2], g[7][1:])


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_groups_equal_the_split_by_split_reference(name):
    chip = CHIPS[name]()
    rng = random.Random(100 + sorted(CHIPS).index(name))
    dt = chip.default_dtype
    for i, dims in enumerate(_dims(rng, 8)):
        op = _gemm(i, dims, dt)
        if i % 4 == 3 and chip.has_dram:
            op = dataclasses.replace(op, a_source="scratchpad", resident_bytes=int(op.a_bytes))
        rates = array_rates(chip, dt)
        folded = op.b_is_weight and op.batch > 1
        m_total, b = (op.m * op.batch, 1) if folded else (op.m, op.batch)
        flows = tuple(arr_df for arr_df in chip.core.array.dataflows)
        got = G._groups(op, chip, rates, flows, m_total, b)
        want = G._groups_ref(op, chip, rates, flows, m_total, b, MP.splits_ref)
        assert [_group_key(g) for g in got] == [_group_key(g) for g in want], (name, op)


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_the_searchs_lazy_groups_come_in_the_sorted_groups_order(name):
    """``plan`` builds a group only when its search reaches it (``_LazyGroups.pending``): the
    floors and groups it hands out, position by position, are those of ``sorted(_groups(...),
    key=_FLOOR_KEY)``, ties (equal floors) included."""
    chip = CHIPS[name]()
    rng = random.Random(200 + sorted(CHIPS).index(name))
    dt = chip.default_dtype
    for i, dims in enumerate(_dims(rng, 6)):
        op = _gemm(i, dims, dt)
        rates = array_rates(chip, dt)
        flows = tuple(chip.core.array.dataflows)
        want = sorted(G._groups(op, chip, rates, flows, op.m, op.batch), key=G._FLOOR_KEY)
        floors, get = G._lazy_groups(op, chip, rates, flows, op.m, op.batch).pending()
        assert _bits(floors) == _bits([g[0] for g in want])
        got = [get(j) for j in range(len(want))]
        assert [_group_key(g) for g in got] == [_group_key(g) for g in want], (name, op)
        assert get(0) is got[0]            # (built once: the search mutates its groups)


@pytest.mark.parametrize("df", ["os", "ws", "is"])
def test_floor_arrays_equal_the_scalar_floors(df):
    chip = CHIPS["small-sb"]()
    rates = array_rates(chip, chip.default_dtype)
    for batch, m, n, k in [(3, 1000, 17, 4096), (1, 5, 70000, 300), (8952, 4, 1, 128)]:
        op = Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=False)
        layout = MP.op_layout(G._as_oriented(op, m, batch), m, chip.tensor_cores, chip)
        rows, _ = MP.split_rows(chip, batch, m, n, k)
        sps = MP.splits(chip, batch, m, n, k)
        pin = pin_bytes_per_s(chip)
        peak, floor = MP.split_floor_arrays(chip, layout, df, rows, k, rates, pin)
        want = MP.split_floors(chip, layout, df, sps, k, rates, pin)
        assert _bits(peak.tolist() + floor.tolist()) == _bits(
            [p for p, _ in want] + [f for _, f in want])
        folds = MP.split_fold_floor_array(chip, df, rows, k, rates).tolist()
        assert folds == [MP.split_fold_floor(chip, df, sp, k, rates) for sp in sps]


def test_groups_too_large_for_float64_take_the_reference_path():
    """A problem whose MAC count passes 2**53 has no exact float64 floors: the groups are
    the reference's (computed split by split in Python's integers)."""
    chip = CHIPS["h100"]()
    rates = array_rates(chip, "bf16")
    op = Gemm(name="huge", m=2 ** 24, k=2 ** 20, n=2 ** 20, b_is_weight=True)
    rows, _ = MP.split_rows(chip, 1, op.m, op.n, op.k)
    layout = MP.op_layout(G._as_oriented(op, op.m, 1), op.m, chip.tensor_cores, chip)
    assert MP.split_floor_arrays(chip, layout, "os", rows, op.k, rates,
                                 pin_bytes_per_s(chip)) is None
    got = G._groups(op, chip, rates, ("os",), op.m, 1)
    want = G._groups_ref(op, chip, rates, ("os",), op.m, 1, MP.splits_ref)
    assert [_group_key(g) for g in got] == [_group_key(g) for g in want]


def test_a_replaced_splits_is_the_one_the_search_asks():
    """Tests force the search's splits by replacing ``mapper.splits``: ``_groups`` then
    asks it (the reference path), as it always did."""
    chip = CHIPS["h100"]()
    rates = array_rates(chip, "bf16")
    op = Gemm(name="g", m=512, k=512, n=512)
    forced = MP.splits(chip, 1, 512, 512, 512)[-1]
    with mock.patch.object(MP, "splits", lambda *a: [forced]):
        got = G._groups(op, chip, rates, ("os",), 512, 1)
    assert [g[3] for g in got] == [forced]


def test_a_lazy_split_is_the_split_it_reads():
    """``lazy_splits`` fills a split's fields on first read: equal to, hashing as, copying,
    pickling and replacing like the split built with every field."""
    chip = CHIPS["h100"]()
    rows, _ = MP.split_rows(chip, 2, 3000, 5000, 8192)
    built = MP.splits_ref(chip, 2, 3000, 5000, 8192)
    lazy = MP.lazy_splits(rows)
    # a defaulted field read first is the row's, not the default (split-K: pk, k)
    sk = [i for i, r in enumerate(rows.tolist()) if r[-2] > 1]
    assert sk and all((lazy[i].pk, lazy[i].k) == (built[i].pk, built[i].k) for i in sk)
    assert MP.Split(1, 1, 1, 1, 8, 8, 1, 1).pk == 1       # the constructor's defaults hold
    assert hash(lazy[3]) == hash(built[3])
    assert lazy == built
    fresh = MP.lazy_splits(rows)
    assert pickle.loads(pickle.dumps(fresh[5])) == built[5]
    assert copy.deepcopy(fresh[6]) == built[6]
    assert dataclasses.replace(fresh[7], pk=2) == dataclasses.replace(built[7], pk=2)
    assert fresh[8].tiles == built[8].tiles and repr(fresh[9]) == repr(built[9])
    with pytest.raises(AttributeError):
        fresh[5].not_a_field


def test_a_read_racing_the_fill_finds_the_filled_field():
    """A thread whose attribute lookup missed while the row was pending reaches
    ``__getattr__`` after another thread filled the fields and dropped the row: it returns
    the filled field (the state reproduced without threads) and a missing name still
    raises."""
    chip = CHIPS["h100"]()
    rows, _ = MP.split_rows(chip, 2, 3000, 5000, 8192)
    built = MP.splits_ref(chip, 2, 3000, 5000, 8192)
    sp = MP.lazy_splits(rows)[4]
    assert sp.pk == built[4].pk                            # the other thread's fill
    assert "_row" not in sp.__dict__
    for f in dataclasses.fields(MP.Split):
        assert sp.__getattr__(f.name) == getattr(built[4], f.name)
    with pytest.raises(AttributeError):
        sp.__getattr__("not_a_field")
