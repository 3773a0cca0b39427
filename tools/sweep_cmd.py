"""``diptych sweep`` and ``diptych pareto``: design-space sweeps and their Pareto fronts."""

from __future__ import annotations

import click

from . import fmt
from .dse.pool_map import scheduler_option
from .errors import echo_err, friendly


@click.command("sweep")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Results directory (Parquet part files); rerun with the same one to resume.")
@scheduler_option("the points (instead of a local process pool)")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: one per CPU; capped at the CPU count "
                   "and at the points to run).")
@click.option("--oversubscribe", is_flag=True,
              help="Let -j run more workers than this machine has CPUs.")
@click.option("--points-per-task", type=click.IntRange(min=1), default=None,
              help="Points per work unit and result file (default: from the spec, else automatic).")
@click.option("--evaluator", default=None, metavar="MODULE:FUNCTION",
              help="Evaluate points with FUNCTION(chip, workload) -> dict instead of run_workload.")
@click.option("--csv", "csv_path", default=None, type=click.Path(dir_okay=False),
              help="Also write every row to this CSV file at the end.")
@click.option("--dry-run", is_flag=True, help="Validate the spec and count the points; run nothing.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@friendly
def sweep(spec, out, scheduler, jobs, oversubscribe, points_per_task, evaluator, csv_path, dry_run,
          no_progress):
    """Run the sweep described by SPEC (TOML) into the results directory --out.

    One row per point (every parameter and metric). Killed sweeps resume where they stopped:
    finished points are skipped, none lost, none duplicated. A point that fails is recorded
    with its error.
    """
    from .dse.csvsafe import safe_table
    from .dse.spec import load_spec
    from .dse.sweep import count_points, read_results, run_sweep

    s = load_spec(spec)
    if dry_run:
        run, bad, over = count_points(s)
        n_wl = len(s.workload_points())
        click.echo(f"{spec}: {run + bad + over:,} points ({s.count() // n_wl:,} chips × "
                   f"{n_wl:,} workloads); {run:,} to run, {bad:,} invalid chips, {over:,} over "
                   "the area budget")
        return
    summary = run_sweep(s, out, evaluate=evaluator, scheduler=scheduler, jobs=jobs,
                        points_per_task=points_per_task, progress=not no_progress, log=echo_err,
                        oversubscribe=oversubscribe)
    click.echo(summary.describe())
    if csv_path:
        import pyarrow.csv as pcsv

        table = read_results(out)
        keep = [c for c in table.column_names if c != "traceback"]
        pcsv.write_csv(safe_table(table.select(keep)), csv_path)
        click.echo(f"wrote {csv_path} ({table.num_rows} rows)")
    if summary.succeeded == 0 and summary.total > summary.over_budget:
        raise SweepFailed(f"every point of {spec} failed (results kept in {out}); the first "
                          f"error: {summary.first_error}")


class SweepFailed(click.ClickException):
    """A sweep none of whose points has a result: exit code 1."""

    exit_code = 1


def _describe(rows: list[dict], key) -> str:
    """A point's parameters (the columns between point_id and chip), found by id or chip."""
    for r in rows:
        if key in (r.get("point_id"), r.get("chip")):
            names = list(r)
            start = names.index("point_id") + 1 if "point_id" in names else 0
            stop = names.index("chip") if "chip" in names else len(names)
            params = " ".join(f"{k}={r[k]}" for k in names[start:stop] if r[k] is not None)
            return f"{params} ({r.get('chip', key)})"
    return str(key)


@click.command("pareto")
@click.argument("results", type=click.Path())
@click.option("--x", "x", default="area_mm2", show_default=True, help="Metric on the x axis.")
@click.option("--y", "y", default="decode_tokens_per_s", show_default=True,
              help="Metric on the y axis (<phase>_<column> picks a phase's rows).")
@click.option("--x-sense", type=click.Choice(["min", "max"]), default=None,
              help="Is smaller or larger x better (default: guessed from the name).")
@click.option("--y-sense", type=click.Choice(["min", "max"]), default=None,
              help="Is smaller or larger y better (default: guessed from the name).")
@click.option("--where", multiple=True, metavar="COLUMN=VALUE",
              help="Keep only rows where COLUMN equals VALUE (repeatable).")
@click.option("--log-x", is_flag=True, help="Logarithmic x axis.")
@click.option("--log-y", is_flag=True, help="Logarithmic y axis.")
@click.option("-o", "--output", default="pareto.svg", show_default=True,
              type=click.Path(dir_okay=False), help="Plot file (.svg, .png or .pdf).")
@friendly
def pareto(results, x, y, x_sense, y_sense, where, log_x, log_y, output):
    """Plot the Pareto front of RESULTS (a sweep directory, .parquet or .csv) and list it."""
    from .dse.floorplan import save_figure
    from .dse.pareto import default_sense, pareto_front, parse_where, select_xy
    from .dse.plots import pareto_plot
    from .dse.sweep import read_results

    rows = read_results(results).to_pylist()
    xs, ys, keys = select_xy(rows, x, y, parse_where(where))
    sx, sy = x_sense or default_sense(x), y_sense or default_sense(y)
    front_ids = set(pareto_front(xs, ys, sx, sy))
    labels = [_describe(rows, k) if i in front_ids else "" for i, k in enumerate(keys)]
    fig = pareto_plot(xs, ys, x_label=fmt.column_label(x), y_label=fmt.column_label(y),
                      sense_x=sx, sense_y=sy, log_x=log_x, log_y=log_y, annotations=labels)
    save_figure(fig, output)
    front = pareto_front(xs, ys, sx, sy)
    click.echo(f"Pareto front ({x} {sx}, {y} {sy}): {len(front)} of {len(xs)} points")
    for i in front:
        click.echo(f"  {x}={xs[i]:.6g}  {y}={ys[i]:.6g}  {_describe(rows, keys[i])}")
    click.echo(f"wrote {output}")
