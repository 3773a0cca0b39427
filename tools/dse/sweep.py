"""Run a sweep: evaluate every point of a spec on an executor, writing rows as they finish.

* **One code path for every executor**: work goes through the ``concurrent.futures.Executor``
  interface: a local :class:`~concurrent.futures.ProcessPoolExecutor` by default, or
  ``distributed.Client(address).get_executor()`` for a Dask cluster.
* **Incremental, resumable output**: the results directory holds one Parquet part file per
  finished task (a few points), written to a temporary name, fsynced and renamed, so a killed
  sweep leaves only whole files. On restart the ids already present are skipped: no point is
  lost or run twice.
* **Failures are data**: an exception while evaluating a point becomes that point's ``error``
  column; the sweep goes on.
* **Budgets**: points whose die exceeds ``area_budget_mm2`` are not run (an error if that
  leaves none); ``power_budget_w`` adds a ``within_power_budget`` column.

The evaluation callable is a parameter (``evaluate(chip, workload) -> dict of scalars``) so that
tests and users can plug in their own; it must be picklable (a module-level function).
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import os
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ...arch.area import area_breakdown_mm2
from .spec import Point, SweepSpec

Evaluate = Callable[[Any, dict], dict]

PART_GLOB = "part-*.parquet"


@dataclass(frozen=True)
class Task:
    """What one worker call evaluates: (point, chip) pairs plus the chip columns of each row."""

    items: tuple[tuple[Point, Any, dict], ...]


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep did."""

    total: int            # points in the spec
    over_budget: int      # points skipped by the area budget
    skipped: int          # points already in the results directory
    ran: int              # points evaluated now
    failed: int           # of which recorded with an error
    seconds: float
    out: Path

    def describe(self) -> str:
        rate = f", {self.ran / self.seconds:.1f} points/s" if self.seconds > 0 and self.ran else ""
        return (f"{self.total} points: {self.ran} run ({self.failed} failed), "
                f"{self.skipped} already done, {self.over_budget} over the area budget; "
                f"{self.seconds:.1f} s{rate}; results in {self.out}")


# ---- evaluation ------------------------------------------------------------------------------


def chip_columns(chip) -> dict[str, Any]:
    """Per-chip columns of every row: derived peaks and the area breakdown."""
    parts = area_breakdown_mm2(chip)
    cols: dict[str, Any] = {
        "chip": chip.name,
        "area_mm2": sum(parts.values()),
        **{f"area_{k}_mm2": v for k, v in parts.items()},
        "peak_ops_per_s": chip.peak_ops_per_s[chip.default_dtype],
        "dram_bytes_per_s": chip.dram_bytes_per_s,
        "sram_mib_total": chip.sram_bytes / 2**20,
        "tdp_w": chip.tdp_w,
        "default_dtype": chip.default_dtype,
    }
    from .physical import physical_columns
    cols.update(physical_columns(chip))  # feasible, infeasible_reason, outline, cost, NoC
    return cols


def resolve_evaluator(name: str | Callable | None) -> Evaluate:
    """``None`` → the workload evaluator; ``"pkg.module:function"`` → that function."""
    if name is None:
        from .evaluate import evaluate_workload
        return evaluate_workload
    if callable(name):
        return name
    mod, _, attr = name.partition(":")
    if not mod or not attr:
        raise ValueError(f"evaluator must be written module:function, not {name!r}")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"evaluator {name!r} cannot be loaded ({exc})") from None
    if not callable(fn):
        raise ValueError(f"evaluator {name!r} is not callable")
    return fn


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    try:  # numpy scalars
        return v.item()
    except AttributeError:
        return str(v)


def run_task(task: Task, evaluate: Evaluate, power_budget_w: float | None = None) -> list[dict]:
    """Evaluate every point of ``task``; never raises for a failing point (it gets ``error``)."""
    rows = []
    for point, chip, cols in task.items:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"point_id": point.id, **point.params, **cols}
        try:
            metrics = evaluate(chip, dict(point.workload))
            if not isinstance(metrics, dict):
                raise TypeError(f"evaluator returned {type(metrics).__name__}, not a dict")
            for k, v in metrics.items():
                v = _scalar(v)
                if k in row:
                    if row[k] == v:
                        continue  # the result repeats a parameter (batch, phase, chip ...)
                    k = f"metric_{k}"
                row[k] = v
            row["error"] = None
        except Exception as exc:  # noqa: BLE001 - a failing point is recorded, not fatal
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc(limit=6)
        if power_budget_w is not None:
            p = row.get("power_w")
            row["within_power_budget"] = (None if p is None else bool(p <= power_budget_w))
        row["eval_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


# ---- results directory -----------------------------------------------------------------------


def write_part(out: Path, rows: list[dict]) -> Path:
    """Write ``rows`` as one Parquet part file, atomically (temp file, fsync, rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = out / f".{name}.tmp"
    with open(tmp, "wb") as fh:
        pq.write_table(table, fh)
        fh.flush()
        os.fsync(fh.fileno())
    final = out / name
    os.replace(tmp, final)
    dfd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final


def part_files(out: Path) -> list[Path]:
    return sorted(Path(out).glob(PART_GLOB))


def read_results(path: str | Path):
    """All rows of a results directory (or one .parquet / .csv file) as a ``pyarrow.Table``.

    Part files may differ in columns (e.g. a part of failed points has no metrics): the union
    is taken, missing values are null. A point id present twice keeps its first row.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path = Path(path)
    if path.is_dir():
        files = part_files(path)
        if not files:
            raise ValueError(f"{path}: no results (no {PART_GLOB} files); run `diptych sweep` "
                             "with --out pointing here first")
        tables = [pq.read_table(f) for f in files]
        table = pa.concat_tables(tables, promote_options="permissive")
    elif path.suffix == ".parquet":
        table = pq.read_table(path)
    elif path.suffix == ".csv":
        table = pcsv.read_csv(path)
    elif not path.exists():
        raise ValueError(f"{path}: no such results directory or file")
    else:
        raise ValueError(f"{path}: expected a results directory, a .parquet or a .csv file")
    if "point_id" in table.column_names and table.num_rows:
        ids = table.column("point_id").to_pylist()
        seen: set = set()
        keep = [not (i in seen or seen.add(i)) for i in ids]
        if not all(keep):
            table = table.filter(pa.array(keep))
    return table


def finished_ids(out: Path) -> set[str]:
    """Point ids already recorded in ``out`` (reads only the id column)."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for f in part_files(out):
        ids.update(pq.read_table(f, columns=["point_id"]).column("point_id").to_pylist())
    return ids


# ---- the driver ------------------------------------------------------------------------------


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def make_executor(scheduler: str | None, jobs: int | None):
    """(executor, closer): a local process pool, or a Dask cluster's executor."""
    if scheduler:
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - distributed is a dependency
            raise ValueError(f"--scheduler needs dask.distributed ({exc})") from None
        _probe(scheduler)
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        ex = client.get_executor(pure=False)

        def close():
            ex.shutdown(wait=True)
            client.close()

        return ex, close, sum(client.nthreads().values()) or 1
    n = jobs or os.cpu_count() or 1
    ex = cf.ProcessPoolExecutor(max_workers=n)
    return ex, lambda: ex.shutdown(wait=True, cancel_futures=True), n


def _probe(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at a tcp://HOST:PORT address."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(address if "://" in address else f"tcp://{address}")
    if u.scheme != "tcp" or not u.hostname or not u.port:
        raise ValueError(f"--scheduler must be written tcp://HOST:PORT, not {address!r}")
    try:
        socket.create_connection((u.hostname, u.port), timeout=5).close()
    except OSError as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({exc})") from None


def prepare(spec: SweepSpec) -> tuple[list[tuple[Point, Any, dict]], list[dict], int]:
    """Build every point's chip: (runnable items, error rows for invalid chips, over-budget)."""
    items, bad, over = [], [], 0
    cache: dict[str, tuple] = {}
    for p in spec.points():
        key = repr(sorted(p.chip.items()))
        if key not in cache:
            try:
                chip = spec.build_chip(p.chip)
                cache[key] = (chip, chip_columns(chip), None)
            except ValueError as exc:
                cache[key] = (None, None, f"{type(exc).__name__}: {exc}")
        chip, cols, err = cache[key]
        if err is not None:
            bad.append({"point_id": p.id, **p.params, "error": err})
            continue
        if spec.area_budget_mm2 is not None and cols["area_mm2"] > spec.area_budget_mm2:
            over += 1
            continue
        items.append((p, chip, cols))
    if not items and not bad:
        areas = [c[1]["area_mm2"] for c in cache.values() if c[1] is not None]
        smallest = f"; the smallest die is {min(areas):.1f} mm²" if areas else ""
        raise ValueError(f"{spec.source}: area_budget_mm2 = {spec.area_budget_mm2} excludes "
                         f"every one of the {over} points{smallest}")
    return items, bad, over


def run_sweep(spec: SweepSpec, out: str | Path, *, evaluate: Evaluate | str | None = None,
              scheduler: str | None = None, jobs: int | None = None,
              executor: cf.Executor | None = None, points_per_task: int | None = None,
              progress: bool = True, log: Callable[[str], None] | None = None) -> SweepSummary:
    """Evaluate every unfinished point of ``spec`` into the results directory ``out``.

    ``evaluate`` defaults to :func:`diptych.tools.dse.evaluate.evaluate_workload`; ``executor``
    (any ``concurrent.futures.Executor``) overrides ``scheduler``/``jobs``.
    """
    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    fn = resolve_evaluator(evaluate)
    items, bad, over = prepare(spec)
    total = len(items) + len(bad) + over
    done = finished_ids(out)
    todo = [it for it in items if it[0].id not in done]
    n_bad = len(bad)
    bad = [r for r in bad if r["point_id"] not in done]
    skipped = len(items) - len(todo) + n_bad - len(bad)
    if bad:
        write_part(out, bad)
    failed = len(bad)
    ran = len(bad)
    log = log or (lambda s: None)
    if skipped:
        log(f"resuming: {skipped} of {total - over} points already in {out}")
    if todo:
        closer = None
        workers = 1
        if executor is None:
            executor, closer, workers = make_executor(scheduler, jobs)
        size = points_per_task or spec.points_per_task or max(1, min(16, len(todo) // (8 * workers)))
        try:
            failed_now = _drive(executor, todo, size, fn, spec.power_budget_w, out, progress)
        finally:
            if closer is not None:
                closer()
        failed += failed_now
        ran += len(todo)
    summary = SweepSummary(total=total, over_budget=over, skipped=skipped,
                           ran=ran, failed=failed, seconds=time.perf_counter() - t0, out=out)
    if spec.power_budget_w is not None:
        _check_power_budget(spec, out)
    return summary


def _drive(executor, todo, size, fn, power_budget_w, out: Path, progress: bool) -> int:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    failed = 0
    futures = {}
    for chunk in _chunks(todo, size):
        fut = executor.submit(run_task, Task(tuple(chunk)), fn, power_budget_w)
        futures[fut] = chunk
    cols = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
            TextColumn("({task.fields[failed]} failed)"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn())
    with Progress(*cols, disable=not progress, transient=False) as bar:
        task = bar.add_task("sweep", total=len(todo), failed=0)
        try:
            for fut in cf.as_completed(futures):
                chunk = futures.pop(fut)
                try:
                    rows = fut.result()
                except Exception as exc:  # noqa: BLE001 - a crashed worker fails its points
                    rows = [{"point_id": p.id, **p.params, **cols,
                             "error": f"worker failed: {type(exc).__name__}: {exc}"}
                            for p, _, cols in chunk]
                write_part(out, rows)
                failed += sum(1 for r in rows if r.get("error"))
                bar.update(task, advance=len(rows), failed=failed)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return failed


def _check_power_budget(spec: SweepSpec, out: Path) -> None:
    table = read_results(out)
    if "within_power_budget" not in table.column_names:
        return
    ok = [v for v in table.column("within_power_budget").to_pylist() if v]
    if not ok:
        raise ValueError(f"{spec.source}: power_budget_w = {spec.power_budget_w} W: no point "
                         f"stays within it (results kept in {out}; the column power_w has "
                         "each point's average power)")
