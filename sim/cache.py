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
  misses; a cache directory that cannot be written disables the cache for the process.
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
import os
import tempfile
from functools import lru_cache
from pathlib import Path

#: Environment variables: the cache directory, and the off switch (any value but "", "0").
ENV_DIR = "DIPTYCH_CACHE_DIR"
ENV_OFF = "DIPTYCH_NO_CACHE"

#: Bump when the file format changes.
FORMAT = 1

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


def load(k: str):
    """The cached :class:`OpStats` under key ``k``, or None."""
    from .stats import OpStats
    try:
        with open(_path(k), encoding="utf-8") as fh:
            d = json.load(fh)
        return OpStats(**d)
    except (OSError, ValueError, TypeError):
        return None


def store(k: str, stats) -> None:
    """Write ``stats`` under key ``k`` atomically; on failure the cache turns itself off."""
    p = _path(k)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(stats.to_dict(), fh)
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


def clear() -> int:
    """Delete every cached result (and leftover temporary files); returns how many."""
    n = 0
    root = _results_dir()
    if not root.is_dir():
        return 0
    for f in list(root.glob("*/*.json")) + list(root.glob("*/.tmp-*")):
        try:
            f.unlink()
            n += not f.name.startswith(".tmp-")
        except OSError:
            pass
    for d in root.glob("*"):
        try:
            d.rmdir()
        except OSError:
            pass
    return n
