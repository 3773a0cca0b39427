"""A JSON Schema (draft 2020-12) of a configuration dataclass, generated from the same field
metadata :func:`diptych.arch.schema.build` validates with (issue 23 item 6).

Editors (VS Code's Even Better TOML / Taplo, JetBrains) check a chip TOML against it as it is
typed: ``diptych chips schema > chip.schema.json`` and point the editor at it, or add
``#:schema ./chip.schema.json`` as a TOML file's first line (Taplo's directive). Each field's
type, unit-bearing description, bounds (``minimum``/``maximum``/``exclusiveMinimum``; "0 or
>= x" as ``anyOf``; the bounds' reason in the description), choices (``enum``), list rules
and unknown-key rule come from :mod:`diptych.arch.schema`'s metadata (a dtype table's entries
take their table's ``each`` bounds);
a class may add rules of its own through a ``json_schema_rules()`` classmethod (the DRAM
pin rate per kind). Cross-field checks that JSON Schema cannot state (``_validate`` hooks,
arch/validate.py) stay with ``diptych chips validate``, which remains the authority.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, get_args, get_origin

from .schema import _BOUND_KEYS, _fields, range_text

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def _field_schema(tp: Any, meta: dict) -> dict:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _field_schema(args[0], meta)
    out: dict[str, Any]
    if dataclasses.is_dataclass(tp):
        out = object_schema(tp, each=meta.get("each"))
    elif tp is bool:
        out = {"type": "boolean"}
    elif tp in (int, float):
        out = {"type": "integer" if tp is int else "number"}
        low: dict[str, Any] = {}
        if meta.get("min") is not None:
            low["minimum"] = meta["min"]
        if "gt" in meta:
            low["exclusiveMinimum"] = meta["gt"]
        if meta.get("zero_ok") and low:      # 0, or a value in [min, max]
            out["anyOf"] = [{"const": 0}, low]
        else:
            out.update(low)
        if meta.get("max") is not None:
            out["maximum"] = meta["max"]
    elif tp is str:
        out = {"type": "string"}
        if "choices" in meta:
            out["enum"] = list(meta["choices"])
        if meta.get("nonempty"):
            out["pattern"] = r"\S"
        if "max_len" in meta:
            out["maxLength"] = meta["max_len"]
    elif origin is tuple:
        (elem,) = [a for a in get_args(tp) if a is not Ellipsis]
        item_meta = {k: v for k, v in meta.items() if k != "nonempty"}
        out = {"type": "array", "items": _field_schema(elem, item_meta), "uniqueItems": True}
        if meta.get("nonempty"):
            out["minItems"] = 1
    else:  # a type build() does not take either: a programming error
        raise TypeError(f"no JSON Schema for field type {tp!r}")
    if meta.get("why"):   # the bounds' reason, with the bounds themselves
        doc = meta.get("doc", "")
        why = f"{range_text(meta)}; {meta['why']}"
        out["description"] = f"{doc} ({why})" if doc else why
    elif meta.get("doc"):
        out["description"] = meta["doc"]
    return out


def _meta(f: dataclasses.Field, tp: Any, each: dict | None) -> dict:
    meta = dict(f.metadata)
    if each is not None and tp in (int, float):
        meta = {k: v for k, v in meta.items() if k not in _BOUND_KEYS} | each
    return meta


def object_schema(cls: type, each: dict | None = None) -> dict:
    """The schema of dataclass ``cls`` as :func:`~diptych.arch.schema.build` reads it: its
    fields, those without a default required, no other keys. ``each``: bounds that replace
    those of every number field (a dtype table's, see :func:`~diptych.arch.schema.build`)."""
    hints, fields = _fields(cls)
    props = {name: _field_schema(hints[name], _meta(f, hints[name], each))
             for name, f in fields.items()}
    required = [n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    out: dict[str, Any] = {"type": "object", "properties": props,
                           "additionalProperties": False}
    if required:
        out["required"] = required
    if _first_line(cls.__doc__):
        out["description"] = _first_line(cls.__doc__)
    rules = getattr(cls, "json_schema_rules", None)
    if rules is not None:
        out["allOf"] = rules()
    return out


def json_schema(cls: type, *, title: str, schema_id: str | None = None) -> dict:
    """The whole document for a top-level configuration class ``cls``."""
    doc = {"$schema": DRAFT, "title": title, **object_schema(cls)}
    if schema_id:
        doc["$id"] = schema_id
    return doc
