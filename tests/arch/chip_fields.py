"""The chip format's numeric fields, walked one way for every test under tests/arch/ that needs
them (test_ranges.py: finite and bounded above; test_physical_bounds.py: floors and reasons).

Imported as a top-level module (``from chip_fields import ...``): pytest puts a test file's own
folder on ``sys.path`` (tests/ has no ``__init__.py``), as it does tests/ for ``roofline_double``.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
import typing
from importlib import resources

from diptych.arch.schema import _BOUND_KEYS


def numeric_fields(cls, prefix="", each=None):
    """(dotted path, bounds metadata, type) of every int/float field under dataclass ``cls``.

    A dtype table's entries (``core.array.macs_per_pe_per_cycle.bf16``, ...) carry their
    table's ``each`` bounds in place of the entry's own, as the loader and the JSON Schema
    apply them."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if args else tp
        path = f"{prefix}{f.name}"
        meta = dict(f.metadata)
        if dataclasses.is_dataclass(tp):
            yield from numeric_fields(tp, path + ".", meta.get("each"))
        elif tp in (int, float):
            if each is not None:
                meta = {k: v for k, v in meta.items() if k not in _BOUND_KEYS} | each
            yield path, meta, tp


def base_chip() -> dict:
    """A valid chip as a dict, with every optional table present (h100 has the shared buffer,
    die, cost, overheads and residency tables; noc, package and power at their defaults;
    dram2 and dram3 as h100's DRAM table made LPDDR5X)."""
    d = tomllib.loads(resources.files("diptych.arch.chips").joinpath("h100.toml").read_text())
    # a second memory tier: h100's DRAM table as LPDDR5X, with the tier's own fields
    tier = {**d["dram"], "kind": "lpddr5x", "pj_per_bit": 4.0, "usd_per_gb": 4.0,
            "mm2_per_phy": 4.0, "mm_edge_per_phy": 4.0}
    d.update(noc={"link_bytes_per_cycle": 64.0}, package={}, power={}, dram2=tier,
             dram3=dict(tier))
    return d


def put(d: dict, path: str, value) -> dict:
    """A deep copy of ``d`` with the dotted ``path`` set to ``value`` (tables made as needed)."""
    d = copy.deepcopy(d)
    node = d
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return d
