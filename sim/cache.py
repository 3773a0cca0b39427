"""A persistent cache of op results (:class:`~diptych.sim.OpStats`) shared by processes.

``simulate`` remembers results in memory for the life of a process; this cache remembers them
on disk, so that a notebook loop, a second ``diptych run`` or the workers of a sweep do not
simulate the same op on the same chip again.

* **Key**: a SHA-256 of the op's shape and dtypes (name and tags excluded), the complete chip
  description, the dataflow, the diptych version and a hash of the source of ``diptych.sim``
  and ``diptych.arch``: a result computed by other code is never served, even during
  development with an unchanged version number.
* **Location**: ``$DIPTYCH_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/diptych``, else
  ``~/.cache/diptych``; results live in ``results/`` below it, one small JSON file per key.
* **Concurrency**: a result is written to a temporary file in the same directory and renamed
  into place (atomic on POSIX), so concurrent sweep workers never read a partial file; two
  workers writing the same key write the same bytes. Unreadable or corrupt files count as
  misses; a cache directory that cannot be written disables the cache for the process. The
  directories are created private to the user (mode 0700).
* **Trust**: an entry carries a SHA-256 of its key and its result, and the result is checked
  against the :class:`~diptych.sim.stats.OpStats` schema (every field, its type, finite and
  non-negative numbers, the cycle identity) before it is served; an entry that fails either
  (edited, forged, truncated, from a bug) is deleted, recomputed and rewritten, with a
  warning naming the file and what was wrong. ``cache clear`` deletes only the files the
  cache writes (``<2 hex>/<64 hex>.json`` and its temporaries) and never follows a link.
* **Off switch**: ``DIPTYCH_NO_CACHE=1`` (the CLI's ``--no-cache`` sets it, so that it reaches
  sweep workers too) or :func:`set_enabled`. Results are identical either way (floats are
  stored with ``repr``, which round-trips exactly; the tests compare).

``diptych cache info`` and ``diptych cache clear`` (tools/cache_cmd.py) use :func:`info` and
:func:`clear`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

#: Environment variables: the cache directory, and the off switch (any value but "", "0").
ENV_DIR = "DIPTYCH_CACHE_DIR"
ENV_OFF = "DIPTYCH_NO_CACHE"

#: Bump when the file format changes (2: entries carry a checksum).
FORMAT = 2

_state = {"enabled": None}


def cache_dir() -> Path:
    """The cache directory (it may not exist yet)."""
    d = os.environ.get(ENV_DIR)
    if d:
        return Path(d).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "diptych"


def _results_dir() -> Path:
    return cache_dir() / "results"


def enabled() -> bool:
    """Whether results are read from and written to the cache."""
    if _state["enabled"] is not None:
        return _state["enabled"]
    return os.environ.get(ENV_OFF, "") in ("", "0")


def set_enabled(on: bool | None) -> None:
    """Turn the cache on or off for this process (None: follow ``DIPTYCH_NO_CACHE`` again)."""
    _state["enabled"] = on


class disabled:
    """Context manager: the cache off inside, the previous setting restored after."""

    def __enter__(self):
        self._prev = _state["enabled"]
        _state["enabled"] = False
        return self

    def __exit__(self, *exc):
        _state["enabled"] = self._prev
        return False


def _version() -> str:
    """The installed distribution's version (as ``diptych --version`` prints it)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("diptych")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


@lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 of the diptych version, the source files of diptych.sim and diptych.arch, and
    the op records the cache keys on (:mod:`diptych.workloads.ops`)."""
    from .. import arch
    from ..workloads import ops
    h = hashlib.sha256(f"format {FORMAT} version {_version()}\n".encode())
    files = []
    for pkg in (Path(__file__).parent, Path(arch.__file__).parent):
        files += [(f, pkg.parent) for f in sorted(pkg.rglob("*.py")) + sorted(pkg.rglob("*.toml"))]
    files.append((Path(ops.__file__), Path(ops.__file__).parent.parent))
    for f, root in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _canonical(obj):
    """A JSON-ready, order-independent form of dataclasses, tuples, dicts and scalars."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canonical(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, float):
        return repr(obj)           # exact, and tells 1.0 from 1
    return obj


@lru_cache(maxsize=256)
def _chip_digest(chip) -> str:
    return hashlib.sha256(json.dumps(_canonical(chip), sort_keys=True).encode()).hexdigest()


def key(kind: str, shape, chip, dataflow) -> str:
    """The cache key of one op result (``shape``: the op with name and tags cleared)."""
    doc = {"kind": kind, "op": type(shape).__name__, "shape": _canonical(shape),
           "chip": _chip_digest(chip), "dataflow": dataflow, "code": code_hash()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _path(k: str) -> Path:
    return _results_dir() / k[:2] / f"{k}.json"


def _checksum(k: str, result: dict) -> str:
    return hashlib.sha256(json.dumps({"key": k, "result": _canonical(result)},
                                     sort_keys=True).encode()).hexdigest()


def check_entry(k: str, d) -> str | None:
    """What is wrong with cache entry ``d`` read under key ``k`` (None: nothing): its
    checksum, then its result against the :class:`OpStats` schema."""
    from .stats import OpStats
    if not isinstance(d, dict) or set(d) != {"result", "sha256"}:
        return "not a cache entry (expected result and sha256)"
    res = d["result"]
    if not isinstance(res, dict) or d["sha256"] != _checksum(k, res):
        return "checksum mismatch (the file was changed after it was written)"
    fields = {f.name: f.type for f in dataclasses.fields(OpStats)}
    if set(res) != set(fields):
        return f"fields {sorted(set(res) ^ set(fields))} missing or unknown"
    for name, typ in fields.items():
        v = res[name]
        if typ == "int":
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
        elif typ == "float":
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v) and v >= 0)
        elif typ == "str":
            ok = isinstance(v, str)
        else:
            ok = isinstance(v, dict)
        if not ok:
            return f"{name} = {str(v)[:40]!r} is not a valid {typ}"
    for name in ("stall_breakdown", "energy_breakdown"):
        for part, v in res[name].items():
            if (isinstance(v, bool) or not isinstance(v, (int, float))
                    or not math.isfinite(v) or v < 0):
                return f"{name}[{part!r}] = {str(v)[:40]!r} is not a finite number >= 0"
    if res["stall_cycles"] != res["cycles"] - res["array_busy_cycles"]:
        return "stall_cycles != cycles - array_busy_cycles"
    return None


def load(k: str):
    """The cached :class:`OpStats` under key ``k``, or None (a miss). An entry that fails
    :func:`check_entry` is deleted with a warning (it is recomputed by the caller)."""
    from .stats import OpStats
    p = _path(k)
    try:
        with open(p, encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        return None
    bad = check_entry(k, d)
    if bad is not None:
        warnings.warn(f"cache entry {p} is invalid ({bad}): discarded and recomputed",
                      stacklevel=3)
        try:
            p.unlink()
        except OSError:
            pass
        return None
    return OpStats(**d["result"])


def store(k: str, stats) -> None:
    """Write ``stats`` under key ``k`` atomically; on failure the cache turns itself off."""
    p = _path(k)
    try:
        for d in (cache_dir(), _results_dir(), p.parent):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        try:
            result = stats.to_dict()
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"result": result, "sha256": _checksum(k, result)}, fh)
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        set_enabled(False)


def cached(kind: str, shape, chip, dataflow, compute):
    """``compute()`` through the cache (when enabled) under the key of this op result."""
    if not enabled():
        return compute()
    k = key(kind, shape, chip, dataflow)
    hit = load(k)
    if hit is not None:
        return hit
    st = compute()
    store(k, st)
    return st


def _files():
    root = _results_dir()
    return list(root.glob("*/*.json")) if root.is_dir() else []


def info() -> dict:
    """Location, number of results, bytes on disk and whether the cache is on."""
    files = _files()
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            pass
    return {"location": str(cache_dir()), "entries": len(files), "bytes": size,
            "enabled": enabled(), "code_hash": code_hash()[:16]}


#: What the cache writes below ``results/``: shard directories and their files.
_SHARD = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{64}\.json|\.tmp-.*")


def clear() -> int:
    """Delete every cached result (and leftover temporary files); returns how many. Only
    what the cache writes is touched (a shard directory of two hex digits holding files
    named by their key); links, to files or directories, are never followed or deleted."""
    n = 0
    root = _results_dir()
    if root.is_symlink() or not root.is_dir():
        return 0
    for d in root.iterdir():
        if d.is_symlink() or not d.is_dir() or not _SHARD.fullmatch(d.name):
            continue
        for f in d.iterdir():
            if f.is_symlink() or not f.is_file() or not _ENTRY.fullmatch(f.name):
                continue
            try:
                f.unlink()
                n += not f.name.startswith(".tmp-")
            except OSError:
                pass
        try:
            d.rmdir()
        except OSError:
            pass
    return n
