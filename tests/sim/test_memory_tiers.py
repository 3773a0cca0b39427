"""A second memory tier (``[dram2]``) in a run (docs/chips.md, "Memory tiers"): a tier the
run never needs changes nothing, a tier identical to the first equals one DRAM holding both,
a slower tier never makes decode faster, and its time is its bytes at its own rate; bad
tiers and runs the planner cannot place exit 2 naming why."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.chip import Dram, MemoryTier  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-lpddr.toml"
DECODE = dict(phase="decode", batch=512, prompt=4000, gen=1)   # ~1 GB of KV: past the SRAM


@pytest.fixture(scope="module")
def chip():
    return load_chip(str(EXAMPLE))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def small_first_tier(chip, gib: float = 0.5):
    """The chip with a first tier too small for the tiny model's weights and KV cache."""
    return dataclasses.replace(chip, dram=dataclasses.replace(chip.dram, capacity_gib=gib))


def same_as_first(chip, gib: float) -> MemoryTier:
    """A second tier with the first tier's DRAM, energy per bit and ``gib`` of room."""
    d = {f.name: getattr(chip.dram, f.name) for f in dataclasses.fields(Dram)}
    return MemoryTier(**{**d, "kind": "ddr5" if chip.dram.kind.startswith("hbm") else d["kind"],
                         "capacity_gib": gib}, pj_per_bit=chip.energy.pj_per_dram_bit)


def run(chip, model, **kw):
    return run_workload(chip, model, Scenario.of(**{**DECODE, **kw}))


def test_a_tier_the_run_never_needs_changes_nothing(chip, tiny):
    """Bit-identical time, traffic and placement; the energy moves only by the die area the
    tier's PHYs add (idle arrays gate a smaller share of the static power): with that area
    set to zero, bit-identical energy too."""
    alone = dataclasses.replace(chip, dram2=None)
    a, b = run(chip, tiny), run(alone, tiny)
    assert a.seconds == b.seconds and a.dram_bytes == b.dram_bytes
    assert "memory_tiers" not in a.info
    no_phy = dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, mm2_per_phy=0.0))
    c = run(no_phy, tiny)
    assert (c.seconds, c.energy_j, c.energy_breakdown_j) == (b.seconds, b.energy_j,
                                                            b.energy_breakdown_j)


def test_a_tier_like_the_first_equals_one_dram_holding_both(chip, tiny):
    """The tier's kind is only a label to the timing: with the first tier's channels,
    timings and energy it streams as the first does (the DRAM record is what the engine
    times), so splitting the state over two equals one DRAM of their capacity."""
    small = small_first_tier(chip)
    two = dataclasses.replace(small, dram2=same_as_first(chip, 64.0))
    one = dataclasses.replace(small, dram=dataclasses.replace(small.dram, capacity_gib=64.5),
                              dram2=None)
    a, b = run(two, tiny), run(one, tiny)
    assert a.info["memory_tiers"]["bytes"]["dram2"] > 0
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    assert a.energy_j == pytest.approx(b.energy_j, rel=1e-9)
    assert a.dram_bytes == pytest.approx(b.dram_bytes, rel=1e-12)


def test_a_slower_tier_costs_its_bytes_at_its_rate(chip, tiny):
    """LPDDR5X at 0.34 TB/s behind a too-small HBM: never faster than HBM holding it all,
    and slower by at least the tier's bytes at its pin bandwidth less the same bytes at the
    first tier's."""
    small = small_first_tier(chip)
    big = dataclasses.replace(chip, dram2=None)
    a, b = run(small, tiny), run(big, tiny)
    moved = a.info["memory_tiers"]["dram2_bytes_moved"]
    assert moved > 0 and a.fits
    floor = moved / chip.dram2.peak_bytes_per_s - moved / chip.dram.peak_bytes_per_s
    assert a.seconds - b.seconds >= 0.9 * floor > 0


def test_more_first_tier_is_never_slower(chip, tiny):
    times = [run(small_first_tier(chip, g), tiny).seconds for g in (0.25, 0.5, 1.0)]
    assert times[0] >= times[1] >= times[2]


def test_runs_the_planner_cannot_place_are_refused(chip, tiny):
    small = small_first_tier(chip)
    with pytest.raises(ValueError, match="execution schedule"):
        run(small, tiny, execution="sum")
    with pytest.raises(ValueError, match="--offload optimizer or --offload params"):
        run_workload(small_first_tier(chip, 0.001), tiny,
                     Scenario.of(phase="train", batch=8, seq=2048))


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('kind = "lpddr5x"', 'kind = "hbm3e"'), "dram2.kind"),
    (lambda t: t.replace("pj_per_bit = 4.0", "pj_per_bit = -1.0"), "dram2.pj_per_bit"),
    (lambda t: t.replace("pj_per_bit = 4.0", "pj_per_bit = 0.0"), "dram2.pj_per_bit"),
    (lambda t: t.replace("capacity_gib = 160.0", "capacity_gib = 0.0"), "dram2.capacity_gib"),
])
def test_bad_tiers_exit_2_naming_the_key(tmp_path, edit, key):
    bad = tmp_path / "bad.toml"
    bad.write_text(edit(EXAMPLE.read_text()))
    r = CliRunner().invoke(main, ["chips", "validate", str(bad)])
    assert r.exit_code == 2 and key in r.output
