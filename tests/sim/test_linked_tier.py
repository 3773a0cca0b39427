"""A second memory tier behind a link (``[dram2] attach = "cxl"``, ``"pcie"``, ``"c2c"``;
docs/chips.md, "A tier behind a link"): a link that cannot bind equals the same DRAM on the
package (bit-identical), a slower or longer link never makes decode faster and costs at least
the tier's bytes at the link's rate, a run that fits the first tier is bit-identical to the
chip without the tier, the link's PHYs go on the die edge, and bad links exit 2 naming the
file, key and value."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

from diptych.arch import load_chip  # noqa: E402
from diptych.sim.run import Scenario, run_workload  # noqa: E402
from diptych.tools.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chips" / "infer-2026-cxl.toml"
DECODE = dict(phase="decode", batch=512, prompt=4000, gen=1)   # ~0.8 GB of KV and weights


@pytest.fixture(scope="module")
def chip():
    """The example with no PHY area (the die, and so its static power, as without the tier)
    and a first tier too small for the tiny model's state: a third of it spills."""
    c = load_chip(str(EXAMPLE))
    return dataclasses.replace(c, dram=dataclasses.replace(c.dram, capacity_gib=0.5),
                               dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def link(chip, **kw):
    return dataclasses.replace(chip, dram2=dataclasses.replace(chip.dram2, **kw))


def on_package(chip):
    return link(chip, attach="package", links=0, link_gb_per_s=0.0, link_latency_ns=0.0)


def run(chip, model, **kw):
    return run_workload(chip, model, Scenario.of(**{**DECODE, **kw}))


def test_a_link_that_cannot_bind_equals_the_dram_on_the_package(chip, tiny):
    """Issue 25 item 6: a tier of unbounded link bandwidth and no latency is the same DRAM
    read directly: bit-identical time, traffic, placement and energy."""
    ideal, pkg = run(link(chip, link_gb_per_s=1e5, link_latency_ns=0.0), tiny), \
        run(on_package(chip), tiny)
    assert ideal.info["memory_tiers"]["bytes"]["dram2"] > 0
    assert (ideal.seconds, ideal.dram_bytes, ideal.energy_j) == (pkg.seconds, pkg.dram_bytes,
                                                                 pkg.energy_j)
    def numbers(m):     # the tiers' report but for the attach label, which is the point
        return {**m, "tiers": {k: {**v, "attach": None} for k, v in m["tiers"].items()}}
    assert numbers(ideal.info["memory_tiers"]) == numbers(pkg.info["memory_tiers"])


def test_a_slower_or_longer_link_never_makes_decode_faster(chip, tiny):
    """Issue 25 item 6: the link's rate and latency only add time; the tier's bytes cost at
    least their bytes at the link's rate (less the same bytes at the first tier's)."""
    hbm = run(dataclasses.replace(load_chip(str(EXAMPLE)), dram2=None), tiny)
    times = [run(link(chip, link_gb_per_s=g, link_latency_ns=ns), tiny)
             for g, ns in ((1e5, 0.0), (63.0, 0.0), (63.0, 1000.0), (8.0, 1000.0))]
    secs = [r.seconds for r in times]
    assert hbm.seconds <= secs[0] <= secs[1] <= secs[2] <= secs[3]
    assert secs[2] > secs[1] and secs[3] > secs[2]
    moved = times[3].info["memory_tiers"]["dram2_bytes_moved"]
    slow = link(chip, link_gb_per_s=8.0).dram2
    floor = moved / slow.bytes_per_s - moved / chip.dram.peak_bytes_per_s
    assert slow.bytes_per_s == 2 * 8e9 and times[3].fits
    assert times[3].seconds - hbm.seconds >= 0.9 * floor > 0


def test_a_run_that_fits_the_first_tier_is_bit_identical(tiny):
    c = load_chip(str(EXAMPLE))
    c = dataclasses.replace(c, dram2=dataclasses.replace(c.dram2, mm2_per_phy=0.0))
    a, b = run(c, tiny), run(dataclasses.replace(c, dram2=None), tiny)
    assert "memory_tiers" not in a.info
    assert (a.seconds, a.dram_bytes, a.energy_j, a.energy_breakdown_j) == (
        b.seconds, b.dram_bytes, b.energy_j, b.energy_breakdown_j)


def test_the_links_phys_are_on_the_die_edge_and_priced():
    from diptych.arch.area import area_breakdown_mm2
    from diptych.arch.cost import chip_cost
    from diptych.arch.geometry import check, dies

    c = load_chip(str(EXAMPLE))
    alone = dataclasses.replace(c, dram2=None)
    assert c.dram2.phys == c.dram2.links == 2 and c.dram2.bytes_per_s == 126e9
    assert sum(g.tier_phys for g in dies(c)) == 2 and check(c) == []
    extra = area_breakdown_mm2(c)["dram_phy"] - area_breakdown_mm2(alone)["dram_phy"]
    assert extra == pytest.approx(2 * 6.0)
    assert chip_cost(c).dram_usd - chip_cost(alone).dram_usd == pytest.approx(512 * 5.0)


@pytest.mark.parametrize("attach", ["cxl", "pcie", "c2c"])
def test_every_link_kind_loads_with_the_lower_of_pins_and_links(tmp_path, attach):
    from diptych.sim.fabric import fabric
    from diptych.sim.run.placed import tier2_chip

    f = tmp_path / "t.toml"
    f.write_text(EXAMPLE.read_text().replace('attach = "cxl"', f'attach = "{attach}"'))
    c = load_chip(str(f))
    assert c.dram2.attach == attach and c.dram2.bytes_per_s == 126e9 < c.dram2.peak_bytes_per_s
    fab, hbm = fabric(tier2_chip(c)), fabric(c)
    assert fab.dram_cap_bytes_per_s == 126e9 and fab.bottleneck == f"{attach} link"
    assert fab.dram_setup_ns == pytest.approx(hbm.dram_setup_ns + 200.0)
    assert tier2_chip(c).dram_bytes_per_s == 126e9


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('attach = "cxl"', 'attach = "infiniband"'), "dram2.attach"),
    (lambda t: t.replace("link_gb_per_s = 63.0", "link_gb_per_s = 0.0"), "dram2.link_gb_per_s"),
    (lambda t: t.replace("link_gb_per_s = 63.0", "link_gb_per_s = nan"), "dram2.link_gb_per_s"),
    (lambda t: t.replace("link_latency_ns = 200.0", "link_latency_ns = inf"),
     "dram2.link_latency_ns"),
    (lambda t: t.replace("links = 2 ", "links = 0 "), "dram2.links"),
    (lambda t: t.replace("pj_per_bit = 25.0", "pj_per_bit = 0.0"), "dram2.pj_per_bit"),
    (lambda t: t.replace("capacity_gib = 512.0", "capacity_gib = 0.0"), "dram2.capacity_gib"),
    (lambda t: t.replace('attach = "cxl"', 'attach = "package"'), "dram2.links"),
])
def test_bad_links_exit_2_naming_the_file_key_and_value(tmp_path, edit, key):
    bad = tmp_path / "bad.toml"
    text = edit(EXAMPLE.read_text())
    assert text != EXAMPLE.read_text()
    bad.write_text(text)
    r = CliRunner().invoke(main, ["chips", "validate", str(bad)])
    assert r.exit_code == 2 and key in r.output and "bad.toml" in r.output, r.output
