"""A fast, exact :func:`dataclasses.asdict` for dataclasses whose fields hold plain values.

``asdict`` walks every value with a generic recursion (and ``copy.deepcopy`` for each
scalar); an :class:`~diptych.sim.OpStats` holds only ``str``, ``int``, ``float``, ``bool``,
``None`` and ``dict``/``list``/``tuple`` of those, which :func:`as_plain_dict` copies with
one comprehension per container. The result is exactly ``asdict``'s: for these exact types
``asdict`` (Python 3.11) returns the scalar itself (``deepcopy`` of an atomic value) and
rebuilds each ``dict``, ``list`` and ``tuple`` as the same type, in the same order. A value
of any other type (a subclass, a nested dataclass, a namedtuple, a set) falls back to
``asdict`` for the whole object. tests/sim/test_cache_speed.py compares the two.
"""

from __future__ import annotations

from dataclasses import asdict, fields

#: Values ``asdict`` returns as they are (``copy.deepcopy`` of an atomic value is itself).
_ATOMIC = frozenset({str, int, float, bool, type(None)})

_names: dict[type, tuple[str, ...]] = {}


class _NotPlain(Exception):
    """A value ``as_plain_dict`` does not copy itself (``asdict`` does it instead)."""


def _copy(v):
    t = type(v)
    if t in _ATOMIC:
        return v
    if t is dict:
        return {(k if type(k) in _ATOMIC else _copy(k)):
                (x if type(x) in _ATOMIC else _copy(x)) for k, x in v.items()}
    if t is list:
        return [x if type(x) in _ATOMIC else _copy(x) for x in v]
    if t is tuple:
        return tuple(x if type(x) in _ATOMIC else _copy(x) for x in v)
    raise _NotPlain


def as_plain_dict(obj) -> dict:
    """``dataclasses.asdict(obj)``, equal in value, type and key order (``obj``: a dataclass
    instance)."""
    t = type(obj)
    names = _names.get(t)
    if names is None:
        names = _names[t] = tuple(f.name for f in fields(obj))
    try:
        return {n: _copy(getattr(obj, n)) for n in names}
    except _NotPlain:
        return asdict(obj)
