"""A persistent cache of op results (:class:`~diptych.sim.OpStats`) shared by processes.

``diptych.sim.api.simulate`` writes its GEMMs' results here; vector ops are memoised in memory
only (their closed form costs less than reading an entry back: ``api._vector_cached``).

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
  workers writing the same key write the same bytes. A cache directory that cannot be
  written disables the cache for the process. The directories are created private to the
  user (mode 0700).
* **Trust**: an entry is read without following a link or waiting on a FIFO, at most
  :data:`MAX_ENTRY_BYTES`, as strict JSON (no NaN, no key twice); it carries an
  HMAC-SHA-256 of its key and its result under the cache's own secret (:data:`KEY_FILE`,
  random, private: an entry another cache or a person wrote fails it), and the result is
  checked against the :class:`~diptych.sim.stats.OpStats` schema (every field, its type,
  finite numbers from 0 to :data:`MAX_ENTRY_FLOAT`, counts that fit an int64, the cycle
  identity) before it is served. An entry that fails any of these (edited, forged,
  truncated, copied from another cache, a link or a FIFO in its place, from a bug) is
  deleted (a link itself, never its target), recomputed and rewritten, with a warning
  naming the file and what was wrong. A shard or ``results/`` directory that is a link turns
  the cache off (with a warning): it reads and writes only below what it made. ``cache
  clear`` deletes only the files the cache writes (``<2 hex>/<64 hex>.json`` and its
  temporaries) and never follows a link.
* **Off switch**: ``DIPTYCH_NO_CACHE=1`` (the CLI's ``--no-cache`` sets it, so that it reaches
  sweep workers too) or :func:`set_enabled`. Results are identical either way (floats are
  stored with ``repr``, which round-trips exactly; the tests compare).

Other results use the same files, keys and checks through :func:`load_result` and
:func:`store_result` with their own schema check: the serving step-time grid's pieces
(:mod:`diptych.sim.serving.piece_cache`).

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

class CacheWarning(UserWarning):
    """A fault the cache found in its own files and repaired (an entry discarded and
    recomputed, its key replaced, a linked directory that turns it off); the message names
    the file and the fault. The CLI prints it as one line, ``Warning: <message>``
    (:attr:`one_line`; tools/errors.py), the way ``run`` echoes the warnings it collects."""

    #: Printed as ``Warning: <message>`` by the CLI, without Python's source location.
    one_line = True


#: Environment variables: the cache directory, and the off switch (any value but "", "0").
ENV_DIR = "DIPTYCH_CACHE_DIR"
ENV_OFF = "DIPTYCH_NO_CACHE"

#: Bump when the file format changes (2: entries carry a checksum; 3: an HMAC under the
#: cache's own key).
FORMAT = 3
#: The cache's secret, beside ``results/``: :data:`KEY_BYTES` random bytes, created once
#: (mode 0600) and never shown; every entry is signed with it (HMAC-SHA-256).
KEY_FILE = "key"
KEY_BYTES = 32

_state = {"enabled": None}


def cache_dir() -> Path:
    """The cache directory (it may not exist yet)."""
    env = os.environ
    return _cache_dir_for(env.get(ENV_DIR), env.get("XDG_CACHE_HOME"), env.get("HOME"),
                          env.get("USERPROFILE"))


@lru_cache(maxsize=16)
def _cache_dir_for(d, xdg, home, userprofile) -> Path:
    """:func:`cache_dir` for these values of ``$DIPTYCH_CACHE_DIR``, ``$XDG_CACHE_HOME`` and
    the variables ``~`` expands to (memoised: a store asks for it several times)."""
    if d:
        return Path(d).expanduser()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "diptych"


def _results_dir() -> Path:
    return _results_of(cache_dir())


@lru_cache(maxsize=16)
def _results_of(directory: Path) -> Path:
    return directory / "results"


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


def _canonical_reference(obj):
    """A JSON-ready, order-independent form of dataclasses, tuples, dicts and scalars: the
    definition :func:`_canonical` computes faster (tests/sim/test_cache_speed.py compares)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _canonical_reference(getattr(obj, f.name))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canonical_reference(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _canonical_reference(v) for k, v in obj.items()}
    if isinstance(obj, float):
        return repr(obj)           # exact, and tells 1.0 from 1
    return obj


#: Exact types :func:`_canonical` returns as they are (none is a dataclass, a list, a tuple,
#: a dict or a float, so the reference returns them unchanged too).
_AS_IS = frozenset({str, int, bool, type(None)})


def _canonical(obj):
    """:func:`_canonical_reference`, equal in value and type: the exact types ``str``,
    ``int``, ``bool``, ``None``, ``float``, ``dict``, ``list`` and ``tuple`` are handled
    inline (no dataclass check, one call per container), a dataclass's fields come back
    here; anything else (a subclass such as a numpy float) is the reference's."""
    t = type(obj)
    if t in _AS_IS:
        return obj
    if t is float:
        return repr(obj)
    if t is dict:
        return {str(k): (v if type(v) in _AS_IS else repr(v) if type(v) is float
                         else _canonical(v)) for k, v in obj.items()}
    if t is list or t is tuple:
        return [x if type(x) in _AS_IS else repr(x) if type(x) is float else _canonical(x)
                for x in obj]
    if dataclasses.is_dataclass(obj):
        return {f.name: _canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return _canonical_reference(obj)


@lru_cache(maxsize=256)
def _chip_digest(chip) -> str:
    return hashlib.sha256(json.dumps(_canonical(chip), sort_keys=True).encode()).hexdigest()


def key(kind: str, shape, chip, dataflow) -> str:
    """The cache key of one op result (``shape``: the op with name and tags cleared)."""
    doc = {"kind": kind, "op": type(shape).__name__, "shape": _canonical(shape),
           "chip": _chip_digest(chip), "dataflow": dataflow, "code": code_hash()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _path(k: str) -> Path:
    return _results_dir().joinpath(k[:2], f"{k}.json")


class _Unreadable(Exception):
    """A cache file that cannot be what the cache wrote (its message says why)."""


def _read_regular(p: Path, max_bytes: int) -> bytes | None:
    """The bytes of the regular file ``p`` (None: there is none), or :class:`_Unreadable`:
    a link (not followed), a FIFO (opened without waiting for a writer), a device or a
    directory in its place, over ``max_bytes``, or an error reading it. Nothing blocks."""
    import stat
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(p, flags)
    except (FileNotFoundError, NotADirectoryError):    # no such file, or no such directory
        return None
    except OSError as exc:
        raise _Unreadable("a symbolic link" if os.path.islink(p)
                          else f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unreadable("not a regular file")
        if st.st_size > max_bytes:
            raise _Unreadable(f"{st.st_size:,} bytes, larger than the cache writes")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Unreadable(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _read_key(p: Path) -> bytes | None:
    """The key file's bytes, or None unless it is a regular file of :data:`KEY_BYTES`."""
    try:
        data = _read_regular(p, KEY_BYTES)
    except _Unreadable:
        return None
    return data if data is not None and len(data) == KEY_BYTES else None


@lru_cache(maxsize=8)
def _secret(directory: str) -> bytes | None:
    """The key of the cache in ``directory``, created on first use: random bytes written to
    a private temporary file and linked into place (never half-written; of two processes
    creating it at once, one wins and both use its key). A key file that is not one (a link,
    the wrong size) is replaced: entries signed with the old key then fail their check.
    None when the directory cannot hold one (the cache then turns itself off)."""
    d = Path(directory)
    p = d / KEY_FILE
    key = _read_key(p)
    if key is not None:
        return key
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.path.lexists(p):
            warnings.warn(f"cache key {p} is not a {KEY_BYTES}-byte file: replaced (every "
                          f"entry is recomputed)", CacheWarning, stacklevel=4)
            p.unlink()
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-key-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(KEY_BYTES))
            try:
                os.link(tmp, p)
            except FileExistsError:
                pass              # another process made it first: use theirs
        finally:
            os.unlink(tmp)
    except OSError:
        return None
    return _read_key(p)


def _checksum(k: str, result: dict) -> str | None:
    """The HMAC-SHA-256 of key ``k`` and ``result`` under the cache's key (None: no key)."""
    import hmac
    secret = _secret(str(cache_dir()))
    if secret is None:
        return None
    msg = json.dumps({"key": k, "result": _canonical(result)}, sort_keys=True).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


#: Largest count (an int64, as the engine computes them) and number in an entry: no op's
#: cycles, bytes, FLOPs, seconds or joules come near 1e30; a forged 1e308 would overflow
#: the sums it enters.
MAX_ENTRY_INT = 2**63 - 1
MAX_ENTRY_FLOAT = 1e30


def _number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and 0 <= v <= MAX_ENTRY_FLOAT)


def _digest_equal(a: str, b: str) -> bool:
    """Constant-time comparison of two hex digests."""
    import hmac
    return hmac.compare_digest(a.encode(), b.encode())


def check_entry(k: str, d, check_result=None) -> str | None:
    """What is wrong with cache entry ``d`` read under key ``k`` (None: nothing): its
    checksum, then its result against ``check_result(result)`` (a message, or None), by
    default the :class:`OpStats` schema (:func:`check_stats`)."""
    if not isinstance(d, dict) or set(d) != {"result", "sha256"}:
        return "not a cache entry (expected result and sha256)"
    res = d["result"]
    if not isinstance(res, dict) or not isinstance(d["sha256"], str):
        return "not a cache entry (expected result and sha256)"
    want = _checksum(k, res)
    if want is None or not _digest_equal(d["sha256"], want):
        return ("checksum mismatch (the file was changed after this cache wrote it, or "
                "another cache did)")
    return (check_result or check_stats)(res)


def check_stats(res: dict) -> str | None:
    """What is wrong with ``res`` as an :class:`OpStats` (None: nothing): counts from 0 to
    :data:`MAX_ENTRY_INT`, numbers finite from 0 to :data:`MAX_ENTRY_FLOAT`, the cycle
    identity."""
    from .stats import OpStats
    fields = {f.name: f.type for f in dataclasses.fields(OpStats)}
    if set(res) != set(fields):
        return f"fields {sorted(set(res) ^ set(fields))} missing or unknown"
    for name, typ in fields.items():
        v = res[name]
        if typ == "int":
            ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_ENTRY_INT
        elif typ == "float":
            ok = _number(v)
        elif typ == "str":
            ok = isinstance(v, str)
        else:
            ok = isinstance(v, dict)
        if not ok:
            return f"{name} = {str(v)[:40]!r} is not a valid {typ}"
    for name in ("stall_breakdown", "energy_breakdown"):
        for part, v in res[name].items():
            if not _number(v):
                return (f"{name}[{part!r}] = {str(v)[:40]!r} is not a number from 0 to "
                        f"{MAX_ENTRY_FLOAT:g}")
    if res["stall_cycles"] != res["cycles"] - res["array_busy_cycles"]:
        return "stall_cycles != cycles - array_busy_cycles"
    return None


#: Largest cache entry read (bytes): an entry is ~2 KiB; anything far larger is not one.
MAX_ENTRY_BYTES = 1 << 20


def _read_entry(p: Path):
    """``(parsed JSON, None)`` of the entry file ``p``; None when there is none; ``(None,
    why)`` when it cannot be an entry (:func:`_read_regular`'s refusals, over
    :data:`MAX_ENTRY_BYTES`, not UTF-8 JSON, a key twice, NaN, nested past the parser's
    limit)."""
    from ..arch.schema import parse_json
    try:
        data = _read_regular(p, MAX_ENTRY_BYTES)
    except _Unreadable as exc:
        return None, str(exc)
    if data is None:
        return None
    try:
        return parse_json(data.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except RecursionError:
        return None, "not JSON (nested too deeply)"
    except ValueError as exc:
        return None, f"not JSON ({str(exc)[:80]})"


def _linked_dir(p: Path) -> Path | None:
    """The directory the cache made above entry ``p`` (its shard, ``results/``) that is a
    symbolic link instead, if any: the cache reads and writes only below what it made."""
    for d in (p.parent, p.parent.parent):
        if os.path.islink(d):
            return d
    return None


def load(k: str):
    """The cached :class:`OpStats` under key ``k``, or None (a miss). An entry that cannot
    be read as one (:func:`_read_entry`) or fails :func:`check_entry` is deleted with a
    warning naming the file and what was wrong (it is recomputed by the caller); a link is
    deleted, never what it points to."""
    from .stats import OpStats
    res = load_result(k)
    return None if res is None else OpStats(**res)


def load_result(k: str, check_result=None) -> dict | None:
    """The result dict cached under key ``k`` once it passes :func:`check_entry` with
    ``check_result`` (default: the :class:`OpStats` schema), or None (a miss); a bad entry
    is deleted with a warning, as :func:`load` says."""
    p = _path(k)
    linked = _linked_dir(p)
    if linked is not None:
        warnings.warn(f"cache directory {linked} is a link, not what the cache made: not "
                      f"followed, the cache is off for this process", CacheWarning,
                      stacklevel=4)
        set_enabled(False)
        return None
    got = _read_entry(p)
    if got is None:
        return None
    entry, bad = got
    bad = bad or check_entry(k, entry, check_result)
    if bad is not None:
        warnings.warn(f"cache entry {p} is invalid ({bad}): discarded and recomputed",
                      CacheWarning, stacklevel=4)
        try:
            p.unlink()
        except OSError:
            pass
        return None
    return entry["result"]


#: Shard directories this process made (or found), as strings: each store would otherwise
#: repeat three ``mkdir`` calls; one that is gone is made again (store_result).
_made: set[str] = set()


def _make_dirs(shard: Path) -> None:
    """Make the cache directory, ``results/`` and ``shard`` (each mode 0700, in turn, as
    the first store in a shard does; no error when they exist), once per process for each
    shard."""
    s = str(shard)
    if s in _made:
        return
    for d in (shard.parent.parent, shard.parent, shard):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    _made.add(s)


def store(k: str, stats) -> None:
    """Write ``stats`` under key ``k`` atomically; on failure the cache turns itself off."""
    store_result(k, stats.to_dict())


def store_result(k: str, result: dict) -> None:
    """Write the JSON-ready ``result`` under key ``k`` atomically, signed as every entry
    (floats as ``repr``: they read back exactly); on failure the cache turns itself off."""
    p = _path(k)
    if _linked_dir(p) is not None:
        set_enabled(False)
        return
    try:
        _make_dirs(p.parent)
        mac = _checksum(k, result)
        if mac is None:
            raise OSError("the cache's key cannot be created")
        try:
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        except (FileNotFoundError, NotADirectoryError):
            # removed (``cache clear``, a person) or replaced since this process made it
            _made.clear()
            _make_dirs(p.parent)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # (dumps, then one write: the same text as json.dump, whose chunked
                # encoding is pure Python; dumps uses the C encoder)
                fh.write(json.dumps({"result": result, "sha256": mac}))
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
