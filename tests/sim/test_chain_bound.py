"""The candidate table's load-chain bound (``mapper_kernels.chain_bound``, the table's
``T_CHAIN`` column) is at most the engine's cycles of its candidate (the reference: the
engine itself, run to the end with no cutoff), on random small chips, shapes, blockings,
shared-buffer modes and residencies and on the presets' serving shapes; and the search that
skips the engine runs it rules out makes the same decision, budget verdict and candidate
count as the search that runs them (``plan(chains=False)``, the previous search), with no more
runs."""

import random

import pytest
from hypothesis import given, settings

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim import mapper_kernels as MK
from diptych.workloads.ops import Gemm

from simtest_helpers import GEMM_CASE_DRAWS, picked_candidates, random_gemm_case
from test_plan_fast_path import CHIPS, _shapes


def _check_groups(chip, op, per_group: int, stride: int, rng: random.Random) -> int:
    """Assert chain ≤ engine cycles on ``per_group`` candidates of every ``stride``-th group
    of ``op`` on ``chip``; returns the candidates checked."""
    checked = 0
    for pb, cs, i, rates, split, df in picked_candidates(chip, op, per_group, stride, rng):
        out, _, _ = G.run_engine(chip, pb, cs[i], rates, split, True)
        assert not out[E.O_ABORTED]
        chain = int(cs.rows[i, MK.T_CHAIN])
        assert 0 < chain <= out[E.O_CYCLES], (chip.name, op, split, df, cs[i], chain,
                                             out[E.O_CYCLES])
        checked += 1
    return checked


@settings(max_examples=60, deadline=None, derandomize=True)
@given(**GEMM_CASE_DRAWS)
def test_chain_bound_at_most_the_engine(base, rows, cols, cores, arrays, load_rows, swap, sb,
                                        m, k, n, batch, weight, dtype, res):
    chip, op = random_gemm_case(base, rows, cols, cores, arrays, load_rows, swap, sb, m, k,
                                n, batch, weight, dtype, res)
    rng = random.Random(m * 1000 + k)
    groups = 12
    assert _check_groups(chip, op, 6, max(1, groups // 4), rng) > 0


@pytest.mark.parametrize("chip_name,m,k,n", [
    ("h100", 1, 4096, 6144), ("h100", 16, 4096, 28672), ("h100", 128, 14336, 4096),
    ("infer-2026", 8, 8192, 1024), ("tpu-v4", 64, 4096, 4096)])
def test_chain_bound_on_preset_serving_shapes(chip_name, m, k, n):
    """llama-3-8b's projections (decode and prefill rows) on the presets the serving
    benchmarks use: large DMA setups (H100's 200 cycles), waves and sub-chips."""
    chip = load_chip(chip_name)
    rng = random.Random(m + k + n)
    op = Gemm(name="p", m=m, k=k, n=n)
    assert _check_groups(chip, op, 2, 40, rng) > 0


@pytest.mark.parametrize("name,budget", [(n, None) for n in sorted(CHIPS)] + [("h100", 3000)])
def test_search_with_chains_decides_as_without(name, budget, monkeypatch):
    """The same decision, budget verdict and candidate count, fewer runs; also where a small
    budget stops the search (the skipped runs count against it as before)."""
    if budget is not None:
        monkeypatch.setattr(MP, "MAX_SIMULATED_BLOCKS", budget)
    chip = CHIPS[name]()
    fewer = hits = 0
    for op in _shapes(11 + sorted(CHIPS).index(name), 8):
        with_ = G.plan(op, chip)
        without = G.plan(op, chip, chains=False)
        for key in ("split", "problem", "blocks", "candidates", "budget_hit"):
            assert with_[key] == without[key], (name, op, key)
        assert with_["out"].tolist() == without["out"].tolist()
        assert with_["simulated"] <= without["simulated"]
        fewer += with_["simulated"] < without["simulated"]
        hits += with_["budget_hit"]
    if name == "h100":
        assert fewer > 0        # (the bound rules runs out where DMA setups dominate)
    if budget is not None:
        assert hits > 0         # (the case is one where the budget stops searches)
