"""Die geometry: edge placement and reticle checks against hand-computed cases, invariants over
random dies, and bad input (exit 2 naming the key)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import ConfigError, chip_from_dict, load_chip, to_dict
from diptych.arch.area import die_area_mm2
from diptych.arch.geometry import assign_edges, check, dies, geometry_columns, usable_lengths
from diptych.arch.tables import DEFAULT_DIE, EDGES, DieSpec
from diptych.tools.cli import main

PHY = 16.2 / 10.0   # a DRAM PHY's depth: 16.2 mm² over 10 mm of edge
LINK = 2.5 / 1.2    # a SerDes' depth


def chip(name="train-2026", **changes):
    d = to_dict(load_chip(name))
    for path, v in changes.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = v
    d["area_budget_mm2"] = 0.0
    return chip_from_dict(d)


# ---- hand-computed edge placement -----------------------------------------------------------

def place(w, h, spec=DEFAULT_DIE, *, hbm=0, links=0, **kw):
    return assign_edges(w, h, spec, hbm_phys=hbm, links=links, d2d=kw.pop("d2d", {}),
                        phy_depth_mm=PHY, link_depth_mm=LINK, **kw)


def test_three_phys_per_long_edge_need_31_mm():
    # long edges hold floor((w - 2 × 0.5) / 10) PHYs: 2 on a 30 mm edge, 3 on a 31 mm edge
    assert place(30.0, 20.0, hbm=6)[1]["hbm"] == 2
    slots, short = place(31.0, 20.0, hbm=6)
    assert short["hbm"] == 0
    assert sorted(s.edge for s in slots) == ["north"] * 3 + ["south"] * 3


def test_phys_on_short_edges_only_when_allowed():
    spec = DieSpec(hbm_edges=4)
    # short edges: 20 - 2 × max(0.5, 1.62) = 16.76 mm → one PHY each
    slots, short = place(30.0, 20.0, spec, hbm=6)
    assert short["hbm"] == 0
    assert sorted(s.edge for s in slots).count("west") == 1
    assert place(30.0, 20.0, spec, hbm=7)[1]["hbm"] == 1


def test_link_capacity_of_a_20mm_square():
    # long: floor(19 / 1.2) = 15 each; short: 20 - 2 × 2.083 = 15.83 → 13 each: 56 in all
    assert place(20.0, 20.0, links=56)[1]["links"] == 0
    assert place(20.0, 20.0, links=57)[1]["links"] == 1
    # edges facing a neighbouring die take none: 30 on the long edges
    assert place(20.0, 20.0, links=31, blocked=("west", "east"))[1]["links"] == 1


def test_d2d_longer_than_its_edge_is_short_by_the_difference():
    # west edge 20 - 2 × max(0.5, 1.0) = 18 mm usable
    _, short = assign_edges(20.0, 20.0, DEFAULT_DIE, hbm_phys=0, links=0, d2d={"west": 25.0},
                            d2d_depth_mm=1.0)
    assert short["d2d"] == pytest.approx(7.0)


@settings(max_examples=150, deadline=None)
@given(w=st.floats(5, 40), r=st.floats(1, 3), hbm=st.integers(0, 10), links=st.integers(0, 40),
       d2d=st.floats(0, 30), edges=st.integers(1, 4))
def test_slots_never_overlap_and_stay_off_the_corners(w, r, hbm, links, d2d, edges):
    h = w / r
    spec = DieSpec(hbm_edges=edges)
    slots, short = assign_edges(w, h, spec, hbm_phys=hbm, links=links,
                                d2d={"east": d2d} if d2d else {}, phy_depth_mm=PHY,
                                link_depth_mm=LINK, d2d_depth_mm=1.0)
    usable = usable_lengths(w, h, spec, [PHY if hbm else 0, LINK if links else 0,
                                         1.0 if d2d else 0])
    assert sum(s.kind == "dram_phy" for s in slots) == hbm - short["hbm"]
    assert sum(s.kind == "interconnect" for s in slots) == links - short["links"]
    for e in EDGES:
        on = sorted((s for s in slots if s.edge == e), key=lambda s: s.start_mm)
        length = w if e in ("south", "north") else h
        corner = (length - usable[e]) / 2
        if not on:
            continue
        if short["d2d"] == 0:
            assert on[0].start_mm >= corner - 1e-9
            assert on[-1].start_mm + on[-1].length_mm <= length - corner + 1e-9
        for a, b in zip(on, on[1:]):
            assert a.start_mm + a.length_mm <= b.start_mm + 1e-9


# ---- chips ------------------------------------------------------------------------------------

def test_presets_outlines_and_the_infeasible_one():
    for name in ("train-2026", "h100", "tpu-v4", "trainium2", "tpu-v1"):
        c = load_chip(name)
        assert check(c) == [], name
        (g,) = dies(c)
        assert g.width_mm >= g.height_mm
        assert g.width_mm <= 33 + 1e-9 and g.height_mm <= 26 + 1e-9
        assert g.width_mm / g.height_mm <= DEFAULT_DIE.max_aspect_ratio + 1e-9
        assert g.width_mm * g.height_mm == pytest.approx(die_area_mm2(c) + g.whitespace_mm2)
    # H100: six HBM sites (five populated), three on each long edge
    (g,) = dies(load_chip("h100"))
    phys = [s for s in g.slots if s.kind == "dram_phy"]
    assert sorted(s.edge for s in phys) == ["north"] * 3 + ["south"] * 3 and g.stacks == 5
    # infer-2026 as one die: 8 PHYs, 3 per long edge of at most 33 mm: short by 2 PHYs = 20 mm
    one = load_chip("examples/chips/infer-2026-1die.toml")
    (v,) = check(one)
    assert v.kind == "hbm_edge" and v.excess == pytest.approx(20.0)
    assert "short by 2 PHY(s), 20.0 mm of edge" in v.message
    cols = geometry_columns(one)
    assert cols["feasible"] is False and "8 DRAM PHYs" in cols["infeasible_reason"]
    # the preset: two compute dies of 4 stacks each, 2 per long edge
    two = load_chip("infer-2026")
    assert check(two) == [] and geometry_columns(two)["feasible"] is True
    assert [g.stacks for g in dies(two)] == [4, 4]
    assert die_area_mm2(two) <= two.area_budget_mm2 == 800.0


def test_reticle_violation_says_by_how_much():
    c = chip(tensor_cores=12)               # 12 cores of train-2026: beyond 858 mm²
    (g,) = dies(c)
    (v,) = [v for v in check(c) if v.kind == "reticle"]
    assert v.excess == pytest.approx(g.width_mm * g.height_mm - 26 * 33)
    assert f"by {g.width_mm * g.height_mm - 858:.1f} mm²" in v.message
    assert "chiplets" in v.message


def test_an_io_limited_die_grows_and_reports_whitespace():
    # 4 HBM stacks and 24 links on ~250 mm²: the edges need a bigger die than the blocks
    c = chip("tpu-v5e", dram__stacks=4, dram__capacity_gib=32.0, interconnect__links=24)
    (g,) = dies(c)
    assert check(c) == []
    assert g.whitespace_mm2 > 1.0
    assert g.width_mm * g.height_mm == pytest.approx(die_area_mm2(c) + g.whitespace_mm2)
    # the stated outline of the blocks' area cannot hold them
    side = math.sqrt(die_area_mm2(c)) * 1.0001
    bad = chip("tpu-v5e", dram__stacks=4, dram__capacity_gib=32.0, interconnect__links=24,
               die__width_mm=side, die__height_mm=side)
    assert any(v.kind in ("hbm_edge", "link_edge", "layout") for v in check(bad))


# ---- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"die__width_mm": 0.0, "die__height_mm": 20.0},
     "die.width_mm: expected a number >= 0.1 and <= 1000 (mm: a die under 0.1 mm on a side "
     "holds no pad ring, 1 m is above a 450 mm wafer), got 0.0"),
    ({"die__width_mm": -3.0, "die__height_mm": 20.0},
     "die.width_mm: expected a number >= 0.1 and <= 1000 (mm: a die under 0.1 mm on a side "
     "holds no pad ring, 1 m is above a 450 mm wafer), got -3.0"),
    ({"die__width_mm": 30.0}, "die.height_mm: expected a number > 0 too (width_mm is given"),
    ({"die__width_mm": 20.0, "die__height_mm": 20.0},
     "die.width_mm: expected an outline that holds the blocks: 20 × 20 mm = 400.00 mm² is "
     "260.87 mm² smaller than the modelled monolithic die (660.87 mm²)"),
    ({"die__max_aspect_ratio": 0.5}, "die.max_aspect_ratio: expected a number >= 1"),
    ({"die__hbm_sites": 4}, "die.hbm_sites: expected at least dram.stacks (6)"),
    ({"cost__node": "n2x"}, "cost.node: expected one of 'n28', 'n16', 'n7', 'n5', 'n4', 'n3', "
                            "got 'n2x'"),
    ({"package__compute_dies": 3, "package__d2d_gb_per_s": 100.0},
     "package.compute_dies: expected a divisor of tensor_cores (8)"),
    ({"package__compute_dies": 2}, "package.d2d_gb_per_s: expected a bandwidth > 0"),
])
def test_bad_input_names_the_key(changes, message):
    with pytest.raises(ConfigError) as e:
        chip(**changes)
    assert message in str(e.value)


def test_cli_exit_2_naming_the_problem(tmp_path):
    from importlib import resources
    text = resources.files("diptych.arch.chips").joinpath("train-2026.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('node = "n3"', 'node = "n1"'))
    for args in (["chips", "validate", str(bad)], ["floorplan", str(bad), "-o",
                                                   str(tmp_path / "f.svg")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "cost.node" in r.output and "'n1'" in r.output
        assert "Traceback" not in r.output
    zero = tmp_path / "zero.toml"
    zero.write_text(text + "\n[die]\nwidth_mm = 0\nheight_mm = 20\n")
    r = CliRunner().invoke(main, ["chips", "validate", str(zero)])
    assert r.exit_code == 2 and "die.width_mm" in r.output
    # a design that cannot be built: exit 2, with the reason and by how much
    r = CliRunner().invoke(main, ["chips", "validate", "examples/chips/infer-2026-1die.toml"])
    assert r.exit_code == 2 and "cannot be built as described" in r.output
    assert "short by 2 PHY(s), 20.0 mm of edge" in r.output
    assert len(r.output.strip().splitlines()) == 1
    # its two-die package, the preset, is OK
    infer = resources.files("diptych.arch.chips").joinpath("infer-2026.toml").read_text()
    f = tmp_path / "infer.toml"
    f.write_text(infer)
    r = CliRunner().invoke(main, ["chips", "validate", str(f)])
    assert r.exit_code == 0 and "OK" in r.stdout and not r.stderr
