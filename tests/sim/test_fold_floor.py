"""The mapper's fold-count floor (``mapper.fold_floor``) bounds every candidate of its
(split, dataflow) group from below: its estimate and lower bound (the candidate table),
its closed-form memory-free cycles (``mapper.compute_cycles``) and the engine's cycles with
memory (the reference: the engine itself). And the search with it makes the same decision
and the same engine runs as the search without it (the bytes-and-MACs floors alone: the
previous search, the reference), also where the budget stops it, opening no more candidates
and leaving no more out for the budget."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim import engine as E
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip
from test_plan_fast_path import CHIPS, _decision, _shapes


def _chip(rows, cols, cores, load_rows, swap, sb):
    return small_chip(rows=rows, cols=cols, cores=cores, arrays=2, spad_mib=0.05,
                      base="infer-2026",
                      sb_mib=0.5 if sb else None, load_rows=load_rows, swap=swap)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(rows=st.sampled_from([4, 8, 16]), cols=st.sampled_from([4, 8, 16]),
       cores=st.sampled_from([1, 3, 4]), load_rows=st.sampled_from([1, 4]),
       swap=st.sampled_from(["wave", "global"]), sb=st.booleans(),
       m=st.integers(1, 70), k=st.integers(1, 300), n=st.integers(1, 90),
       batch=st.integers(1, 4), weight=st.booleans(),
       dtype=st.sampled_from(["bf16", "fp8", "int4"]))
def test_fold_floor_bounds_every_candidate_and_the_engine(rows, cols, cores, load_rows, swap,
                                                          sb, m, k, n, batch, weight, dtype):
    chip = _chip(rows, cols, cores, load_rows, swap, sb)
    op = Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=weight, a_dtype=dtype,
              b_dtype=dtype, c_dtype="bf16")
    rates = array_rates(chip, op.compute_dtype)
    folded = op.b_is_weight and op.batch > 1
    m_total, b = (m * batch, 1) if folded else (m, batch)
    groups = G._groups(op, chip, rates, chip.core.array.dataflows, m_total, b)
    checked = 0
    for g in groups[::max(1, len(groups) // 12)]:
        split, peak, df, (view, mt, layout) = g[3], g[4], g[6], g[7]
        pb = MP.orient(view, df, split, mt, chip.tensor_cores, layout)
        floor = MP.split_fold_floor(chip, df, split, op.k, rates)
        assert floor == MP.fold_floor(chip.core.array.rows, chip.core.array.cols, df,
                                      pb.batch, pb.m, pb.k, pb.n, rates)
        try:
            cs, est, lb = MP.candidate_table(chip, pb, rates, split, peak)
        except ValueError:
            continue
        # the group's floor as the search uses it (the reduction of split-K added to both)
        assert g[0] - g[5] <= min(est.min(), lb.min())
        assert g[9] <= g[0]                 # never below the bytes-and-MACs floor
        for i in {0, len(cs) // 2, len(cs) - 1, int(est.argmin())}:
            blk = cs[i]
            assert floor <= MP.period_cycles(chip, pb, blk, rates)
            assert floor <= MP.compute_cycles(chip, pb, blk, rates) <= est[i]
            out, _, _ = G.run_engine(chip, pb, blk, rates, split, True)
            assert floor <= out[E.O_CYCLES]
            checked += 1
    assert checked > 0


def test_fold_floor_counts_the_row_folds_of_a_few_row_product():
    """Four query rows against 128-row arrays: MACs at the peak rate credit the array with
    4/128 of a fold per output tile, the fold count with a whole one (OS: ``max(k, R)`` steps;
    WS: the install path's period)."""
    chip = CHIPS["tpu-v4"]()
    rates = array_rates(chip, "bf16")
    R, C = chip.core.array.rows, chip.core.array.cols
    macs_floor = 8 * 4 * 128 * 1024 / (R * C * rates.rate)
    os_ = MP.fold_floor(R, C, "os", 8, 4, 128, 1024, rates)
    assert os_ == 8 * 1 * (1024 // C) * max(128, R)
    assert os_ >= 8 * macs_floor
    ws = MP.fold_floor(R, C, "ws", 8, 4, 128, 1024, rates)
    assert ws == 8 * -(-128 // rates.stationary_rows) * (1024 // C) * MP._ws_period(R, C, 4, rates)
    assert ws > 4 * 8 * (1024 // C)


@pytest.mark.parametrize("name,budget", [("h100", None), ("infer-2026", None),
                                         ("small-sb", None), ("small-sb", 300),
                                         ("infer-2026", 100), ("h100", 200)])
def test_search_with_fold_floors_equals_search_without(name, budget, monkeypatch):
    chip = CHIPS[name]()
    shapes = _shapes(7 + sorted(CHIPS).index(name), 4) + [
        Gemm(name="qk", m=4, k=128, n=1500, batch=8, b_is_weight=False),
        Gemm(name="pv", m=1, k=700, n=128, batch=8, b_is_weight=False)]
    if budget is not None:
        monkeypatch.setattr(MP, "MAX_SIMULATED_BLOCKS", budget)
    new = [G.plan(op, chip) for op in shapes]
    with monkeypatch.context() as mp:
        mp.setattr(MP, "split_fold_floor", lambda *a: 0)     # (the reference groups')
        mp.setattr(MP, "split_fold_floor_array",
                   lambda chip, df, rows, k, rates: np.zeros(len(rows), dtype=np.int64))
        old = [G.plan(op, chip) for op in shapes]
    for op, a, b in zip(shapes, new, old):
        # the same mapping and runs; the candidates of the tables built and the budget's
        # verdict are the search's own (fewer tables opened with the fold floors)
        da, db = _decision(a), _decision(b)
        assert da[:4] + da[5:6] == db[:4] + db[5:6], (name, op)
        assert a["candidates"] <= b["candidates"], (name, op)
        assert b["budget_hit"] or not a["budget_hit"], (name, op)
    if budget is not None:
        assert any(p["budget_hit"] for p in old), "the budget case must stop on the budget"


def test_split_fold_floor_transposes_for_input_stationary():
    chip = CHIPS["infer-2026"]()
    rates = array_rates(chip, "bf16")
    sp = dataclasses.replace(MP.splits(chip, 1, 300, 20)[0], m=300, n=20)
    R, C = chip.core.array.rows, chip.core.array.cols
    assert MP.split_fold_floor(chip, "is", sp, 64, rates) == MP.fold_floor(
        R, C, "ws", sp.batch, 20, 64, 300, rates)


@pytest.mark.parametrize("name,budget", [("infer-2026", 100), ("h100", 3000),
                                         ("small-sb", 300)])
def test_budget_hit_is_the_search_leaving_candidates_out(name, budget, monkeypatch):
    """``budget_hit`` False: the search with the budget is the search without one (the same
    mapping, engine runs and tables; the reference: ``MAX_SIMULATED_BLOCKS`` unbounded), so
    a result not flagged is the exhaustive search's (up to its tolerance)."""
    chip = CHIPS[name]()
    shapes = _shapes(3 + sorted(CHIPS).index(name), 4) + [
        Gemm(name="qk", m=4, k=128, n=1500, batch=8, b_is_weight=False)]
    monkeypatch.setattr(MP, "MAX_SIMULATED_BLOCKS", 1 << 62)
    free = [G.plan(op, chip) for op in shapes]
    monkeypatch.setattr(MP, "MAX_SIMULATED_BLOCKS", budget)
    capped = [G.plan(op, chip) for op in shapes]
    for op, a, b in zip(shapes, capped, free):
        if not a["budget_hit"]:
            assert _decision(a) == _decision(b), (name, op)
    hit = [p["budget_hit"] for p in capped]
    assert any(hit) and not all(hit) and not any(p["budget_hit"] for p in free)
