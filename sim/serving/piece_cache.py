"""The serving step-time grid's pieces, persisted in the user's result cache.

A :class:`~diptych.sim.serving.step_pieces.StepPieces` piece (a frame at a number of tokens
and logits rows, the attention cores of a decode batch or a prefill chunk) is a tuple of
floats that costs an engine simulation (~0.1–1 s); a piece cached here is read back in well
under a millisecond, so a second ``diptych serve`` of the same replica, a QPS sweep's
workers, a deployment search's candidates or another process share what the first one
simulated.

* **Key**: a SHA-256 of the piece's kind and arguments, the complete :class:`Replica`
  (model, ``tp``, precision, attention, overlap, fixed costs, execution, fusion, variant;
  the chip by its digest, as the op cache keys it) and the source of diptych.sim,
  diptych.arch and all of diptych.workloads (the lowering and the model configs:
  :func:`code_hash`). A piece computed by other code is never served.
* **Where, and how safely**: the op cache's own files and checks (:mod:`diptych.sim.cache`:
  ``results/`` below the cache directory, one signed JSON file per key written atomically,
  a bad entry deleted with a warning and recomputed); :func:`check_piece` is the schema
  (finite floats, at most :data:`MAX_VALUES`; a frame's blocks as ``[name, repeats]``).
  ``diptych cache info``/``clear`` count and delete them with the op results.
* **When**: only for the engine's own step times (``simulate`` None while diptych's
  default op timers are :func:`diptych.sim.simulate`): a test double's pieces are never
  stored nor served. ``--no-cache`` (``DIPTYCH_NO_CACHE``) turns it off with the op cache.
* **Exactness**: floats are stored with ``repr`` and read back bit for bit, so a serve gives
  the same numbers with the cache full, empty or off (a test).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from .. import cache

#: The most floats a piece holds (a frame of many layer kinds is a few hundred).
MAX_VALUES = 1 << 14


@lru_cache(maxsize=1)
def code_hash() -> str:
    """The op cache's :func:`~diptych.sim.cache.code_hash` and the source of every file of
    diptych.workloads (the step lowering, the model configs)."""
    from ... import workloads
    root = Path(workloads.__file__).parent
    h = hashlib.sha256(cache.code_hash().encode())
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json", ".toml")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def replica_digest(replica) -> str:
    """SHA-256 of everything about ``replica`` that a piece depends on (the chip by the
    op cache's digest of it)."""
    import dataclasses
    doc = {f.name: (cache._chip_digest(replica.chip) if f.name == "chip"
                    else cache._canonical(getattr(replica, f.name)))
           for f in dataclasses.fields(replica)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def piece_key(digest: str, kind: str, args: tuple) -> str:
    """The cache key of the piece ``kind`` at ``args`` (integers) of the replica whose
    :func:`replica_digest` is ``digest``."""
    doc = {"kind": "serving-piece", "piece": kind, "args": list(args), "replica": digest,
           "code": code_hash()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def check_piece(res: dict) -> str | None:
    """What is wrong with ``res`` as a cached piece (None: nothing): ``values``, a list of
    at most :data:`MAX_VALUES` finite numbers within ±``MAX_ENTRY_FLOAT`` (a schedule's
    overlap may be negative); ``blocks`` (a frame's), a list of ``[name, repeats ≥ 1]``."""
    if set(res) - {"values", "blocks"} or "values" not in res:
        return f"fields {sorted(res)} are not a piece's (values, and blocks for a frame)"
    vals = res["values"]
    if not isinstance(vals, list) or not 0 < len(vals) <= MAX_VALUES:
        return f"values is not a list of 1 to {MAX_VALUES} numbers"
    for i, v in enumerate(vals):
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or abs(v) > cache.MAX_ENTRY_FLOAT):
            return f"values[{i}] = {str(v)[:40]!r} is not a finite number"
    blocks = res.get("blocks")
    if blocks is not None:
        if not isinstance(blocks, list) or not 0 < len(blocks) <= MAX_VALUES:
            return "blocks is not a list of [name, repeats]"
        for b in blocks:
            if not (isinstance(b, list) and len(b) == 2 and isinstance(b[0], str)
                    and isinstance(b[1], int) and not isinstance(b[1], bool)
                    and 1 <= b[1] <= cache.MAX_ENTRY_INT):
                return f"block {str(b)[:60]!r} is not [name, repeats >= 1]"
    return None


def engine_timed(simulate: Callable | None) -> bool:
    """Whether pieces timed with ``simulate`` are the engine's: None while the run layer's
    and the summed model's default op timers are :func:`diptych.sim.simulate` (a test that
    replaces either with a double gets no cache)."""
    if simulate is not None:
        return False
    from ..api import simulate as engine
    from ..run import node, summed
    return node._default_simulate() is engine and summed._default_simulate() is engine


class PieceStore:
    """The persistent cache of one replica's pieces (module docstring); ``hits`` counts
    the pieces read back."""

    def __init__(self, replica, simulate: Callable | None):
        self._on = engine_timed(simulate)
        self._replica = replica
        self._digest: str | None = None
        self.hits = 0

    def get(self, kind: str, args: tuple, compute: Callable[[], tuple],
            blocks: Callable[[], list] | None = None) -> tuple[tuple, list | None]:
        """``(values, blocks)`` of the piece ``kind`` at ``args``: read from the cache, or
        ``compute()`` (its tuple) and stored with ``blocks()`` (a frame's ``(name,
        repeats)`` after computing; None for a core)."""
        if not (self._on and cache.enabled()):
            return compute(), None
        if self._digest is None:
            self._digest = replica_digest(self._replica)
        k = piece_key(self._digest, kind, args)
        res = cache.load_result(k, check_piece)
        if res is not None and (blocks is None) == ("blocks" not in res):
            self.hits += 1
            got = res.get("blocks")
            return tuple(res["values"]), (None if got is None else [tuple(b) for b in got])
        values = compute()
        res = {"values": list(values)}
        if blocks is not None:
            res["blocks"] = [[name, rep] for name, rep in blocks()]
        cache.store_result(k, res)
        return values, None
