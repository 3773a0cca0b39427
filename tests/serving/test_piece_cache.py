"""The serving grid's pieces in the user's cache (sim/serving/piece_cache.py): read back bit
for bit in another process's place, the same count of pieces, never a test double's, bad
entries refused, off with the op cache."""

from __future__ import annotations

import json

import pytest
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.sim import api, cache
from diptych.sim.run.scenario import Scenario
from diptych.sim.serving import piece_cache
from diptych.sim.serving.grid_timer import GridSpec, GridStepTimer
from diptych.sim.serving.step_pieces import StepPieces
from diptych.sim.serving.step_time import make_replica
from diptych.workloads.serving_step import Step


def _replica(execution="schedule"):
    return make_replica("h100", "phi-3-mini-4k", Scenario(phase="decode", execution=execution))


def _pieces(pc: StepPieces):
    return [pc.frame_at(3), pc.head_at(5), pc.dec_exact(2, 40, 1), pc.pf_at(16, 0)]


def _new_process():
    api._gemm_cached.cache_clear()
    api._vector_cached.cache_clear()


@pytest.mark.parametrize("execution", ["schedule", "sum"])
def test_pieces_read_back_bit_for_bit_and_count_the_same(fresh, execution):
    r = _replica(execution)
    cold = StepPieces(r)
    want = _pieces(cold)
    assert cold.store.hits == 0 and cache.info()["entries"] > 0
    _new_process()
    warm = StepPieces(r)
    got = _pieces(warm)
    assert got == want                               # every float, exactly
    assert warm.simulations == cold.simulations      # the cores a scheduled frame times too
    assert warm.store.hits == warm.simulations
    assert warm.blocks == cold.blocks and warm.kind_repeats == cold.kind_repeats


def test_a_grid_step_costs_the_same_with_the_cache_full_empty_or_off(fresh):
    r = _replica()
    step = Step(decode_batch=3, decode_keys=150, prefill=((20, 0),))
    grid = GridSpec(refine_tol=None)
    with cache.disabled():
        off = GridStepTimer(r, grid=grid).cost(step)
    assert cache.info()["entries"] == 0               # --no-cache stores nothing either
    _new_process()
    empty = GridStepTimer(r, grid=grid).cost(step)
    _new_process()
    full = GridStepTimer(r, grid=grid)
    assert full.cost(step) == empty == off
    assert full.pieces.store.hits == full.simulations > 0


def _stored(r) -> list[bool]:
    d = piece_cache.replica_digest(r)
    return [cache._path(piece_cache.piece_key(d, kind, args)).exists()
            for kind, args in (("frame", (3, 1)), ("frame", (5, 5)), ("decode", (2, 40, 1)),
                               ("prefill", (16, 0)))]


def test_a_test_doubles_pieces_are_never_stored_nor_served(fresh, monkeypatch):
    r = _replica()
    _pieces(StepPieces(r, roofline))                  # a double passed in
    assert _stored(r) == [False] * 4
    engine = run_mod._default_simulate
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    assert not piece_cache.engine_timed(None)
    pc = StepPieces(r)                                # a double as the default
    _pieces(pc)
    assert _stored(r) == [False] * 4 and pc.store.hits == 0
    monkeypatch.setattr(run_mod, "_default_simulate", engine)
    _pieces(StepPieces(r))                            # the engine's are
    assert _stored(r) == [True] * 4


def test_keys_tell_replicas_and_pieces_apart():
    a, b = _replica("schedule"), _replica("sum")
    da, db = piece_cache.replica_digest(a), piece_cache.replica_digest(b)
    assert da == piece_cache.replica_digest(_replica("schedule")) and da != db
    keys = {piece_cache.piece_key(d, kind, args) for d in (da, db)
            for kind, args in (("frame", (3, 1)), ("frame", (3, 3)), ("decode", (3, 1, 1)),
                               ("prefill", (3, 1)))}
    assert len(keys) == 8


def test_a_change_that_moves_a_step_time_changes_every_key():
    """Each of chip (another preset, or one field of the same: the clock), model, tensor
    parallelism, precision, attention, execution, fusion and overlap gives another replica
    digest, so no piece of one is served to another; an equal replica built again (a new
    process's) gets the same one."""
    import dataclasses
    base = _replica()
    d0 = piece_cache.replica_digest(base)
    assert piece_cache.replica_digest(_replica()) == d0
    chip = base.chip
    changed = {
        "chip": dataclasses.replace(base, chip=make_replica(
            "tpu-v5e", "phi-3-mini-4k", Scenario(phase="decode")).chip),
        "clock": dataclasses.replace(base, chip=dataclasses.replace(
            chip, clock_ghz=chip.clock_ghz * 0.9)),
        "model": make_replica("h100", "llama-3-8b", Scenario(phase="decode")),
        "tp": make_replica("h100", "phi-3-mini-4k", Scenario.of(phase="decode", tp=2)),
        "precision": make_replica("h100", "phi-3-mini-4k",
                                  Scenario(phase="decode", weights_dtype="fp8")),
        "attention": dataclasses.replace(base, attention="unfused"),
        "execution": _replica("sum"),
        "fusion": dataclasses.replace(base, fusion=False),
        "overlap": dataclasses.replace(base, overlap=False),
    }
    digests = {what: piece_cache.replica_digest(r) for what, r in changed.items()}
    assert d0 not in digests.values(), [w for w, d in digests.items() if d == d0]
    assert len(set(digests.values())) == len(digests)
    # and the piece's own arguments: a key per (kind, args)
    assert piece_cache.piece_key(d0, "frame", (3, 1)) != piece_cache.piece_key(
        digests["clock"], "frame", (3, 1))


@pytest.mark.parametrize("values,why", [
    ([float("nan")], "values[0]"),
    ([1.0, "fast"], "values[1]"),
    ([True], "values[0]"),
    ([], "values is not a list"),
    ([1e31], "values[0]"),
])
def test_a_forged_piece_is_refused_and_recomputed(fresh, values, why):
    r = _replica()
    want = StepPieces(r).dec_exact(2, 40, 1)
    k = piece_cache.piece_key(piece_cache.replica_digest(r), "decode", (2, 40, 1))
    p = cache._path(k)
    d = json.loads(p.read_text())
    d["result"]["values"] = values
    d["sha256"] = cache._checksum(k, d["result"])     # a deliberate forger
    assert why in cache.check_entry(k, d, piece_cache.check_piece)
    p.write_text(json.dumps(d))
    _new_process()
    pc = StepPieces(r)
    with pytest.warns(UserWarning, match=r"cache entry .* is invalid"):
        assert pc.dec_exact(2, 40, 1) == want
    assert pc.store.hits == 0
    assert StepPieces(r).dec_exact(2, 40, 1) == want  # rewritten, valid again


_CHILD = """
import dataclasses, json, sys
from diptych.sim.run.scenario import Scenario
from diptych.sim.serving.step_pieces import StepPieces
from diptych.sim.serving.step_time import make_replica
model, clock = sys.argv[1], float(sys.argv[2])
r = make_replica("h100", model, Scenario(phase="decode", execution="sum"))
r = dataclasses.replace(r, chip=dataclasses.replace(r.chip, clock_ghz=r.chip.clock_ghz * clock))
pc = StepPieces(r)
vals = [pc.dec_exact(2, 40, 1)]
print(json.dumps({"values": [list(map(repr, v)) for v in vals], "hits": pc.store.hits,
                  "simulations": pc.simulations}))
"""


def test_a_second_process_reads_the_first_ones_pieces_and_another_replica_misses(tmp_path):
    """Real processes on one cache home (XDG_CACHE_HOME, as a user's): the second reads
    every piece the first simulated, bit for bit (floats as repr), and simulates none; a
    process of another chip (h100's clock × 0.9) finds none of them."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    for k in ("DIPTYCH_CACHE_DIR", "DIPTYCH_NO_CACHE"):
        env.pop(k, None)

    def child(clock="1.0", model="phi-3-mini-4k"):
        out = subprocess.run([sys.executable, "-c", _CHILD, model, clock], env=env,
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    first = child()
    assert first["hits"] == 0 and first["simulations"] == 1
    assert any((tmp_path / "diptych").rglob("*"))     # written under the cache home
    second = child()
    assert second == {**first, "hits": 1}
    other = child(clock="0.9")     # (every other field: test_a_change_that_moves_...)
    assert other["hits"] == 0 and other["values"] != first["values"]
