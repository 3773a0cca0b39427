"""A third memory tier (``[dram3]``; docs/chips.md, "A third tier"): a third tier the run
never needs changes nothing against the two-tier chip, three tiers with the first tier's DRAM
equal one DRAM holding all, a slower third tier never makes decode faster and costs at least
its bytes at its rate, the planner fills the tiers fastest first, the result says which
tensors live in which tier and what each costs, and the die edge, area, cost and bad input
see the third tier."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.arch.area import area_breakdown_mm2  # noqa: E402
from diptych.arch.chip import Dram, MemoryTier  # noqa: E402
from diptych.arch.cost import chip_cost  # noqa: E402
from diptych.arch.geometry import check, dies  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-3tier.toml"
DECODE = dict(phase="decode", batch=512, prompt=4000, gen=1)   # ~0.8 GB of KV and weights
GIB = 2**30


@pytest.fixture(scope="module")
def chip():
    """The example with no tier PHY area (the die, and so its static power, as without the
    tiers) and tiers too small for the tiny model: 0.25 GiB of HBM, 0.25 GiB of LPDDR5X, the
    rest behind CXL."""
    c = load_chip(str(EXAMPLE))
    return dataclasses.replace(
        c, dram=dataclasses.replace(c.dram, capacity_gib=0.25),
        dram2=dataclasses.replace(c.dram2, capacity_gib=0.25, mm2_per_phy=0.0),
        dram3=dataclasses.replace(c.dram3, mm2_per_phy=0.0))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def run(chip, model, **kw):
    return run_workload(chip, model, Scenario.of(**{**DECODE, **kw}))


def tier(chip, name, **kw):
    return dataclasses.replace(chip, **{name: dataclasses.replace(getattr(chip, name), **kw)})


def like_first(chip, gib: float) -> MemoryTier:
    """A tier with the first tier's DRAM record and energy per bit and ``gib`` of room."""
    d = {f.name: getattr(chip.dram, f.name) for f in dataclasses.fields(Dram)}
    return MemoryTier(**{**d, "kind": "ddr5", "capacity_gib": gib},
                      pj_per_bit=chip.energy.pj_per_dram_bit)


def test_a_third_tier_the_run_never_needs_is_bit_identical_to_two(chip, tiny):
    """Everything fits the first two tiers: time, traffic, energy and what each tier holds
    are those of the chip without ``[dram3]`` (the report adds an empty third tier)."""
    roomy = tier(chip, "dram2", capacity_gib=64.0)
    a, b = run(roomy, tiny), run(dataclasses.replace(roomy, dram3=None), tiny)
    assert b.info["memory_tiers"]["bytes"]["dram2"] > 0
    assert (a.seconds, a.dram_bytes, a.energy_j, a.energy_breakdown_j) == (
        b.seconds, b.dram_bytes, b.energy_j, b.energy_breakdown_j)
    ta, tb = a.info["memory_tiers"], b.info["memory_tiers"]
    assert ta["bytes"] == {**tb["bytes"], "dram3": 0}
    assert ta["tiers"]["dram2"] == tb["tiers"]["dram2"]
    assert ta["tiers"]["dram3"]["bytes_moved"] == 0


def test_tiers_like_the_first_equal_one_dram_holding_all(chip, tiny):
    """The tiers' records are what the engine times: three tiers each with the first tier's
    DRAM and energy per bit stream as one DRAM of their capacity (the ideal-tier limit: a
    tier as fast as the first costs nothing more)."""
    three = dataclasses.replace(chip, dram2=like_first(chip, 0.25), dram3=like_first(chip, 64))
    one = dataclasses.replace(chip, dram=dataclasses.replace(chip.dram, capacity_gib=64.5),
                              dram2=None, dram3=None)
    a, b = run(three, tiny), run(one, tiny)
    assert a.info["memory_tiers"]["bytes"]["dram3"] > 0
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    assert a.energy_j == pytest.approx(b.energy_j, rel=1e-9)
    assert a.dram_bytes == pytest.approx(b.dram_bytes, rel=1e-12)


def test_a_slower_third_tier_never_makes_decode_faster(chip, tiny):
    """The third tier's link rate and latency only add time; over a two-tier chip whose
    second tier held it all, the third tier's bytes cost at least those bytes at its rate
    less the same bytes at the second tier's (the closed form of streaming each share at
    its own rate)."""
    two = run(tier(dataclasses.replace(chip, dram3=None), "dram2", capacity_gib=64.0), tiny)
    runs = [run(tier(chip, "dram3", link_gb_per_s=g, link_latency_ns=ns), tiny)
            for g, ns in ((63.0, 0.0), (4.0, 1000.0))]
    secs = [r.seconds for r in runs]
    assert two.seconds <= secs[0] < secs[1]
    slow = runs[1]
    t3 = tier(chip, "dram3", link_gb_per_s=4.0).dram3
    moved = slow.info["memory_tiers"]["tiers"]["dram3"]["bytes_moved"]
    assert t3.bytes_per_s == 2 * 4e9 and moved > 0 and slow.fits
    floor = moved / t3.bytes_per_s - moved / chip.dram2.bytes_per_s
    assert slow.seconds - two.seconds >= 0.9 * floor > 0


def test_the_tiers_fill_fastest_first_and_the_result_says_where_and_at_what_cost(chip, tiny):
    """Each tier holds at most its capacity, the third only what the first two cannot;
    ``kinds`` splits each tier's bytes by tensor kind; each slower tier's report is its
    bytes at its own rate and its pJ/bit (independent of the engine's tiling)."""
    r = run(chip, tiny)
    mt = r.info["memory_tiers"]
    b = mt["bytes"]
    assert b["dram"] <= 0.25 * GIB and b["dram2"] <= 0.25 * GIB and b["dram3"] > 0
    assert b["dram"] + b["dram2"] > 0.4 * GIB        # the faster tiers are filled first
    for name, kinds in mt["kinds"].items():
        assert sum(kinds.values()) == b[name]
    assert "kv_cache" in mt["kinds"]["dram3"]
    for name in ("dram2", "dram3"):
        t, rep = getattr(chip, name), mt["tiers"][name]
        assert rep["stream_s"] == pytest.approx(rep["bytes_moved"] / t.bytes_per_s, rel=1e-12)
        assert rep["energy_j"] == pytest.approx(rep["bytes_moved"] * 8 * t.pj_per_bit * 1e-12,
                                                rel=1e-6)
        assert rep["added_s"] > 0
    assert mt["tiers"]["dram3"]["attach"] == "cxl"
    # the terminal table prints a line per slower tier, and the op records' third tier
    from rich.console import Console
    from diptych.tools.run_cmd import _layer_table, _totals_table
    con = Console(width=240, record=True)
    d = r.to_dict()
    con.print(_totals_table(d))
    con.print(_layer_table(d["layers"], d["seconds"], "t"))
    text = con.export_text()
    assert "tier 3 (ddr5, cxl)" in text and "DRAM3: kv_cache" in text


def test_the_example_places_every_tier_phy_on_the_edge_and_prices_the_tier():
    c = load_chip(str(EXAMPLE))
    assert check(c) == []
    ds = dies(c)
    tier_slots = [s for d in ds for s in d.slots if s.kind == "dram2_phy"]
    assert len(tier_slots) == c.dram2.phys + c.dram3.phys == sum(d.tier_phys for d in ds)
    edge = sum(s.length_mm for s in tier_slots)
    assert edge == pytest.approx(c.dram2.phys * c.dram2.mm_edge_per_phy
                                 + c.dram3.phys * c.dram3.mm_edge_per_phy)
    two = dataclasses.replace(c, dram3=None)
    assert area_breakdown_mm2(c)["dram_phy"] - area_breakdown_mm2(two)["dram_phy"] == \
        pytest.approx(c.dram3.phys * c.dram3.mm2_per_phy)
    assert chip_cost(c).dram_usd - chip_cost(two).dram_usd == pytest.approx(
        c.dram3.capacity_gib * c.dram3.usd_per_gb)


def _dram3(text: str) -> str:
    return text[text.index("[dram3]"):text.index("[interconnect]")]


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("[dram2]", "[unused]"), "dram3"),                      # no [dram2]
    (lambda t: t.replace("gbps_per_pin = 8.533", "gbps_per_pin = 1.0"), "dram3"),  # slow 2nd
    (lambda t: t.replace(_dram3(t), _dram3(t).replace("pj_per_bit = 25.0",
                                                      "pj_per_bit = 0.0")), "dram3.pj_per_bit"),
    (lambda t: t.replace(_dram3(t), _dram3(t).replace("capacity_gib = 512.0",
                                                      "capacity_gib = 0.0")),
     "dram3.capacity_gib"),
    (lambda t: t.replace(_dram3(t), _dram3(t).replace("mm_edge_per_phy = 3.0",
                                                      "mm_edge_per_phy = 60.0")),
     "third memory tiers ([dram2], [dram3]: 5 × dram2.mm_edge_per_phy = 4 mm, "
     "2 × dram3.mm_edge_per_phy = 60 mm)"),
])
def test_bad_third_tiers_exit_2_naming_the_key(tmp_path, edit, key):
    bad = tmp_path / "bad.toml"
    text = EXAMPLE.read_text()
    bad.write_text(edit(text))
    assert bad.read_text() != text
    r = CliRunner().invoke(main, ["chips", "validate", str(bad)])
    assert r.exit_code == 2 and key in r.output, r.output

