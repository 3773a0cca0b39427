"""Run a sweep: evaluate every point of a spec on an executor, writing rows as they finish.

* **One code path for every executor**: work goes through the ``concurrent.futures.Executor``
  interface (:mod:`.pool`): a local process pool by default, or a Dask cluster's executor.
* **Incremental, resumable output** (:mod:`.results`): one Parquet part per finished task, all
  with one schema, written atomically into a locked directory. On restart the ids already
  present are skipped: no point is lost or run twice.
* **Failures are data**: an exception while evaluating a point becomes that point's ``error``
  column; the sweep goes on. A metric that is NaN or infinite is an error too (the values
  are kept); a ``MemoryError`` is not the point's fault: it is recorded like a dead worker
  and run again on resume.
* **Dead workers lose nothing** (:class:`_Driver`): when a worker process dies the pool is
  rebuilt and the tasks in flight run again, alone, until the point that kills its worker is
  found; only that point is recorded as failed (``worker_died``), and a resume runs it again.
* **Budgets**: points whose die exceeds ``area_budget_mm2`` are not run (an error if that
  leaves none); ``power_budget_w`` adds a ``within_power_budget`` column.

The evaluation callable is a parameter (``evaluate(chip, workload) -> dict of scalars``) so that
tests and users can plug in their own; it must be picklable (a module-level function). It may
declare its metrics' types in a ``metric_types`` attribute (see :func:`result_columns`).
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ...arch.area import area_breakdown_mm2
from .pool import Pool, local_workers
from .results import (PART_GLOB, ResultsDir, arrow_type, finished_ids, part_files,  # noqa: F401
                      read_results)
from .spec import WORKLOAD_PARAMS, Point, SweepSpec

Evaluate = Callable[[Any, dict], dict]


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
    worker_deaths: int = 0     # times a worker process died (its points were run again)
    succeeded: int = 0         # points of the spec with a result in the directory
    first_error: str | None = None  # the first error recorded for a point of the spec

    def describe(self) -> str:
        rate = f", {self.ran / self.seconds:.1f} points/s" if self.seconds > 0 and self.ran else ""
        died = (f"; a worker process died {self.worker_deaths} time(s), its points were run "
                "again" if self.worker_deaths else "")
        return (f"{self.total} points: {self.ran} run ({self.failed} failed), "
                f"{self.skipped} already done, {self.over_budget} over the area budget{died}; "
                f"{self.seconds:.1f} s{rate}; results in {self.out}")


# ---- evaluation ------------------------------------------------------------------------------


def chip_columns(chip) -> dict[str, Any]:
    """Per-chip columns of every row: derived peaks, the second memory tier
    (:func:`tier_columns`) and the area breakdown."""
    parts = area_breakdown_mm2(chip)
    cols: dict[str, Any] = {
        "chip": chip.name,
        "area_mm2": sum(parts.values()),
        **{f"area_{k}_mm2": v for k, v in parts.items()},
        "peak_ops_per_s": chip.peak_ops_per_s[chip.default_dtype],
        "dram_bytes_per_s": chip.dram_bytes_per_s,
        **tier_columns(chip),
        "sram_mib_total": chip.sram_bytes / 2**20,
        "tdp_w": chip.tdp_w,
        "default_dtype": chip.default_dtype,
    }
    from .physical import physical_columns
    cols.update(physical_columns(chip))  # feasible, infeasible_reason, outline, cost, NoC
    return cols


def tier_columns(chip) -> dict[str, Any]:
    """The second memory tier's columns (docs/dse.md, "Memory-tier axes"): ``dram2_attach``
    (``"none"`` without a tier, else ``package``, ``cxl``, ``pcie`` or ``c2c``),
    ``dram2_gib`` and ``dram2_bytes_per_s`` (what it delivers: pins or links; 0 without); the
    third tier's likewise (``dram3_attach``, ``dram3_gib``, ``dram3_bytes_per_s``)."""
    out = {}
    for name in ("dram2", "dram3"):
        t = getattr(chip, name, None)
        out.update({f"{name}_attach": "none" if t is None else t.attach,
                    f"{name}_gib": 0.0 if t is None else float(t.capacity_gib),
                    f"{name}_bytes_per_s": 0.0 if t is None else t.bytes_per_s})
    return out


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
                k, v = str(k), _scalar(v)
                if k in row:
                    if row[k] == v:
                        continue  # the result repeats a parameter (batch, phase, chip ...)
                    k = f"metric_{k}"
                row[k] = v
            bad = [k for k in metrics if isinstance(row.get(k), float)
                   and not math.isfinite(row[k])]
            row["error"] = (f"non-finite metric: {', '.join(f'{k} = {row[k]!r}' for k in bad)}"
                            if bad else None)
            row["worker_died"] = False
        except MemoryError as exc:
            # not a property of the point: recorded like a dead worker, so that the next run
            # of the sweep tries it again (finished_ids skips it)
            row["error"] = f"MemoryError: {exc} (transient: run again on resume)"
            row["traceback"] = traceback.format_exc(limit=6)
            row["worker_died"] = True
        except Exception as exc:  # noqa: BLE001 - a failing point is recorded, not fatal
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc(limit=6)
            row["worker_died"] = False
        if power_budget_w is not None:
            p = row.get("power_w")
            row["within_power_budget"] = (None if p is None else bool(p <= power_budget_w))
        row["eval_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


# ---- results directory (see :mod:`.results`) -------------------------------------------------


def result_columns(spec: SweepSpec, fn: Evaluate) -> dict[str, Any]:
    """The declared columns (name → Arrow type) of a sweep's rows, in order: point id, the
    spec's parameters, the chip columns, the evaluator's declared metrics (its
    ``metric_types`` attribute: a dict or a callable returning one, name → bool/int/float/str),
    then the error, bookkeeping and budget columns."""
    import pyarrow as pa

    kinds = {"int": int, "float": float}
    cols: dict[str, Any] = {"point_id": pa.string()}
    for name in spec.chip_axes:
        kind = spec.chip_kinds.get(name, "float")
        cols[name] = arrow_type(kinds.get(kind, str))
    for name in spec.workload_axes:
        cols[name] = arrow_type(kinds.get(WORKLOAD_PARAMS[name][0], str))
    for name, v in chip_columns(spec.base_chip).items():
        if v is not None:  # a column null on the base chip is added when a value appears
            cols.setdefault(name, arrow_type(type(v)))
    declared = getattr(fn, "metric_types", None)
    declared = declared() if callable(declared) else (declared or {})
    for name, py in declared.items():
        if name not in cols and py in (bool, int, float, str):
            cols[name] = arrow_type(py)
    cols.update(error=pa.string(), worker_died=pa.bool_(), traceback=pa.string())
    if spec.power_budget_w is not None:
        cols["within_power_budget"] = pa.bool_()
    cols["eval_s"] = pa.float64()
    return cols


# ---- the driver ------------------------------------------------------------------------------

#: A task whose worker process died while it ran alone is split into single points; a point
#: whose worker died this many times while it ran alone is recorded as failed (``worker_died``
#: true, so that a resume runs it again).
MAX_WORKER_DEATHS = 2


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _chip_points(spec: SweepSpec):
    """(chip params, chip, chip columns, error) of every distinct chip point, in spec order."""
    seen: set[str] = set()
    for cp in spec.chip_points():
        key = repr(sorted(cp.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            chip = spec.build_chip(cp)
            yield cp, chip, chip_columns(chip), None
        except ValueError as exc:
            yield cp, None, None, f"{type(exc).__name__}: {exc}"


def _distinct(points: list[dict]) -> list[dict]:
    return list({repr(sorted(w.items())): w for w in points}.values())


def count_points(spec: SweepSpec) -> tuple[int, int, int]:
    """(points to run, points of invalid chips, points over the area budget), building every
    chip point but no sweep point (``sweep --dry-run``)."""
    n_wl = len(_distinct(spec.workload_points()))
    run = bad = over = 0
    for _, chip, cols, err in _chip_points(spec):
        if err is not None:
            bad += n_wl
        elif spec.area_budget_mm2 is not None and cols["area_mm2"] > spec.area_budget_mm2:
            over += n_wl
        else:
            run += n_wl
    return run, bad, over


def prepare(spec: SweepSpec) -> tuple[list[tuple[Point, Any, dict]], list[dict], int]:
    """Build every point's chip: (runnable items, error rows for invalid chips, over-budget)."""
    items, bad, over, areas = [], [], 0, []
    workloads = _distinct(spec.workload_points())
    for cp, chip, cols, err in _chip_points(spec):
        pts = [spec.point(cp, wp) for wp in workloads]
        if err is not None:
            bad += [{"point_id": p.id, **p.params, "error": err, "worker_died": False}
                    for p in pts]
            continue
        areas.append(cols["area_mm2"])
        if spec.area_budget_mm2 is not None and cols["area_mm2"] > spec.area_budget_mm2:
            over += len(pts)
            continue
        items += [(p, chip, cols) for p in pts]
    if not items and not bad:
        smallest = f"; the smallest die is {min(areas):.1f} mm²" if areas else ""
        raise ValueError(f"{spec.source}: area_budget_mm2 = {spec.area_budget_mm2} excludes "
                         f"every one of the {over} points{smallest}")
    return items, bad, over


def run_sweep(spec: SweepSpec, out: str | Path, *, evaluate: Evaluate | str | None = None,
              scheduler: str | None = None, jobs: int | None = None,
              executor: cf.Executor | None = None, points_per_task: int | None = None,
              progress: bool = True, log: Callable[[str], None] | None = None,
              oversubscribe: bool = False) -> SweepSummary:
    """Evaluate every unfinished point of ``spec`` into the results directory ``out``.

    ``evaluate`` defaults to :func:`diptych.tools.dse.evaluate.evaluate_workload`; ``executor``
    (any ``concurrent.futures.Executor``) overrides ``scheduler``/``jobs``. Local workers are
    ``jobs`` (default one per CPU) capped at the CPU count unless ``oversubscribe``, and at
    the points to run (:func:`~.pool.local_workers`). The directory is
    locked for the duration (a second sweep on it is refused); points whose worker died in an
    earlier run are run again.
    """
    t0 = time.perf_counter()
    log = log or (lambda s: None)
    fn = resolve_evaluator(evaluate)
    items, bad, over = prepare(spec)
    total = len(items) + len(bad) + over
    with ResultsDir(out, result_columns(spec, fn)) as rd:
        again = rd.forget([p.id for p, _, _ in items])
        done = rd.finished_ids()
        todo = [it for it in items if it[0].id not in done]
        new_bad = [r for r in bad if r["point_id"] not in done]
        skipped = len(items) - len(todo) + len(bad) - len(new_bad)
        if new_bad:
            rd.write(new_bad)
        if skipped:
            log(f"resuming: {skipped} of {total - over} points already in {rd.out}")
        if again:
            log(f"running again {again} points whose worker process died last time")
        failed, deaths = len(new_bad), 0
        if todo:
            if executor is None and not scheduler:
                jobs = local_workers(jobs, len(todo), oversubscribe=oversubscribe, log=log)
            pool = Pool(scheduler=scheduler, jobs=jobs, executor=executor)
            size = points_per_task or spec.points_per_task or max(
                1, min(16, len(todo) // (8 * pool.workers)))
            try:
                failed_now, deaths = _Driver(pool, fn, spec.power_budget_w, rd, log).run(
                    todo, size, progress)
            except BaseException:
                pool.close(wait=False)
                raise
            pool.close()
            failed += failed_now
        ok, first_error = _outcome(rd.out, {p.id for p, _, _ in items} | {r["point_id"]
                                                                           for r in bad})
    summary = SweepSummary(total=total, over_budget=over, skipped=skipped,
                           ran=len(todo) + len(new_bad), failed=failed,
                           seconds=time.perf_counter() - t0, out=Path(out), worker_deaths=deaths,
                           succeeded=ok, first_error=first_error)
    if spec.power_budget_w is not None:
        _check_power_budget(spec, Path(out))
    return summary


def _outcome(out: Path, ids: set[str]) -> tuple[int, str | None]:
    """(points of ``ids`` with a result in ``out``, the first error recorded for one)."""
    import pyarrow.parquet as pq

    ok, first = set(), None
    for f in part_files(out):
        for r in pq.read_table(f, columns=["point_id", "error"]).to_pylist():
            if r["point_id"] in ids:
                if r["error"] is None:
                    ok.add(r["point_id"])
                elif first is None:
                    first = r["error"]
    return len(ok), first


@dataclass
class _Job:
    """Points evaluated by one worker call, and how often its worker died running it alone."""

    items: list
    deaths: int = 0


class _Driver:
    """Keeps ``pool.workers`` tasks in flight and writes their rows as they finish.

    When a worker process dies the pool breaks and every task in flight fails with it: the
    pool is rebuilt and those tasks become suspects, run again one at a time, alone (so that
    a death is attributed to the task that ran). A suspect task whose worker dies alone is
    split into single points; a point whose worker dies :data:`MAX_WORKER_DEATHS` times alone
    is recorded as failed with ``worker_died`` true. Nothing else is lost: an exception in a
    worker call that is not a dead worker fails its points deterministically.
    """

    def __init__(self, pool: Pool, fn: Evaluate, power_budget_w, rd: ResultsDir, log):
        self.pool, self.fn, self.power, self.rd, self.log = pool, fn, power_budget_w, rd, log
        self.failed = 0
        self.deaths = 0

    def _rows(self, job: _Job, error: str, worker_died: bool) -> list[dict]:
        return [{"point_id": p.id, **p.params, **cols, "error": error,
                 "worker_died": worker_died} for p, _, cols in job.items]

    def run(self, todo: list, size: int, progress: bool) -> tuple[int, int]:
        """Evaluate ``todo`` in tasks of ``size`` points; returns (failed points, deaths)."""
        from collections import deque

        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        queue = deque(_Job(chunk) for chunk in _chunks(todo, size))
        suspects: deque = deque()
        flight: dict = {}
        alone = False  # the one task in flight is a suspect running alone
        cols = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
                TextColumn("({task.fields[failed]} failed)"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn())
        with Progress(*cols, disable=not progress, transient=False) as bar:
            task = bar.add_task("sweep", total=len(todo), failed=0)

            def record(rows):
                self.rd.write(rows)
                self.failed += sum(1 for r in rows if r.get("error"))
                bar.update(task, advance=len(rows), failed=self.failed)

            while queue or suspects or flight:
                if not flight:
                    alone = bool(suspects)
                    if alone:
                        self._submit(suspects.popleft(), flight)
                if not alone:
                    while queue and len(flight) < self.pool.workers:
                        self._submit(queue.popleft(), flight)
                victims: list[_Job] = []
                done, _ = cf.wait(list(flight), return_when=cf.FIRST_COMPLETED)
                if any(self._broken(f) for f in done):  # the rest of the pool breaks too
                    done = cf.wait(list(flight)).done
                for fut in done:
                    rows = self._result(fut, flight.pop(fut), victims)
                    if rows is not None:
                        record(rows)
                if victims:
                    self.deaths += 1
                    if not self.pool.rebuild():
                        for job in victims + list(suspects) + list(queue):
                            record(self._rows(job, "worker died: the executor broke and cannot "
                                                   "be rebuilt; a resume runs this point again",
                                              True))
                        break
                    self._blame(victims, alone, suspects, record)
        return self.failed, self.deaths

    def _submit(self, job: _Job, flight: dict) -> None:
        try:
            fut = self.pool.executor.submit(run_task, Task(tuple(job.items)), self.fn,
                                            self.power)
        except cf.BrokenExecutor as exc:  # it broke before the call was queued
            fut = cf.Future()
            fut.set_exception(exc)
        flight[fut] = job

    @staticmethod
    def _broken(fut) -> bool:
        return not fut.cancelled() and isinstance(fut.exception(), cf.BrokenExecutor)

    def _result(self, fut, job: _Job, victims: list) -> list[dict] | None:
        """The rows of a finished call; None (and ``job`` added to ``victims``) if its worker
        died."""
        if fut.cancelled() or self._broken(fut):
            victims.append(job)
            return None
        exc = fut.exception()
        if exc is None:
            return fut.result()
        if type(exc).__name__ == "KilledWorker":  # Dask retried and gave up
            return self._rows(job, f"worker died: Dask gave up on this task after its workers "
                                   f"died running it ({exc}); a resume runs it again", True)
        return self._rows(job, f"worker failed: {type(exc).__name__}: {exc}", False)

    def _blame(self, victims: list[_Job], alone: bool, suspects, record) -> None:
        n = sum(len(j.items) for j in victims)
        if not alone:
            self.log(f"a worker process died (killed: out of memory? a crash?); running its "
                     f"{n} points again, one task at a time")
            suspects.extend(victims)
            return
        (job,) = victims
        job.deaths += 1
        if len(job.items) > 1:
            suspects.extendleft(reversed([_Job([it]) for it in job.items]))
        elif job.deaths >= MAX_WORKER_DEATHS:
            p = job.items[0][0]
            self.log(f"point {p.id} killed its worker {job.deaths} times running alone: "
                     "recorded as failed")
            record(self._rows(job, f"worker died: the worker process died {job.deaths} times "
                                   "while evaluating this point alone (killed: out of memory? "
                                   "a crash in native code?); a resume runs it again", True))
        else:
            suspects.appendleft(job)


def _check_power_budget(spec: SweepSpec, out: Path) -> None:
    table = read_results(out)
    if "within_power_budget" not in table.column_names:
        return
    ok = [v for v in table.column("within_power_budget").to_pylist() if v]
    if not ok:
        raise ValueError(f"{spec.source}: power_budget_w = {spec.power_budget_w} W: no point "
                         f"stays within it (results kept in {out}; the column power_w has "
                         "each point's average power)")
