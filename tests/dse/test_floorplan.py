"""Floorplans: rectangles to scale, tiling the die; the figure's objects carry the data."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from matplotlib.patches import Rectangle

from diptych.arch import load_chip, preset_names
from diptych.tools.cli import main
from diptych.tools.dse.floorplan import draw_floorplans, floorplan


@pytest.mark.parametrize("name", preset_names())
def test_rects_tile_the_die_to_scale(name):
    chip = load_chip(name)
    plan = floorplan(chip)
    side = math.sqrt(chip.die_area_mm2)
    parts = chip.area_breakdown_mm2
    assert {r.block for r in plan} == {b for b, a in parts.items() if a > 0}
    for r in plan:
        assert r.w_mm * r.h_mm == pytest.approx(parts[r.block], rel=1e-9)
        assert r.share == pytest.approx(parts[r.block] / chip.die_area_mm2)
        assert -1e-9 <= r.x_mm and r.x_mm + r.w_mm <= side + 1e-9
        assert -1e-9 <= r.y_mm and r.y_mm + r.h_mm <= side + 1e-9
    # no two rectangles overlap (areas add up to the square and pairwise overlaps are zero)
    for i, a in enumerate(plan):
        for b in plan[i + 1:]:
            ox = min(a.x_mm + a.w_mm, b.x_mm + b.w_mm) - max(a.x_mm, b.x_mm)
            oy = min(a.y_mm + a.h_mm, b.y_mm + b.h_mm) - max(a.y_mm, b.y_mm)
            assert ox <= 1e-9 or oy <= 1e-9
    assert sum(r.w_mm * r.h_mm for r in plan) == pytest.approx(side * side)


def test_figure_side_by_side_same_scale():
    chips = [load_chip("train-2026"), load_chip("infer-2026"), load_chip("h100")]
    fig = draw_floorplans(chips)
    axes = [ax for ax in fig.axes]
    assert len(axes) == 3
    assert len({ax.get_xlim() for ax in axes}) == 1  # one scale for all
    for ax, chip in zip(axes, chips):
        assert ax.get_title().startswith(f"{chip.name}: {chip.die_area_mm2:.0f} mm²")
        assert ax.get_xlabel() == "mm"
        rects = {p.get_label(): p for p in ax.patches if isinstance(p, Rectangle)
                 and p.get_label() != "area budget"}
        for block, mm2 in chip.area_breakdown_mm2.items():
            p = rects[block]
            assert p.get_width() * p.get_height() == pytest.approx(mm2)
        texts = " ".join(t.get_text() for t in ax.texts)
        arrays = chip.area_breakdown_mm2["arrays"]
        assert f"{arrays:.0f} mm²" in texts
        budget = [p for p in ax.patches if p.get_label() == "area budget"]
        if chip.area_budget_mm2:
            assert budget[0].get_width() == pytest.approx(math.sqrt(chip.area_budget_mm2))
        else:
            assert not budget


def test_cli_writes_svg(tmp_path):
    out = tmp_path / "fp.svg"
    r = CliRunner().invoke(main, ["floorplan", "train-2026", "infer-2026", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text().lstrip().startswith("<?xml")
    for name in ("train-2026", "infer-2026"):
        assert f"{name}: {load_chip(name).die_area_mm2:.0f} mm²" in r.output


def test_cli_errors(tmp_path):
    r = CliRunner().invoke(main, ["floorplan", "no-such-chip", "-o", str(tmp_path / "a.svg")])
    assert r.exit_code == 2 and "unknown chip 'no-such-chip'" in r.output
    r = CliRunner().invoke(main, ["floorplan", "h100", "-o", str(tmp_path / "a.txt")])
    assert r.exit_code == 2 and "must end in .svg, .png or .pdf" in r.output
