"""``diptych rtl``: generate Verilog for the MAC array, test it on Verilator, count its gates."""

from __future__ import annotations

from pathlib import Path

import click

from .errors import UsageError, friendly
from .jsonout import dumps

_DTYPES = ("int8", "bf16")
_DATAFLOWS = ("os", "ws")

#: What ``diptych rtl test`` runs without a configuration: the CI set (design.md §5 build times).
STANDARD_CONFIGS = ((8, 8, "int8", "os"), (8, 8, "int8", "ws"),
                    (4, 4, "bf16", "os"), (4, 4, "bf16", "ws"))


@click.group("rtl")
def rtl():
    """The Amaranth INT8/BF16 systolic array: Verilog, cocotb-on-Verilator bench, area."""


@rtl.command("verilog")
@click.option("--rows", type=int, default=8, show_default=True, help="Array rows R.")
@click.option("--cols", type=int, default=8, show_default=True, help="Array columns C.")
@click.option("--dtype", type=click.Choice(_DTYPES), default="int8", show_default=True)
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), default="os", show_default=True,
              help="Output stationary or weight stationary.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="Verilog file to write ('-' for standard output).")
@friendly
def rtl_verilog(rows, cols, dtype, dataflow, output):
    """Write the array's Verilog (ports documented in docs/rtl.md)."""
    from ..rtl.array import check_config
    from ..rtl.verilog import array_verilog, toplevel_name

    check_config(rows, cols, dtype, dataflow)
    text = array_verilog(rows, cols, dtype, dataflow)
    if output == "-":
        click.echo(text, nl=False)
        return
    Path(output).write_text(text)
    click.echo(f"wrote {output}: module {toplevel_name(rows, cols, dtype, dataflow)} "
               f"({rows}x{cols} {dtype} {dataflow.upper()})", err=True)


@rtl.command("test")
@click.option("--rows", type=int, help="Array rows (default: 8 for int8, 4 for bf16).")
@click.option("--cols", type=int, help="Array columns (default: as rows).")
@click.option("--dtype", type=click.Choice(_DTYPES), help="Element type.")
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), help="os or ws.")
@click.option("--seed", type=int, default=1, show_default=True, help="Stimulus seed.")
@click.option("--tiles", type=int, default=10, show_default=True, help="Tiles per run.")
@click.option("--waves", is_flag=True, help="Record FST waveforms (kept in --work-dir).")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="Keep Verilog, build and waves here (default: a temporary directory).")
@click.option("--verbose", is_flag=True, help="Show Verilator's and cocotb's output.")
@friendly
def rtl_test(rows, cols, dtype, dataflow, seed, tiles, waves, work_dir, verbose):
    """Build with Verilator and run the cocotb bench; every output is checked bit-exactly
    against the golden model and at the cycle diptych.sim.timing predicts.

    Without --rows/--cols/--dtype/--dataflow it runs the CI set: INT8 OS and WS 8x8, BF16 OS
    and WS 4x4. Exits non-zero if any check fails.
    """
    from ..rtl.array import check_config
    from ..rtl.verilator import VerilatorMissing, run_bench

    if waves and work_dir is None:
        work_dir = "rtl-waves"
    if rows is cols is dtype is dataflow is None:
        configs = STANDARD_CONFIGS
    else:
        dtype = dtype or "int8"
        dataflow = dataflow or "os"
        rows = rows if rows is not None else (8 if dtype == "int8" else 4)
        cols = cols if cols is not None else rows
        configs = ((rows, cols, dtype, dataflow),)
    for cfg in configs:
        check_config(*cfg)
    if isinstance(tiles, bool) or tiles < 1:
        raise ValueError(f"tiles must be a positive integer, not {tiles!r}")
    results = []
    for r, c, dt, df in configs:
        click.echo(f"building and testing {dt} {df} {r}x{c} ...", err=True)
        try:
            res = run_bench(r, c, dt, df, seed=seed, tiles=tiles, waves=waves,
                            work_dir=None if work_dir is None else Path(work_dir),
                            quiet=not verbose)
        except VerilatorMissing as exc:
            raise UsageError(str(exc)) from None
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
        results.append(res)
        click.echo(res.summary())
        if res.waves:
            click.echo(f"  waves: {res.waves}")
    failed = [r for r in results if not r.passed]
    click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise SystemExit(1)


@rtl.command("area")
@click.option("--dtype", type=click.Choice(_DTYPES + ("both",)), default="both",
              show_default=True, help="PE element type to synthesise.")
@click.option("--rows", type=int, help="Also synthesise an array of this many rows.")
@click.option("--cols", type=int, help="... and this many columns.")
@click.option("--dataflow", type=click.Choice(_DATAFLOWS), default="os", show_default=True,
              help="Dataflow of the array (with --rows/--cols).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@friendly
def rtl_area(dtype, rows, cols, dataflow, as_json):
    """Synthesise a PE (and optionally an array) with Yosys synth + stat; report cell counts."""
    from ..rtl.area import area_report

    dtypes = _DTYPES if dtype == "both" else (dtype,)
    try:
        reports = {dt: area_report(dt, rows, cols, dataflow) for dt in dtypes}
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    ratios = {}
    if len(dtypes) == 2:
        a, b = reports["int8"]["blocks"], reports["bf16"]["blocks"]
        ratios = {k: round(b[k]["cells"] / a[k]["cells"], 2) for k in a if k in b}
    if as_json:
        click.echo(dumps({"reports": reports, "bf16_to_int8_cell_ratio": ratios}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("dtype", "block", "cells", "flip-flops", "logic cells", "transistors (est.)",
                  title="Yosys synth -flatten; stat (generic gate library)")
    for dt, rep in reports.items():
        for name, s in rep["blocks"].items():
            tr = f"{s['transistors_est']}{'+' if s['transistors_partial'] else ''}"
            table.add_row(dt, name, str(s["cells"]), str(s["flip_flops"]),
                          str(s["logic_cells"]), tr)
    console = Console()
    console.print(table)
    if ratios:
        console.print("BF16 : INT8 cells  " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))
