"""A plan's offloaded training state in a third memory tier (``[dram3]``, issue 25;
:mod:`diptych.sim.run.offload`, "A third tier"): a second tier that holds the state leaves the
step bit for bit as without the third; what it cannot hold lives in the third, whose share
of the bytes held and moved is the closed form ``(B − C₂)/B``; a third tier like the second
equals one larger second tier; a slower third tier never makes a step faster; the state
fits when the two tiers together hold it (so ``plan`` can choose it)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.sim.cluster.run import build_plan, run_cluster_step  # noqa: E402
from diptych.sim.run import Scenario  # noqa: E402
from diptych.sim.run.offload import param_fetch_seconds, third_tier_share  # noqa: E402
from diptych.workloads.params import params_per_chip  # noqa: E402
from diptych.workloads.registry import load_model  # noqa: E402

THREE = str(Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-3tier.toml")
STEP = dict(phase="train", batch=8, seq=256, chips=2, tp=1, dp=2, micro_batch=1)
GIB = 2.0 ** 30


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


@pytest.fixture(scope="module")
def chip():
    """The three-tier example without tier PHY area (its static power as without them)."""
    c = load_chip(THREE)
    return dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0),
                               dram3=dataclasses.replace(c.dram3, mm2_per_phy=0.0))


def step(chip, model, offload="optimizer"):
    s = Scenario.of(**STEP, offload=offload)
    return run_cluster_step(chip, model, s, plan=build_plan(s, zero=1))


def small2(chip, gib=0.005, **kw3):
    """A 5 MiB second tier (the tiny model's optimizer shard is 15.4 MiB)."""
    return dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, capacity_gib=gib),
                               dram3=dataclasses.replace(chip.dram3, **kw3))


def test_a_second_tier_that_holds_the_state_is_as_without_the_third(chip, tiny):
    a, b = step(chip, tiny, "params"), step(dataclasses.replace(chip, dram3=None), tiny, "params")
    assert (a.seconds, a.energy_j) == (b.seconds, b.energy_j)
    assert a.info["offload"]["tier3_bytes"] == 0.0
    assert a.info["offload"]["transfer_seconds"] == b.info["offload"]["transfer_seconds"]


def test_what_the_second_cannot_hold_lives_in_the_third_in_closed_form(chip, tiny):
    c = small2(chip)
    r = step(c, tiny)
    n = params_per_chip(load_model(tiny), 1)
    held, moved = 12.0 * n / 2, 24.0 * n / 2       # ZeRO-1 over dp = 2 (fp32 state)
    s3 = (held - c.dram2.capacity_bytes) / held
    assert third_tier_share(c, held) == pytest.approx(s3, rel=1e-12) and 0.5 < s3 < 1
    off = r.info["offload"]
    assert off["tier3_bytes"] == pytest.approx(held * s3, rel=1e-9)
    assert off["tier2_bytes"] + off["tier3_bytes"] == pytest.approx(held, rel=1e-12)
    assert off["tier3_bytes_moved"] == pytest.approx(moved * s3, rel=1e-9)
    assert off["transfer_seconds"] == pytest.approx(
        moved * (1 - s3) / c.dram2.bytes_per_s + moved * s3 / c.dram3.bytes_per_s, rel=1e-9)
    assert r.fits
    # without the third tier the same state does not fit
    assert not step(dataclasses.replace(c, dram3=None), tiny).fits


def test_a_third_tier_like_the_second_equals_a_larger_second(chip, tiny):
    """Tier 3 with tier 2's pins, no link and tier 2's energy per bit behind a full 5 MiB
    tier 2: the update and each layer's weight stream take what one tier 2 of both
    capacities gives (the second tier's share and the third's at one rate)."""
    d2 = chip.dram2
    like = dataclasses.replace(d2, capacity_gib=64.0)
    three = dataclasses.replace(chip, dram2=dataclasses.replace(d2, capacity_gib=0.005),
                                dram3=like)
    two = dataclasses.replace(chip, dram2=like, dram3=None)
    a, b = step(three, tiny, "params"), step(two, tiny, "params")
    assert a.info["offload"]["tier3_bytes"] > 0
    assert a.stage_seconds[0]["optimizer_s"] == pytest.approx(
        b.stage_seconds[0]["optimizer_s"], rel=1e-9)
    for kind, ls in a.layers.items():           # the weights' stream, layer by layer
        assert ls.fwd_compute == pytest.approx(b.layers[kind].fwd_compute, rel=1e-12)
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    assert param_fetch_seconds(three, 1e6, 0.7) == pytest.approx(
        param_fetch_seconds(two, 1e6), rel=1e-12)


def test_a_slower_third_tier_never_makes_a_step_faster(chip, tiny):
    runs = [step(small2(chip, link_gb_per_s=g, link_latency_ns=ns), tiny, "params")
            for g, ns in ((63.0, 200.0), (0.5, 2000.0))]
    assert runs[0].seconds < runs[1].seconds
    assert runs[0].stage_seconds[0]["optimizer_s"] < runs[1].stage_seconds[0]["optimizer_s"]
