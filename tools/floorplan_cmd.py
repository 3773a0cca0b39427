"""``diptych floorplan``: draw dies to scale, side by side."""

from __future__ import annotations

import click

from .errors import friendly


@click.command("floorplan")
@click.argument("chips", nargs=-1, required=True)
@click.option("-o", "--output", default="floorplan.svg", show_default=True,
              type=click.Path(dir_okay=False), help="Output file: .svg, .png or .pdf.")
@friendly
def floorplan(chips: tuple[str, ...], output: str):
    """Draw the floorplan of each CHIP (preset name or TOML path) to scale.

    Blocks are rectangles of their modelled area (MAC arrays, SRAM, vector units, DRAM PHYs,
    link SerDes, other), labelled with mm² and share of the die; chips side by side at one
    scale.
    """
    from ..arch import load_chip
    from .dse.floorplan import draw_floorplans, floorplan as plan, save_figure

    loaded = [load_chip(c) for c in chips]
    fig = draw_floorplans(loaded)
    save_figure(fig, output)
    for c in loaded:
        parts = ", ".join(f"{r.block} {r.area_mm2:.0f} mm² ({r.share:.0%})" for r in plan(c))
        click.echo(f"{c.name}: {c.die_area_mm2:.0f} mm²: {parts}")
    click.echo(f"wrote {output}")
