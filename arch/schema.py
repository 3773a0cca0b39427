"""Build frozen dataclasses from nested dicts (parsed TOML), validating eagerly.

Each dataclass field may carry metadata:

* ``min`` / ``max``: inclusive bounds; ``gt``: exclusive lower bound;
* ``zero_ok``: 0 is accepted besides ``[min, max]`` (the field's "none" or "ideal" value): an
  explicit 0 is meaningful where a denormal-scale positive value is not (:func:`bound`);
* ``why``: one line on the unit and where the bounds come from (what the kind of part can
  physically be), shown with the bounds in messages and in the JSON Schema;
* ``each`` (a table of numbers, e.g. a dtype table): bounds metadata that replaces the
  bounds of every number in the table;
* ``choices``: allowed values (for strings, or for each element of a tuple of strings);
* ``nonempty``, ``max_len``, ``printable`` (strings): not blank, at most that many
  characters, no control characters;
* ``doc``: a human description, shown in error messages as what was expected.

A bad value is echoed cut to :data:`MAX_ECHO` characters with its length (:func:`echo`).

Errors raise :class:`ConfigError` with one message naming the source file, the dotted key path,
the offending value and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints


class ConfigError(ValueError):
    """A configuration file or dict is invalid. The message names file, key, value, expectation."""


def _where(source: str | None, path: str) -> str:
    prefix = f"{source}: " if source else ""
    return f"{prefix}{path}" if path else (source or "<config>")


#: Longest rendering of a bad value in a message (a longer one is cut, its length said).
MAX_ECHO = 80


def echo(value: Any) -> str:
    """``repr(value)``, cut to :data:`MAX_ECHO` characters with its full length stated."""
    r = repr(value)
    return r if len(r) <= MAX_ECHO else f"{r[:MAX_ECHO - 20]}… ({len(r):,} characters)"


def _fail(source: str | None, path: str, value: Any, expected: str) -> typing.NoReturn:
    raise ConfigError(f"{_where(source, path)}: expected {expected}, got {echo(value)}")


def _num(v: float) -> str:
    """A bound as written in messages: integral values in full (1048576), others ``:g``, a
    reciprocal that ``:g`` would round as ``1/n`` (``1/1024``, not ``0.000976562``)."""
    if float(v).is_integer() and abs(v) < 1e16:
        return str(int(v))
    if 0 < v < 1 and float(f"{v:g}") != v and (1 / v).is_integer():
        return f"1/{int(1 / v)}"
    return f"{v:g}"


def _bounds_text(meta: dict) -> str:
    parts = []
    if "gt" in meta:
        parts.append(f"> {_num(meta['gt'])}")
    if meta.get("min") is not None:
        parts.append(f">= {_num(meta['min'])}")
    if meta.get("max") is not None:
        parts.append(f"<= {_num(meta['max'])}")
    return " and ".join(parts)


def range_text(meta: dict) -> str:
    """The bounds of a field's metadata as text, e.g. ``"> 0 and <= 10"``, or with
    ``zero_ok`` ``"0 or >= 0.01 and <= 100000"`` ("" if none)."""
    rng = _bounds_text(meta)
    return f"0 or {rng}" if meta.get("zero_ok") and rng else rng


def expected_number(meta: dict, kind: str = "a number") -> str:
    """What a number of this metadata must be, as a message says it: ``"a number >= 0.1 and
    <= 64 (Gb/s per pin: ...)"``, ``"0 or a number >= 0.01 ..."`` with ``zero_ok``."""
    text = f"{kind} {_bounds_text(meta)}".rstrip()
    if meta.get("zero_ok"):
        text = f"0 or {text}"
    return f"{text} ({meta['why']})" if meta.get("why") else text


def describe(meta: dict) -> str:
    """A field's ``doc`` with its bounds when they are not in its text (fields with ``why``
    keep their bounds out of ``doc``): ``"tRCD in ns; >= 0.1 and <= 1000"``."""
    doc = meta.get("doc", "")
    if meta.get("why") and range_text(meta):
        return f"{doc}; {range_text(meta)}" if doc else range_text(meta)
    return doc


def bound(lo: float, hi: float, why: str, *, zero: bool = False) -> dict:
    """Field metadata for a physical range ``[lo, hi]`` (and 0 with ``zero``), with the
    one-line reason ``why``: ``f(doc=..., **bound(0.01, 1e5, "GB/s: ..."))``."""
    out: dict = {"min": lo, "max": hi, "why": why}
    if zero:
        out["zero_ok"] = True
    return out


def _check_number(meta: dict, value: float, source, path, kind: str = "a number") -> None:
    lo, hi = meta.get("min"), meta.get("max")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(source, path, value, expected_number(meta, "a finite number"))
    if meta.get("zero_ok") and value == 0:
        return
    bad = (("gt" in meta and not value > meta["gt"]) or (lo is not None and value < lo)
           or (hi is not None and value > hi))
    if bad:
        _fail(source, path, value, expected_number(meta, kind))


def _convert(tp: Any, value: Any, meta: dict, source: str | None, path: str) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, meta, source, path)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(source, path, value, f"a table of {tp.__name__} fields")
        return build(tp, value, source=source, path=path, each=meta.get("each"))
    if tp is bool:
        if not isinstance(value, bool):
            _fail(source, path, value, "true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(source, path, value, "an integer")
        _check_number(meta, value, source, path, "an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(source, path, value, "a number")
        value = float(value)
        _check_number(meta, value, source, path)
        return value
    if tp is str:
        if not isinstance(value, str):
            _fail(source, path, value, "a string")
        if "choices" in meta and value not in meta["choices"]:
            _fail(source, path, value, "one of " + ", ".join(map(repr, meta["choices"])))
        if meta.get("nonempty") and not value.strip():
            _fail(source, path, value, "a non-empty string")
        if "max_len" in meta and len(value) > meta["max_len"]:
            _fail(source, path, value, f"a string of at most {meta['max_len']} characters")
        if meta.get("printable") and not value.isprintable():
            _fail(source, path, value, "printable characters (no control characters)")
        return value
    if origin is tuple:
        (elem,) = [a for a in get_args(tp) if a is not Ellipsis]
        if not isinstance(value, (list, tuple)):
            _fail(source, path, value, "a list")
        if meta.get("nonempty") and not value:
            _fail(source, path, value, "a non-empty list")
        out = []
        for i, item in enumerate(value):
            out.append(_convert(elem, item, {k: v for k, v in meta.items() if k != "nonempty"},
                                source, f"{path}[{i}]"))
        if len(set(out)) != len(out):
            _fail(source, path, value, "a list without repeated entries")
        return tuple(out)
    raise TypeError(f"unsupported field type {tp!r} at {path}")  # programming error


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[dict, dict]:
    """(type hints, init fields by name) of dataclass ``cls``, resolved once per class
    (``get_type_hints`` evaluates the string annotations: the bulk of a chip's build time)."""
    return get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls) if f.init}


def build(cls: type, data: dict, *, source: str | None = None, path: str = "",
          each: dict | None = None) -> Any:
    """Instantiate dataclass ``cls`` from ``data`` (nested dicts), validating every field.

    Unknown keys, missing required keys, wrong types and out-of-range values raise
    :class:`ConfigError`. After fields are converted, the class's ``_validate(source, path)``
    hook (if present) runs cross-field checks. ``each``: bounds metadata that replaces the
    bounds of every int/float field of ``cls`` (a dtype table used for pJ per MAC).
    """
    hints, fields = _fields(cls)
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{_where(source, _join(path, key))}: unknown key{hint}, "
                              f"got {data[key]!r}; expected one of: {known}")
    kwargs = {}
    for name, field in fields.items():
        sub = _join(path, name)
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{_where(source, sub)}: missing required key "
                                  f"({describe(field.metadata) or hints[name]})")
            continue
        meta = dict(field.metadata)
        if each is not None and hints[name] in (int, float):
            meta = {k: v for k, v in meta.items() if k not in _BOUND_KEYS} | each
        kwargs[name] = _convert(hints[name], data[name], meta, source, sub)
    obj = cls(**kwargs)
    hook = getattr(obj, "_validate", None)
    if hook is not None:
        hook(source, path)
    return obj


#: The metadata keys that state a number's bounds (replaced as a whole by ``each``).
_BOUND_KEYS = ("min", "max", "gt", "zero_ok", "why")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def fail(source: str | None, path: str, value: Any, expected: str) -> typing.NoReturn:
    """Raise the standard ConfigError; for ``_validate`` hooks."""
    _fail(source, path, value, expected)


#: Largest configuration or input file read (bytes): far above any real chip, spec, model or
#: topology file, far below what would exhaust memory.
MAX_INPUT_BYTES = 64 * 2**20


def check_input_file(path, what: str, *, error: type[Exception] = ConfigError,
                     max_bytes: int | None = MAX_INPUT_BYTES) -> int:
    """The size of ``path`` if it is a regular file of at most ``max_bytes`` (None: any size);
    else ``error`` naming the file and ``what`` it is. Refuses a directory, a FIFO or device
    (reading would block or never end) before anything is opened."""
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise error(f"{path}: cannot read {what} ({kind})")
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(f"{path}: {what} of {st.st_size:,} bytes is larger than the "
                    f"{max_bytes // 2**20} MiB diptych reads")
    return st.st_size


def read_text_file(path, what: str, *, error: type[Exception] = ConfigError) -> str:
    """The UTF-8 text of a regular file (:func:`check_input_file`, at most
    :data:`MAX_INPUT_BYTES`), or ``error`` naming the file and ``what`` it is. Bytes that are
    not UTF-8 are refused (a leading BOM is allowed)."""
    check_input_file(path, what, error=error)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start}: "
                    f"{data[exc.start:exc.start + 1]!r})") from None


def check_columns(path, line: int | None, names, *, error: type[Exception] = ConfigError
                  ) -> None:
    """Refuse a header that names a column more than once (``names`` as the reader compares
    them, e.g. stripped and lower-cased; empty names are not compared): which of two
    ``arrival_s`` columns is meant is a guess no reader should make. ``error`` names the
    file, the line (None: not line-oriented, a Parquet file) and the repeated names. Every
    reader of a file with columns uses it (traces, topologies, results)."""
    names = list(names)
    dup = sorted({n for n in names if n and names.count(n) > 1})
    if dup:
        where = f"{path}:{line}" if line is not None else f"{path}"
        raise error(f"{where}: the header names {', '.join(echo(d) for d in dup)} more than "
                    f"once (a column may appear once)")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` of every JSON read: an object naming a key twice is refused
    (``json`` would keep the last silently, TOML refuses it too)."""
    d: dict = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"the key {echo(k)} appears twice in one object")
        d[k] = v
    return d


def parse_json(text: str) -> Any:
    """``json.loads`` as every input is read: NaN/Infinity tokens and duplicate keys refused
    (ValueError); deep nesting raises RecursionError."""
    import json

    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=no_duplicate_keys)


def read_config_file(path, what: str, *, fmt: str | None = None,
                     error: type[Exception] = ConfigError) -> Any:
    """Read and parse a TOML or JSON file (``fmt`` "toml"/"json"; by default by suffix).

    Problems raise ``error`` with a message naming the file and ``what`` it should be, e.g.
    ``"mine.toml: cannot read chip file (No such file or directory)"``; see
    :func:`read_text_file` for what is refused before parsing. JSON's non-standard ``NaN`` and
    ``Infinity`` tokens are refused, and so is a key repeated in one object (TOML refuses it
    itself); so is nesting deeper than the parser's recursion limit.
    """
    import tomllib
    from pathlib import Path

    path = Path(path)
    text = read_text_file(path, what, error=error)
    kind = fmt or ("json" if path.suffix == ".json" else "toml")
    try:
        if kind == "json":
            return parse_json(text)
        return tomllib.loads(text)
    except RecursionError:
        raise error(f"{path}: invalid {kind.upper()} (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, TOMLDecodeError, over-long integers
        raise error(f"{path}: invalid {kind.upper()} ({exc})") from None


def to_dict(obj: Any) -> Any:
    """Inverse of :func:`build`: a dataclass tree as plain dicts/lists (JSON/TOML-friendly).
    Optional fields that are None (an absent optional table) are left out."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if getattr(obj, f.name) is not None}
    if isinstance(obj, tuple):
        return [to_dict(x) for x in obj]
    return obj


def f(*, doc: str = "", default: Any = dataclasses.MISSING, **meta: Any) -> Any:
    """Shorthand for a dataclass field with validation metadata."""
    meta["doc"] = doc
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
