"""The engine's branch and bound (``run_schedule`` with ``P_CUTOFF``/``P_BEST``, the early
outs before and after a block's next loads) against the reference: the same run played to
the end with no cutoff (final cycles ``F``). For the search's cutoffs ``c`` and bests ``b``
(``c ≤ b + 1``: ``gemm.plan`` passes ``int(best·(1 − tol)) + 1`` and ``best``, both less a
split-K reduction's cycles):

* a run that finishes is the full run, every output bit for bit;
* a run with ``F < c`` always finishes (no bound exceeds the final cycles);
* a run that stops has ``F ≥ c`` and its reported bound (``O_CYCLES``) is at most ``F``;
* with a cutoff above ``F`` and a best below it (outside the search's range: only the bounds
  tested against the best can stop the run), a run stops only if ``F > b``: those bounds
  (the DRAM backlog before the next loads, the refresh windows, the last tile's
  write-back after the last output) never exceed the final cycles either.

On random small chips (shared buffers, residencies, waves, tails, WS install paths) and on
preset shapes, many candidates per group and cutoffs from far below to above ``F``. The WS
step of the write-back bound (the last row at least the remaining fold periods less the
last fold's ``period − rows`` after a block's last row) is checked on its own, on every
block of traced full runs."""

import random

import pytest
from hypothesis import given, settings

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.workloads.ops import Gemm

from simtest_helpers import GEMM_CASE_DRAWS, picked_candidates, random_gemm_case


def _cuts(f: int, rng: random.Random) -> list[tuple[int, int]]:
    """(cutoff, best) pairs around the final cycles ``f``: far below, near, at and above it,
    with the best at the cutoff's tolerance or well above it (``cutoff ≤ best + 1``)."""
    out = []
    for c in {1, max(1, f // 2), max(1, int(f * 0.97)), f - 1, f, f + 1,
              max(1, int(f * rng.uniform(0.5, 1.1)))}:
        if c < 1:
            continue
        for b in {0, max(0, c - 1), c + (f // 20), max(c - 1, f)}:
            out.append((c, b))
    # the bounds tested against the best alone: a cutoff the run always beats (c > F), bests
    # just below F (a run may stop only on a bound above the best, so only if F > b)
    for b in {f - 1, f - 1 - f // 200, f - 1 - f // 50, f // 2}:
        if b > 0:
            out.append((f + 1 + f // 50, b))
    return out


def _check(chip, op, per_group: int, stride: int, rng: random.Random) -> tuple[int, int]:
    """Check the rules above on ``per_group`` candidates of every ``stride``-th group of
    ``op``; returns (runs checked, runs stopped, runs stopped within 5 % of their final
    cycles)."""
    checked = stopped = near = 0
    for pb, cs, i, rates, split, df in picked_candidates(chip, op, per_group, stride, rng):
        full, _, _ = G.run_engine(chip, pb, cs[i], rates, split, True)
        assert not full[E.O_ABORTED]
        f = int(full[E.O_CYCLES])
        for c, best in _cuts(f, rng):
            out, _, _ = G.run_engine(chip, pb, cs[i], rates, split, True, cutoff=c,
                                     best=best)
            what = (chip.name, op, split, df, cs[i], f, c, best)
            if out[E.O_ABORTED]:
                stopped += 1
                near += f < c * 1.05 or f < best * 1.05
                if c > best + 1:   # (only the bounds against the best could stop it;
                    assert f > best, what   # the refresh one reports the cutoff)
                else:
                    assert f >= c and out[E.O_CYCLES] <= f, what
            else:
                assert out.tolist() == full.tolist(), what
            if f < c and f <= best:
                assert not out[E.O_ABORTED], what
            checked += 1
    return checked, stopped, near


@settings(max_examples=25, deadline=None, derandomize=True)
@given(**GEMM_CASE_DRAWS)
def test_cutoff_runs_against_runs_to_the_end(base, rows, cols, cores, arrays, load_rows, swap,
                                             sb, m, k, n, batch, weight, dtype, res):
    chip, op = random_gemm_case(base, rows, cols, cores, arrays, load_rows, swap, sb, m, k,
                                n, batch, weight, dtype, res)
    checked, _, _ = _check(chip, op, 2, 3, random.Random(m * 1000 + k))
    assert checked > 0


@pytest.mark.parametrize("chip_name,m,k,n", [
    ("h100", 16, 4096, 28672), ("h100", 128, 14336, 4096), ("infer-2026", 8, 8192, 1024),
    ("infer-2026", 2048, 4096, 1024), ("tpu-v4", 512, 1100, 2100),
    ("train-2026", 8, 8192, 1024), ("train-2026", 32, 8192, 8192), ("tpu-v4", 4, 4096, 1100),
    ("tpu-v4", 64, 3000, 1000)])
def test_cutoff_on_preset_shapes(chip_name, m, k, n):
    """Preset chips (many pseudo-channels, refresh, waves, sub-chips): the rules hold and
    runs do stop, some within 5 % of their final cycles (the bound is tight near the end,
    so the test can fail)."""
    chip = load_chip(chip_name)
    checked, stopped, near = _check(chip, Gemm(name="p", m=m, k=k, n=n), 2, 40,
                                    random.Random(m + k + n))
    assert checked > 0 and stopped > 0 and near > 0


def _ws_lemma(chip, op, picks: int, rng: random.Random) -> tuple[int, int]:
    """The WS lemma behind the write-back bound, on every block of traced full runs: the
    run's last output + 1 is at least block b's + the fold periods after it less the last
    fold's ``period − rows`` (``lo_final + 1 ≥ lo_b + 1 + rem_b − slack``; ``lo + 1 = last row
    + R + C``). Returns (blocks checked, blocks where it would fail without the slack)."""
    from diptych.sim import timing as T
    rates = array_rates(chip, op.compute_dtype)
    groups = G._groups(op, chip, rates, ("ws",), op.m, op.batch)
    checked = tight = 0
    for g in groups[::max(1, len(groups) // 6)]:
        split, peak, (view, mt, layout) = g[3], g[4], g[7]
        pb = MP.orient(view, "ws", split, mt, chip.tensor_cores, layout)
        try:
            cs, _, _ = MP.candidate_table(chip, pb, rates, split, peak)
        except ValueError:
            continue
        for i in {0, len(cs) - 1} | {rng.randrange(len(cs)) for _ in range(picks)}:
            blk = cs[i]
            ip = MP.engine_base(chip, pb, rates, split, True)[0]
            R, C = int(ip[E.P_R]), int(ip[E.P_C])
            num, den, rk = int(ip[E.P_WS_NUM]), int(ip[E.P_WS_DEN]), int(ip[E.P_RK])
            p, wave = int(ip[E.P_WS_LOAD_P]), int(ip[E.P_WS_WAVE])
            nblk = pb.batch * -(-pb.m // blk.mb) * -(-pb.k // blk.kb) * -(-pb.n // blk.nb)
            out, tb, _ = G.run_engine(chip, pb, blk, rates, split, True, trace_blocks=nblk)
            pers = []
            for row in tb:
                mb = min(blk.mb, pb.m - int(row[E.T_I]) * blk.mb)
                kb = min(blk.kb, pb.k - int(row[E.T_K]) * blk.kb)
                nb = min(blk.nb, pb.n - int(row[E.T_J]) * blk.nb)
                me = T.ws_fold_rows(mb, num, den)
                pers.append((-(-kb // rk) * -(-nb // C) * T.ws_period(R, C, me, p, wave), me))
            # (the engine's P_PERIODS, which the bound's ``rem`` comes from, is their sum)
            assert sum(x[0] for x in pers) == MP.period_cycles(chip, pb, blk, rates)
            slack = T.ws_period(R, C, pers[-1][1], p, wave) - pers[-1][1]
            last = int(tb[-1, E.T_CE])
            rem = 0
            for b in range(nblk - 1, -1, -1):
                want = int(tb[b, E.T_CE]) + rem - slack
                assert last >= want, (chip.name, op, split, blk, b, last, want)
                tight += last - want < slack
                checked += 1
                rem += pers[b][0]
    return checked, tight


@pytest.mark.parametrize("chip_name,m,k,n", [
    ("tpu-v4", 4, 4096, 1100), ("tpu-v4", 200, 1000, 700), ("train-2026", 8, 2048, 1024),
    ("groq-lpu", 8, 1024, 640)])
def test_ws_last_row_lemma(chip_name, m, k, n):
    """Holds on every block (and the periods' sum is the engine's ``P_PERIODS``)."""
    chip = load_chip(chip_name)
    dt = "int8" if chip_name == "groq-lpu" else "bf16"
    checked, _ = _ws_lemma(chip, Gemm(name="w", m=m, k=k, n=n, a_dtype=dt, b_dtype=dt,
                                      c_dtype=dt), 2, random.Random(m + k + n))
    assert checked > 0
