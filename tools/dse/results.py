"""The results directory of a sweep: Parquet parts with one schema, a lock, safe resumes.

Layout::

    out/
      part-<ns>-<hex>.parquet   one per finished task, written atomically (temp file, fsync,
                                rename), so a killed sweep leaves only whole files
      _common_metadata          the directory's schema (Parquet metadata file, no rows)
      .sweep.lock               flock()ed by the sweep writing here; holds its pid

**One schema for every part**, so that ``pandas.read_parquet(out)``, ``pyarrow.dataset``,
polars and duckdb read the directory as one table. The columns are declared before the first
part is written (point id, the spec's parameters, the chip columns, the evaluator's declared
metrics, the error columns); every part is written with exactly that schema, nulls typed. A
value the schema does not cover (a metric a custom evaluator did not declare, or a value wider
than its column: an int in a bool column, a float in an int column, anything in a string
column) extends or widens the schema deterministically (null < bool < int64 < float64 <
string) and every existing part is rewritten to it before the new part is written. Opening a
directory repairs it: stale temporary files are removed and parts whose schema differs from the
unified one (a kill during a rewrite, a directory from an older diptych) are rewritten.

**Rows whose worker died** (``worker_died`` true) hold no result: the point's process was
killed (out of memory, a crash) rather than the point failing. A resume drops those rows and
runs the points again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from ...arch.atomic import atomic_write, fsync_dir

PART_GLOB = "part-*.parquet"
SCHEMA_FILE = "_common_metadata"
LOCK_FILE = ".sweep.lock"

_RANK = ("null", "bool", "int64", "double", "string")


def _pa():
    import pyarrow as pa
    return pa


def arrow_type(py: type):
    """The Arrow type of a column of Python ``py`` values (bool, int, float, str)."""
    pa = _pa()
    return {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}[py]


def _value_type(v: Any):
    pa = _pa()
    if v is None:
        return pa.null()
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        return pa.int64() if -2**63 <= v < 2**63 else pa.float64()
    if isinstance(v, float):
        return pa.float64()
    return pa.string()


def wider(a, b):
    """The narrowest of null < bool < int64 < float64 < string holding both Arrow types
    (an unknown type counts as string)."""
    ra = _RANK.index(str(a)) if str(a) in _RANK else len(_RANK) - 1
    rb = _RANK.index(str(b)) if str(b) in _RANK else len(_RANK) - 1
    return a if ra >= rb else b


def _coerce(v: Any, t) -> Any:
    if v is None:
        return None
    name = str(t)
    if name == "bool":
        return bool(v)
    if name == "int64":
        return int(v)
    if name == "double":
        return float(v)
    return v if isinstance(v, str) else str(v)


def table(rows: list[dict], schema):
    """``rows`` as a ``pyarrow.Table`` with exactly ``schema`` (missing keys are null)."""
    pa = _pa()
    arrays = [pa.array([_coerce(r.get(f.name), f.type) for r in rows], type=f.type)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def part_files(out: str | Path) -> list[Path]:
    """The part files of a results directory, oldest first."""
    return sorted(Path(out).glob(PART_GLOB))


class Locked(ValueError):
    """Another sweep holds the results directory."""


class ResultsDir:
    """A results directory opened for writing: locked, repaired, with one schema.

    Use as a context manager; ``columns`` (name → Arrow type, in order) are declared before
    anything is written. Raises :class:`Locked` (a ValueError) naming the directory and the
    holder's pid when another sweep writes there.
    """

    def __init__(self, out: str | Path, columns: dict[str, Any]):
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"--out {self.out}: exists and is not a directory")
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._lock()
        try:
            self._clean_temporaries()
            self.schema = self._repair(columns)
        except BaseException:
            self.close()
            raise

    # ---- lock -------------------------------------------------------------------------------
    def _lock(self) -> int | None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return None
        path = self.out / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Locked(f"{self.out}: another sweep (pid {holder}) is writing to this results "
                         "directory; wait for it to finish, or use another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- schema -----------------------------------------------------------------------------
    def _clean_temporaries(self) -> None:
        for p in self.out.glob(".*.tmp"):
            if p.name.startswith((".part-", f".{SCHEMA_FILE}")):
                p.unlink(missing_ok=True)

    def _repair(self, columns: dict[str, Any]):
        """The unified schema of the declared ``columns``, the schema file and every part;
        parts that differ from it are rewritten."""
        import pyarrow.parquet as pq

        from ...arch.schema import check_columns, check_input_file

        pa = _pa()
        fields: dict[str, Any] = dict(columns)
        found = []
        sources = [self.out / SCHEMA_FILE] if (self.out / SCHEMA_FILE).exists() else []
        for f in sources + part_files(self.out):
            check_input_file(f, "results part", error=ValueError, max_bytes=None)
            try:
                s = pq.read_schema(f)
            except (OSError, pa.ArrowException) as exc:
                raise ValueError(f"{f}: not a readable Parquet file ({exc}); move it out of "
                                 "the results directory") from None
            check_columns(f, None, s.names, error=ValueError)
            if f.name != SCHEMA_FILE:
                found.append((f, s))
            for fld in s:
                t = fields.get(fld.name)
                fields[fld.name] = fld.type if t is None else wider(t, fld.type)
        schema = pa.schema([(n, pa.string() if str(t) == "null" else t)
                            for n, t in fields.items()])
        for f, s in found:
            if not s.equals(schema):
                self._rewrite(f, schema)
        self._write_schema(schema)
        return schema

    def _write_schema(self, schema) -> None:
        import pyarrow.parquet as pq

        atomic_write(self.out / SCHEMA_FILE, lambda fh: pq.write_metadata(schema, fh))

    def _rewrite(self, f: Path, schema, keep=None) -> None:
        import pyarrow.parquet as pq

        rows = pq.read_table(f).to_pylist()
        if keep is not None:
            rows = [r for r in rows if keep(r)]
            if not rows:
                f.unlink()
                fsync_dir(self.out)
                return
        t = table(rows, schema)
        atomic_write(f, lambda fh: pq.write_table(t, fh))

    def _extend(self, rows: list[dict]) -> None:
        """Add or widen columns for values the schema does not cover; rewrite every part."""
        pa = _pa()
        fields = {f.name: f.type for f in self.schema}
        changed = False
        for r in rows:
            for k, v in r.items():
                vt = _value_type(v)
                t = fields.get(k)
                if t is None:
                    if str(vt) != "null":
                        fields[k] = vt
                        changed = True
                elif not wider(t, vt).equals(t):
                    fields[k] = wider(t, vt)
                    changed = True
        if not changed:
            return
        self.schema = pa.schema(list(fields.items()))
        for f in part_files(self.out):
            self._rewrite(f, self.schema)
        self._write_schema(self.schema)

    # ---- rows -------------------------------------------------------------------------------
    def write(self, rows: list[dict]) -> Path:
        """Write ``rows`` as one part with the directory's schema (extended if needed)."""
        import time
        import uuid

        import pyarrow.parquet as pq

        self._extend(rows)
        t = table(rows, self.schema)
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        return atomic_write(self.out / name, lambda fh: pq.write_table(t, fh))

    def finished_ids(self) -> set[str]:
        """Point ids with a row that holds a result or a deterministic failure."""
        return finished_ids(self.out)

    def forget(self, ids: Iterable[str]) -> int:
        """Drop the rows of ``ids`` whose worker died (to run them again); returns how many."""
        import pyarrow.parquet as pq

        ids = set(ids)
        if not ids or "worker_died" not in self.schema.names:
            return 0
        dropped = 0
        for f in part_files(self.out):
            t = pq.read_table(f, columns=["point_id", "worker_died"]).to_pylist()
            n = sum(1 for r in t if r["worker_died"] and r["point_id"] in ids)
            if n:
                self._rewrite(f, self.schema,
                              keep=lambda r: not (r.get("worker_died") and r["point_id"] in ids))
                dropped += n
        return dropped


def finished_ids(out: str | Path) -> set[str]:
    """Point ids already recorded in ``out``, except rows whose worker died (reads only the
    id and ``worker_died`` columns)."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for f in part_files(out):
        names = pq.read_schema(f).names
        cols = ["point_id"] + (["worker_died"] if "worker_died" in names else [])
        for r in pq.read_table(f, columns=cols).to_pylist():
            if not r.get("worker_died"):
                ids.add(r["point_id"])
    return ids


def read_results(path: str | Path):
    """All rows of a results directory (or one .parquet / .csv file) as a ``pyarrow.Table``.

    Parts of directories written by older versions may differ in columns or types: the union
    is taken, missing values are null. A point id present twice keeps its first row that
    holds a result (its last row if its worker died every time).
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from ...arch.schema import check_columns, check_input_file

    path = Path(path)
    try:
        if path.is_dir():
            files = part_files(path)
            if not files:
                raise ValueError(f"{path}: no results (no {PART_GLOB} files); run `diptych "
                                 "sweep` with --out pointing here first")
            tables = []
            for f in files:
                check_input_file(f, "results part", error=ValueError, max_bytes=None)
                try:
                    check_columns(f, None, pq.read_schema(f).names, error=ValueError)
                    tables.append(pq.read_table(f))
                except (OSError, pa.ArrowException) as exc:
                    raise ValueError(f"{f}: not a readable Parquet file ({exc})") from None
            result = pa.concat_tables(tables, promote_options="permissive")
        elif not path.exists():
            raise ValueError(f"{path}: no such results directory or file")
        elif path.suffix in (".parquet", ".csv"):
            check_input_file(path, "results file", error=ValueError, max_bytes=None)
            if path.suffix == ".csv":
                result = pcsv.read_csv(path)
                check_columns(path, 1, result.column_names, error=ValueError)
            else:
                check_columns(path, None, pq.read_schema(path).names, error=ValueError)
                result = pq.read_table(path)
        else:
            raise ValueError(f"{path}: expected a results directory, a .parquet or a .csv file")
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"{path}: cannot read results ({' '.join(str(exc).split())})") from None
    return _dedup(result)


def _dedup(t):
    pa = _pa()
    if "point_id" not in t.column_names or not t.num_rows:
        return t
    ids = t.column("point_id").to_pylist()
    died = (t.column("worker_died").to_pylist() if "worker_died" in t.column_names
            else [None] * len(ids))
    chosen: dict = {}
    for i, pid in enumerate(ids):
        prev = chosen.get(pid)
        if prev is None or died[prev]:  # a later row replaces one whose worker died
            chosen[pid] = i
    if len(chosen) == len(ids):
        return t
    return t.take(pa.array(sorted(chosen.values())))
