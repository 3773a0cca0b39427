"""A chip as an editable TOML file: ``diptych chips show NAME --toml`` and ``chips template``.

:func:`chip_toml` writes every field of a :class:`~diptych.arch.Chip` (dataclass order, scalars
before tables as TOML requires), each with a comment saying what it is and what values are
allowed (the field's ``doc`` from :mod:`diptych.arch.chip`), after a header that says where
the file came from and how to make it your design. Optional tables the chip lacks (the shared
buffer) are listed as comments to uncomment. :func:`diptych.arch.load_chip_file` reads the
file back to an equal Chip (the tests check it for every preset). Derived quantities (peaks,
bandwidth, area) are not written: ``diptych chips show FILE`` computes them.
"""

from __future__ import annotations

import dataclasses
import typing

from ..arch.chip import Chip, DtypeTable
from ..arch.schema import describe

HEADER = """\
diptych chip description: {origin}.
To make it your design: set `name`, edit the values (units are in the key names; each
comment says what is allowed; every dtype table lists every dtype, 0 = none), then
check it with `diptych chips validate {path}` and use it wherever a chip is expected,
e.g. `diptych run --chip {path} ...` or `diptych compare {path} {name} --model ...`.
Derived peaks, bandwidth and area: `diptych chips show {path}`.
The presets cite a source for each number: see arch/chips/*.toml in the diptych source."""


def _doc(field: dataclasses.Field) -> str:
    """The field's description, with its allowed values when it has a fixed set or bounds
    kept out of its text (:func:`~diptych.arch.schema.describe`)."""
    doc = describe(field.metadata)
    choices = field.metadata.get("choices")
    if choices and not all(c in doc for c in choices):
        doc += f" (one of {', '.join(choices)})"
    return doc


def _optional(hint):
    """``X`` of an ``X | None`` hint."""
    return next((a for a in typing.get_args(hint) if a is not type(None)), hint)


def _is_table(tp) -> bool:
    return dataclasses.is_dataclass(tp) and tp is not DtypeTable


def _value(v):
    """Plain TOML value of a field (tuples become lists, dtype tables inline tables)."""
    import tomlkit

    if isinstance(v, DtypeTable):
        t = tomlkit.inline_table()
        t.update({d: getattr(v, d) for d, _ in v.items()})
        return t
    if isinstance(v, tuple):
        return list(v)
    return v


def _fill(container, obj, *, optional_comments: list[str], prefix: str = "") -> None:
    """Add ``obj``'s fields to a tomlkit container: scalars first, then sub-tables."""
    import tomlkit

    hints = typing.get_type_hints(type(obj))
    fields = dataclasses.fields(obj)
    for f in fields:
        v = getattr(obj, f.name)
        if v is None and not _is_table(_optional(hints[f.name])):
            container.add(tomlkit.comment(f"{f.name} = ...  # {_doc(f)} (optional)"))
            continue
        if v is None or _is_table(type(v)):
            continue
        item = tomlkit.item(_value(v))      # an item, so that booleans take a comment too
        if _doc(f):
            item.comment(_doc(f))
        container.add(f.name, item)
    for f in fields:
        v = getattr(obj, f.name)
        if v is not None and _is_table(type(v)):
            t = tomlkit.table()
            _fill(t, v, optional_comments=optional_comments, prefix=f"{prefix}{f.name}.")
            container.add(f.name, t)
        elif v is None and _is_table(_optional(hints[f.name])):
            tp = _optional(hints[f.name])
            lines = [f"[{prefix}{f.name}]  # {_doc(f)}"]
            lines += [f"{g.name} = ...  # {_doc(g)}" for g in dataclasses.fields(tp)]
            optional_comments.extend(lines)


def chip_toml(chip: Chip, *, origin: str, path: str = "mine.toml") -> str:
    """The TOML text of ``chip`` with a header naming ``origin`` (e.g. "from the preset
    infer-2026") and the commands to check and use ``path``."""
    import tomlkit

    doc = tomlkit.document()
    for line in HEADER.format(origin=origin, path=path, name=chip.name).splitlines():
        doc.add(tomlkit.comment(line))
    doc.add(tomlkit.nl())
    optional: list[str] = []
    _fill(doc, chip, optional_comments=optional)
    if optional:
        doc.add(tomlkit.nl())
        doc.add(tomlkit.comment("Optional, absent here (uncomment and fill in to add):"))
        for line in optional:
            doc.add(tomlkit.comment(line))
    return tomlkit.dumps(doc)
