"""Floorplans: rectangles never overlap and tile each die, blocks add up to the area model,
interfaces sit on their edges, cores are tiles; the figure carries the data; the CLI."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.patches import Rectangle

from diptych.arch import chip_from_dict, load_chip, preset_names, to_dict
from diptych.arch.area import area_breakdown_mm2, core_area_mm2, die_area_mm2
from diptych.tools.cli import main
from diptych.tools.dse.floorplan import draw_floorplans, floorplan

EXAMPLES = ["examples/chips/infer-2026-1die.toml", "examples/chips/train-2026-iod.toml"]


def _overlap(a, b) -> float:
    ox = min(a.x_mm + a.w_mm, b.x_mm + b.w_mm) - max(a.x_mm, b.x_mm)
    oy = min(a.y_mm + a.h_mm, b.y_mm + b.h_mm) - max(a.y_mm, b.y_mm)
    return ox * oy if ox > 1e-9 and oy > 1e-9 else 0.0


def assert_sound(chip):
    plan = floorplan(chip)
    # blocks add up to the area model; whitespace is the outline beyond the blocks
    areas = plan.block_areas()
    for block, mm2 in area_breakdown_mm2(chip).items():
        assert areas.get(block, 0.0) == pytest.approx(mm2, rel=1e-9, abs=1e-9), block
    ws = sum(d.geometry.whitespace_mm2 for d in plan.dies)
    assert areas.get("whitespace", 0.0) == pytest.approx(ws, rel=1e-6, abs=1e-6)
    for d in plan.dies:
        g = d.geometry
        x0, y0, x1, y1 = d.x_mm, d.y_mm, d.x_mm + g.width_mm, d.y_mm + g.height_mm
        rs = d.rects
        # the die's rectangles tile its outline: inside it, no overlaps, areas add up
        assert sum(r.area_mm2 for r in rs) == pytest.approx(g.width_mm * g.height_mm, rel=1e-9)
        for r in rs:
            assert r.w_mm >= -1e-12 and r.h_mm >= -1e-12
            assert x0 - 1e-9 <= r.x_mm and r.x_mm + r.w_mm <= x1 + 1e-9
            assert y0 - 1e-9 <= r.y_mm and r.y_mm + r.h_mm <= y1 + 1e-9
        srt = sorted(rs, key=lambda r: r.x_mm)
        for i, a in enumerate(srt):  # sweep along x: only neighbours in x can overlap
            for b in srt[i + 1:]:
                if b.x_mm >= a.x_mm + a.w_mm - 1e-9:
                    break
                assert _overlap(a, b) == 0.0, (a, b)
        # interfaces on their edge
        for r in rs:
            if r.edge is None or r.block not in ("dram_phy", "interconnect", "d2d"):
                continue
            touch = {"south": abs(r.y_mm - y0), "north": abs(r.y_mm + r.h_mm - y1),
                     "west": abs(r.x_mm - x0), "east": abs(r.x_mm + r.w_mm - x1)}[r.edge]
            assert touch < 1e-9, r
        # cores are tiles of equal area, each with its arrays, scratchpad and vector unit
        tiles: dict[int, list] = {}
        for r in rs:
            if r.core is not None:
                tiles.setdefault(r.core, []).append(r)
        assert len(tiles) == g.cores + g.spare_cores
        for i, parts in tiles.items():
            if parts[0].block == "spare_cores":
                continue
            assert sum(p.block == "arrays" for p in parts) == chip.core.arrays
            assert {p.block for p in parts} <= {"arrays", "sram", "vector"}
            if g.whitespace_mm2 == 0 or not g.stated:
                assert sum(p.area_mm2 for p in parts) == pytest.approx(core_area_mm2(chip))
    # no die overlaps another, no stack overlaps a die
    for i, a in enumerate(plan.dies):
        for b in plan.dies[i + 1:]:
            ga, gb = a.geometry, b.geometry
            ox = min(a.x_mm + ga.width_mm, b.x_mm + gb.width_mm) - max(a.x_mm, b.x_mm)
            oy = min(a.y_mm + ga.height_mm, b.y_mm + gb.height_mm) - max(a.y_mm, b.y_mm)
            assert ox <= 1e-9 or oy <= 1e-9
    for s in plan.stacks:
        for d in plan.dies:
            box = type(s)("die", d.x_mm, d.y_mm, d.geometry.width_mm, d.geometry.height_mm)
            assert _overlap(s, box) == 0.0
    return plan


@pytest.mark.parametrize("name", preset_names() + EXAMPLES)
def test_rects_tile_every_die_and_add_up(name):
    assert_sound(load_chip(name))


def test_h100_has_six_phy_sites_one_unused_and_twelve_spare_tiles():
    plan = floorplan(load_chip("h100"))
    (d,) = plan.dies
    phys = [r for r in d.rects if r.edge and r.block == "dram_phy"]
    unused = [r for r in d.rects if r.note == "unused PHY site"]
    assert len(phys) == 5 and len(unused) == 1
    assert sum(1 for s in plan.stacks if not s.note) == 5 and len(plan.stacks) == 6
    spares = {r.core for r in d.rects if r.block == "spare_cores"}
    assert len(spares) == 12


def test_phys_without_an_edge_are_drawn_inside_and_flagged():
    plan = floorplan(load_chip("examples/chips/infer-2026-1die.toml"))
    lost = [r for r in plan.rects if r.note == "no edge"]
    assert [r.block for r in lost] == ["dram_phy"]
    assert lost[0].area_mm2 == pytest.approx(2 * 16.2)
    assert plan.violations


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cores=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), arrays=st.integers(1, 5),
       dim=st.sampled_from([32, 64, 128, 256]), stacks=st.integers(1, 8),
       links=st.integers(0, 30), spares=st.integers(0, 2), sb=st.booleans(),
       dies_=st.sampled_from([1, 2]))
def test_random_chips_are_sound(cores, arrays, dim, stacks, links, spares, sb, dies_):
    d = to_dict(load_chip("train-2026"))
    d.update(tensor_cores=cores, area_budget_mm2=0.0)
    d["core"]["arrays"] = arrays
    d["core"]["array"].update(rows=dim, cols=dim)
    d["dram"].update(stacks=stacks, capacity_gib=36.0 * stacks)
    d["interconnect"]["links"] = links
    if sb:
        d["shared_buffer"] = {"capacity_mib": 64.0, "bytes_per_cycle": 1024.0}
    if dies_ == 2:
        if cores % 2 or stacks % 2:
            return
        d["package"] = {"compute_dies": 2, "d2d_gb_per_s": 2000.0}
        spares *= 2
    d["die"] = {"spare_cores": spares}
    assert_sound(chip_from_dict(d))


def test_figure_side_by_side_same_scale():
    chips = [load_chip("train-2026"), load_chip("examples/chips/infer-2026-1die.toml"),
             load_chip("h100")]
    fig = draw_floorplans(chips)
    axes = [ax for ax in fig.axes if ax.patches]
    assert len(axes) == 3
    assert len({ax.get_xlim() for ax in axes}) == 1  # one scale for all
    for ax, chip in zip(axes, chips):
        assert ax.get_title().startswith(f"{chip.name}: {die_area_mm2(chip):.0f} mm²")
        assert ax.get_xlabel() == "mm"
        rects = [p for p in ax.patches if isinstance(p, Rectangle)]
        for block, mm2 in area_breakdown_mm2(chip).items():
            got = sum(p.get_width() * p.get_height() for p in rects
                      if p.get_label() == block
                      or (block == "sram" and p.get_label() == "shared_buffer"))
            assert got == pytest.approx(mm2), block
        outline = [p for p in rects if p.get_label().startswith("die:")]
        assert len(outline) == 1
        assert (outline[0].get_edgecolor()[0] == 1.0) == (chip.name == "infer-2026-1die")  # red
    texts = {ax: " ".join(t.get_text().replace("\n", " ") for t in ax.texts)
             for ax in fig.axes}
    notes = [ax for ax in fig.axes if not ax.patches]
    for ax, chip in zip(notes, chips):
        parts = area_breakdown_mm2(chip)
        total = sum(parts.values())
        assert f"MAC arrays {parts['arrays']:.0f} mm² ({parts['arrays'] / total:.0%})" \
            in texts[ax]
    assert "short by 2 PHY(s)" in texts[notes[1]]
    assert "INFEASIBLE" in axes[1].get_title()
    assert "$" in axes[0].get_title()  # cost per chip


def test_cli_writes_svg(tmp_path):
    out = tmp_path / "fp.svg"
    r = CliRunner().invoke(main, ["floorplan", "train-2026", "infer-2026", EXAMPLES[0], "-o",
                                  str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text().lstrip().startswith("<?xml")
    for name in ("train-2026", "infer-2026"):
        assert f"{name}: {die_area_mm2(load_chip(name)):.0f} mm²" in r.output
    assert "cannot be built as described: the die: 8 DRAM PHYs" in r.output
    assert "cost: $" in r.output and "compute1 21.0 × 18.5 mm" in r.output


def test_cli_errors(tmp_path):
    r = CliRunner().invoke(main, ["floorplan", "no-such-chip", "-o", str(tmp_path / "a.svg")])
    assert r.exit_code == 2 and "unknown chip 'no-such-chip'" in r.output
    r = CliRunner().invoke(main, ["floorplan", "h100", "-o", str(tmp_path / "a.txt")])
    assert r.exit_code == 2 and "must end in .svg, .png or .pdf" in r.output


def test_reticle_sized_square_budget_outline():
    chip = load_chip("train-2026")
    fig = draw_floorplans([chip])
    ax = fig.axes[0]
    (budget,) = [p for p in ax.patches if p.get_label() == "area budget"]
    assert budget.get_width() * budget.get_height() == pytest.approx(chip.area_budget_mm2)
    assert math.isclose(budget.get_width() / budget.get_height(),
                        floorplan(chip).dies[0].geometry.width_mm
                        / floorplan(chip).dies[0].geometry.height_mm)


def test_the_title_and_the_text_give_the_same_die_cost():
    """Issue 23 item 8: the title's dies cost is the text's (after the assembly yield), and
    every die's yield is named."""
    from diptych.arch.cost import chip_cost
    from diptych.tools.dse.floorplan import _title, floorplan as plan_of

    chip = load_chip("infer-2026")
    cost = chip_cost(chip)
    title = _title(chip, plan_of(chip), cost)
    assert f"dies \\${cost.breakdown()['dies']:,.0f};" in title
    for d in cost.dies:
        assert f"{d.name} {d.yield_:.0%}" in title
