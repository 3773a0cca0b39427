"""``diptych chips``: list, show, template and validate chip descriptions."""

from __future__ import annotations

import click

from ..arch import Chip, load_chip, load_chip_file, preset_names, to_dict
from ..arch.area import area_breakdown_mm2, die_area_mm2
from ..arch.loader import DERIVED_KEY
from . import fmt
from .errors import friendly
from .jsonout import dumps


def chip_summary(chip: Chip) -> dict:
    """The full description (loadable: ``load_chip`` of it saved as ``.json`` gives ``chip``
    back) plus the derived quantities under ``derived``, which loading ignores; JSON-ready."""
    d = to_dict(chip)
    d[DERIVED_KEY] = {
        "peak_ops_per_s": chip.peak_ops_per_s,
        "dram_bytes_per_s": chip.dram_bytes_per_s,
        **{f"{n}_bytes_per_s": t.bytes_per_s for n, t in chip.memory_tiers},
        "sram_bytes": chip.sram_bytes,
        "vector_ops_per_s": chip.vector_ops_per_s,
        "area_mm2": area_breakdown_mm2(chip),
        "die_area_mm2": die_area_mm2(chip),
    }
    return d


def _origin(spec: str, chip: Chip) -> str:
    if spec in preset_names():
        return f"written from the built-in preset {spec}"
    return f"written from {spec} ({chip.name})"


def _template(spec: str, name: str | None, path: str) -> str:
    import dataclasses

    from .chip_template import chip_toml

    c = load_chip(spec)
    origin = _origin(spec, c)
    if name:
        c = dataclasses.replace(c, name=name)
    return chip_toml(c, origin=origin, path=path)


def _dram_cell(c: Chip) -> str:
    return _fmt_rate(c.dram_bytes_per_s, "B/s") if c.has_dram else "none (all SRAM)"


def _fmt_rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.1f} {unit}"


@click.group("chips")
def chips():
    """Chip descriptions: built-in presets and your own TOML files."""


@chips.command("list")
def chips_list():
    """List the built-in chip presets."""
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "description", "peak (default dtype)", "DRAM", "area")
    for name in preset_names():
        c = load_chip(name)
        table.add_row(name, c.description,
                      f"{_fmt_rate(c.peak_ops_per_s[c.default_dtype], 'OP/s')} {c.default_dtype}",
                      _dram_cell(c), f"{die_area_mm2(c):.0f} mm²")
    Console().print(table)


@chips.command("show")
@click.argument("chip")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output; loads back as a chip file (.json) with the "
                   "derived quantities under \"derived\", which the loader ignores.")
@click.option("--toml", "as_toml", is_flag=True,
              help="The chip as an editable TOML file, each field commented "
                   "(see also `chips template`).")
@friendly
def chips_show(chip: str, as_json: bool, as_toml: bool):
    """Show CHIP (a preset name or a TOML path) with its derived peaks."""
    if as_json and as_toml:
        raise ValueError("give --json or --toml, not both")
    if as_toml:
        click.echo(_template(chip, None, "mine.toml"), nl=False)
        return
    c = load_chip(chip)
    d = chip_summary(c)
    if as_json:
        click.echo(dumps(d))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(f"[bold]{c.name}[/bold]: {c.description}")
    a = c.core.array
    t = Table("quantity", "value", show_header=False)
    t.add_row("clock", f"{c.clock_ghz} GHz")
    t.add_row("tensor cores", f"{c.tensor_cores} × {c.core.arrays} arrays of {a.rows}×{a.cols} "
              f"({', '.join(a.dataflows)})")
    for dt, ops in c.peak_ops_per_s.items():
        t.add_row(f"peak {dt}", _fmt_rate(ops, "OP/s"))
    t.add_row("vector", _fmt_rate(c.vector_ops_per_s, "OP/s"))
    t.add_row("SRAM", f"{c.sram_bytes / 2**20:.1f} MiB")
    if c.has_dram:
        t.add_row("DRAM", f"{c.dram.kind}, {c.dram.stacks} stack(s), {c.dram.capacity_gib} GiB, "
                  f"{_fmt_rate(c.dram_bytes_per_s, 'B/s')}")
    else:
        t.add_row("DRAM", "none: an all-SRAM chip (every tensor lives on chip)")
    for i, (_, d2) in enumerate(c.memory_tiers, 2):
        link = (f" behind {d2.links} {d2.attach} link(s) of {d2.link_gb_per_s:g} GB/s, "
                f"+{d2.link_latency_ns:g} ns" if d2.linked else "")
        share = (f", shared by {d2.shared_by} chips: {d2.capacity_gib_per_chip:g} GiB and "
                 f"{_fmt_rate(d2.pin_share_bytes_per_s, 'B/s')} of pins each"
                 if d2.shared_by > 1 else "")
        t.add_row(f"DRAM tier {i}", f"{d2.kind}, {d2.stacks} package(s), {d2.capacity_gib} GiB, "
                  f"{_fmt_rate(d2.bytes_per_s, 'B/s')}{link}, {d2.pj_per_bit:g} pJ/bit{share}")
    t.add_row("interconnect", f"{c.interconnect.links} × "
              f"{c.interconnect.gb_per_s_per_link_per_direction} GB/s per direction")
    if c.has_dram:
        t.add_row("ridge point", f"{c.ridge_ops_per_byte(c.default_dtype):.0f} ops/byte "
                  f"({c.default_dtype})")
    o = c.fixed_costs
    t.add_row("fixed costs", f"op launch {o.op_launch_us:g} µs, step sync {o.step_sync_us:g} µs, "
              f"collective launch {o.collective_launch_us:g} µs, host sync "
              f"{o.host_sync_us:g} µs")
    for block, mm2 in area_breakdown_mm2(c).items():
        t.add_row(f"area: {block}", f"{mm2:.1f} mm²")
    t.add_row("die area", f"{die_area_mm2(c):.1f} mm²"
              + (f" (budget {c.area_budget_mm2:.0f})" if c.area_budget_mm2 else ""))
    from ..arch.cost import chip_cost
    from ..arch.geometry import dies
    for g in dies(c):
        t.add_row(f"outline: {g.name}", f"{g.width_mm:.1f} × {g.height_mm:.1f} mm"
                  + ("" if not g.violations else " [red]" + "; ".join(
                      v.message for v in g.violations) + "[/red]"))
    cost = chip_cost(c)
    if cost is not None:
        t.add_row("cost per chip (manufacturing)", fmt.money(cost.total_usd))
    t.add_row("TDP", f"{c.tdp_w:.0f} W")
    con.print(t)


@chips.command("template")
@click.argument("chip")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="The TOML file to write (e.g. mine.toml).")
@click.option("--name", default=None, help="Name of your chip (default: CHIP's name).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@friendly
def chips_template(chip: str, output: str, name: str | None, force: bool):
    """Start your own chip from CHIP (a preset or a TOML file): write it to OUTPUT as a
    commented TOML file that `chips validate` accepts as it is.

    Example: diptych chips template infer-2026 -o mine.toml --name my-chip
    """
    from pathlib import Path

    out = Path(output)
    if out.exists() and not force:
        raise ValueError(f"{out} exists; pass --force to overwrite it")
    text = _template(chip, name, str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    c = load_chip_file(out)
    click.echo(f"wrote {out} ({c.name}, from {chip}): edit it, then "
               f"`diptych chips validate {out}`")


def chip_json_schema() -> dict:
    """The JSON Schema of a chip file (:mod:`diptych.arch.json_schema`), the JSON of
    `chips show --json` included (its derived figures are allowed and ignored)."""
    from ..arch.json_schema import json_schema

    doc = json_schema(Chip, title="diptych chip",
                      schema_id="https://diptych.invalid/schemas/chip.schema.json")
    doc["properties"][DERIVED_KEY] = {
        "type": "object", "description": "derived figures of `chips show --json`, ignored on "
                                         "load"}
    return doc


@chips.command("schema")
@click.option("-o", "--output", "output", default=None, type=click.Path(dir_okay=False),
              help="Write the schema to this file (default: print it).")
@friendly
def chips_schema(output: str | None):
    """Print (or write) the JSON Schema of a chip file, generated from the same rules `chips
    validate` checks, for editors that check TOML or JSON as it is typed (docs/chips.md,
    "Editor support"). Cross-field rules stay with `chips validate`.

    Example: diptych chips schema -o chip.schema.json
    """
    text = dumps(chip_json_schema()) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    from ..arch.atomic import atomic_text

    atomic_text(output, text)
    click.echo(f"wrote {output}", err=True)


@chips.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
@friendly
def chips_validate(path: str):
    """Check a chip file (TOML, or the JSON of `chips show --json`); print OK or the first
    problem (exit 2).

    A chip that cannot be built as described (a die over the reticle, DRAM PHYs or SerDes
    that do not fit on its edges: docs/floorplan.md) fails too (exit 2), with every reason
    and by how much; `floorplan`, `run` and `compare` still take it (with a warning) and a
    sweep records it as an infeasible row."""
    from ..arch.geometry import check

    c = load_chip_file(path)
    problems = check(c)
    if problems:
        raise ValueError(f"{path}: {c.name} cannot be built as described: "
                         + "; ".join(v.message for v in problems))
    click.echo(f"{path}: OK ({c.name}, {die_area_mm2(c):.0f} mm²)")
