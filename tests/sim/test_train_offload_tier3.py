"""A one-node training step's offloaded state in a third memory tier (``[dram3]``, issue 25;
:mod:`diptych.sim.run.offload`, "A third tier"): a second tier that holds the state leaves the
step bit for bit as without the third; what it cannot hold lives in the third (the tiers'
traffic adds up to the offload's closed form ``2·K·P``, the third's share ``(B − C₂)/B`` of
it); a third tier like the second equals
one larger second tier; a slower third tier makes the step slower."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.chip import TENSOR_KINDS, ResidencyPolicy  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.workloads.params import params_per_chip  # noqa: E402
from diptych.workloads.registry import load_model  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "chips"
TRAIN = dict(phase="train", batch=2, seq=256, offload="optimizer")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


@pytest.fixture(scope="module")
def chip():
    """The three-tier example without tier PHY area, no training state kept on chip (as
    tests/sim/test_train_offload.py's two-tier chip)."""
    c = load_chip(str(EXAMPLES / "infer-2026-3tier.toml"))
    off_chip = tuple(k for k in TENSOR_KINDS if k not in ("weight", "optimizer_state"))
    return dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0),
                               dram3=dataclasses.replace(c.dram3, mm2_per_phy=0.0),
                               residency=ResidencyPolicy(scratchpad_kinds=off_chip,
                                                         shared_buffer_kinds=off_chip))


def run(chip, model, **kw):
    return run_workload(chip, model, Scenario.of(**{**TRAIN, **kw}))


def small2(chip, **kw3):
    """A 10 MiB second tier (the tiny model's optimizer state is 31.5 MiB)."""
    return dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, capacity_gib=0.01),
                               dram3=dataclasses.replace(chip.dram3, **kw3))


def test_a_second_tier_that_holds_the_state_is_as_without_the_third(chip, tiny):
    a, b = run(chip, tiny), run(dataclasses.replace(chip, dram3=None), tiny)
    assert (a.seconds, a.dram_bytes, a.energy_j) == (b.seconds, b.dram_bytes, b.energy_j)
    assert a.info["offload"]["tier3_bytes"] == 0.0


def test_what_the_second_cannot_hold_lives_in_the_third(chip, tiny):
    c = small2(chip)
    r = run(c, tiny)
    n = params_per_chip(load_model(tiny), 1)
    off, mt = r.info["offload"], r.info["memory_tiers"]
    assert r.fits and off["tier3_bytes"] > 0 and mt["bytes"]["dram3"] > 0
    assert "optimizer_state" in mt["kinds"]["dram3"]
    assert off["tier2_bytes"] + off["tier3_bytes"] == pytest.approx(12.0 * n, rel=1e-12)
    # the update moves 2·12·P in the two tiers, the third the share s₃ = (B − C₂)/B of it
    s3 = (12.0 * n - c.dram2.capacity_bytes) / (12.0 * n)
    assert off["tier2_bytes_moved"] + off["tier3_bytes_moved"] == pytest.approx(24.0 * n,
                                                                                rel=1e-9)
    assert off["tier3_bytes_moved"] == pytest.approx(24.0 * n * s3, rel=1e-9)
    assert off["tier3_bytes"] == pytest.approx(12.0 * n * s3, rel=1e-9)
    assert not run(dataclasses.replace(c, dram3=None), tiny).fits


def test_a_third_tier_like_the_second_equals_a_larger_second(chip, tiny):
    d2 = chip.dram2
    three = dataclasses.replace(chip, dram2=dataclasses.replace(d2, capacity_gib=0.01),
                                dram3=d2)
    a, b = run(three, tiny), run(dataclasses.replace(chip, dram3=None), tiny)
    assert a.info["offload"]["tier3_bytes"] > 0
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    # the NoC's share aside: the floorplan puts both tiers' PHYs on the die edge, so the
    # on-die distances to them differ from one tier's
    ea, eb = a.energy_breakdown_j, b.energy_breakdown_j
    for k in ea:
        if k != "noc":
            assert ea[k] == pytest.approx(eb[k], rel=1e-9), k


def test_a_slower_third_tier_makes_the_step_slower(chip, tiny):
    fast, slow = (run(small2(chip, link_gb_per_s=g, link_latency_ns=ns), tiny)
                  for g, ns in ((63.0, 200.0), (1.0, 2000.0)))
    assert fast.seconds < slow.seconds
