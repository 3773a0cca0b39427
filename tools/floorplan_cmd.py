"""``diptych floorplan``: dies to scale, interfaces on their edges, cores as tiles."""

from __future__ import annotations

import click

from . import fmt
from .errors import friendly


@click.command("floorplan")
@click.argument("chips", nargs=-1, required=True)
@click.option("-o", "--output", default="floorplan.svg", show_default=True,
              type=click.Path(dir_okay=False), help="Output file: .svg, .png or .pdf.")
@friendly
def floorplan(chips: tuple[str, ...], output: str):
    """Draw the floorplan of each CHIP (preset name or TOML path) to scale.

    Each die is drawn at its outline (stated in [die] or derived within the reticle and the
    aspect-ratio limit) with its DRAM PHYs, link SerDes and die-to-die PHYs on its edges and
    its tensor cores as tiles (arrays, scratchpad, vector unit), labelled with mm² and share;
    chips side by side at one scale. Dies that cannot be built as described (over the reticle,
    interfaces that do not fit on the edges) are drawn in red and listed.
    """
    from ..arch import load_chip
    from ..arch.cost import chip_cost
    from .dse.floorplan import describe, draw_floorplans, floorplan as plan, save_figure

    loaded = [load_chip(c) for c in chips]
    fig = draw_floorplans(loaded)
    save_figure(fig, output)
    for c in loaded:
        p = plan(c)
        click.echo(describe(c, p))
        cost = chip_cost(c)
        if cost is not None:
            parts = ", ".join(f"{k} ${v:,.0f}" for k, v in cost.breakdown().items())
            click.echo(f"  cost: {fmt.money(cost.total_usd)} per chip ({parts}); die yield "
                       + ", ".join(f"{d.name} {d.yield_:.1%}" for d in cost.dies))
        for v in p.violations:
            click.echo(f"  cannot be built as described: {v.message}")
    click.echo(f"wrote {output}")
