"""The public entry points: :func:`simulate` and :func:`simulate_gemm`, memoised."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Protocol

from . import cache
from .capacity import capacities
from .limits import check_gemm, check_vector
from ..workloads import loss
from ..workloads.ops import Collective, Gemm, VectorOp
from .support import check_dataflows
from .stats import OpStats

# The engine (and Numba) is imported on the first result that is not in the persistent cache:
# a run whose every op is cached starts in a fraction of a second.
_ENGINE = {"gemm_stats": "gemm", "vector_stats": "vector"}



class OpTimer(Protocol):
    """What times one op on one chip: :func:`simulate` itself, or a stand-in with its
    signature (the test suite's roofline double). The run, cluster and serving layers take
    one wherever they time ops (``simulate=``); None means :func:`simulate`."""

    def __call__(self, op, chip) -> OpStats: ...

def __getattr__(name):
    if name in _ENGINE:
        return _engine(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _engine(name):
    fn = globals().get(name)
    if fn is None:
        import importlib
        fn = globals()[name] = getattr(importlib.import_module(f"{__package__}.{_ENGINE[name]}"),
                                       name)
    return fn


#: Chips by everything the op-level models read (all compared fields but ``overheads``): the
#: first chip seen stands for the others (see :func:`op_chip`).
_OP_CHIPS: dict = {}


@lru_cache(maxsize=256)
def op_chip(chip):
    """The chip that times ``chip``'s ops: the first one seen that differs from it at most in
    ``[overheads]`` (launch and sync costs, which the program scheduler charges and no
    op-level model reads: sim/gemm, mapper, engine, dram, vector and limits never look at
    them). The waterfall's variants zero those costs (``variant_chip``); with this their
    GEMMs and vector ops are the memo hits they are, not mapper searches run again (issue 27;
    tests/sim/test_op_chip.py compares the shared results with a fresh simulation of the
    variant chip)."""
    key = tuple(getattr(chip, f.name) for f in dataclasses.fields(chip)
                if f.compare and f.name != "overheads")
    if len(_OP_CHIPS) > 1024:
        _OP_CHIPS.clear()
    return _OP_CHIPS.setdefault(key, chip)


@lru_cache(maxsize=4096)
def _gemm_cached(shape: Gemm, chip, dataflow) -> OpStats:
    check_gemm(shape, chip)  # refuse, stating the limit, what would run for hours
    return cache.cached("gemm", shape, chip, dataflow,
                        lambda: _engine("gemm_stats")(shape, chip, dataflow))


def _vector_shape(op: VectorOp) -> VectorOp:
    """``op`` as its result is keyed: no name, only its rate tags (workloads/loss.py
    :data:`~diptych.workloads.loss.RATE_TAGS`)."""
    return dataclasses.replace(op, name="",
                               tags=tuple(t for t in op.tags if t in loss.RATE_TAGS))


@lru_cache(maxsize=4096)
def _vector_cached(shape: VectorOp, chip) -> OpStats:
    """A vector op's result, memoised in memory only: the persistent cache
    (:mod:`diptych.sim.cache`) holds GEMMs, not vector ops, because computing a vector op
    (its closed form, ~0.12 ms median, 0.2 ms p99 over the examples' trace's 1,496) costs less
    than reading its entry back (~0.24 ms: open, strict JSON, HMAC, schema check) and far
    less than writing it (~1.4 ms) (docs/engine.md, "Persistent result cache")."""
    check_vector(shape, chip)
    return _engine("vector_stats")(shape, chip)


def simulate(op, chip, *, dataflow: str | None = None) -> OpStats:
    """Time one op on ``chip``; results are memoised on (shape, dtypes, chip, dataflow), in
    memory and, for GEMMs, in the persistent cache (:mod:`diptych.sim.cache`) unless it is off
    (a vector op is cheaper to compute than to read back: :func:`_vector_cached`).

    ``op`` is a :class:`~diptych.workloads.ops.Gemm` or :class:`~diptych.workloads.ops.VectorOp`;
    ``dataflow`` (GEMMs only) is ``"os"``, ``"ws"``, ``"is"`` or None for the best the chip
    supports. Raises ValueError for an unsupported dtype or dataflow or a scratchpad too small
    for the minimal tile.
    """
    if isinstance(op, Gemm):
        check_dataflows(chip, dataflow)
        shape = dataclasses.replace(op, name="", tags=())
        st = _gemm_cached(shape, op_chip(chip), dataflow)
    elif isinstance(op, VectorOp):
        # a backward pass and a loss pass keep their tags: a stack's kernel rate may depend
        # on the direction and the loss's implementation (sim/vector.py stream_fraction)
        shape = _vector_shape(op)
        st = _vector_cached(shape, op_chip(chip))
    elif isinstance(op, Collective):
        raise ValueError("collectives are not timed by simulate(); they belong to the "
                         "interconnect model")
    else:
        raise ValueError(f"op must be a Gemm or a VectorOp, not {type(op).__name__}")
    return dataclasses.replace(st, name=op.name)


def _simulate_chunk(args) -> list[OpStats]:
    ops, chip, dataflow = args
    return [simulate(op, chip, dataflow=dataflow) for op in ops]


def simulate_many(ops, chip, *, dataflow: str | None = None,
                  workers: int | None = None) -> list[OpStats]:
    """Time a list of ops; the results are exactly :func:`simulate`'s, in the order of ``ops``.

    Distinct shapes are simulated once. With ``workers > 1`` (default: the machine's CPU
    count) and enough distinct shapes, they are spread over a pool of forked processes; the
    parent's memo is not filled by those results. ``workers=1`` runs in this process.
    """
    import os
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing as mp

    ops = list(ops)
    keys = [dataclasses.replace(op, name="", tags=()) if isinstance(op, Gemm)
            else _vector_shape(op) if isinstance(op, VectorOp) else op for op in ops]
    unique = list(dict.fromkeys(keys))
    workers = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, not {workers!r}")
    if workers == 1 or len(unique) < 4 * workers or "fork" not in mp.get_all_start_methods():
        done = dict(zip(unique, _simulate_chunk((unique, chip, dataflow))))
    else:
        for op in unique:  # bad input raises here, in this process, with its own message
            if isinstance(op, Gemm):
                check_dataflows(chip, dataflow)
        chunks = [unique[i::workers * 4] for i in range(workers * 4)]
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            parts = list(pool.map(_simulate_chunk, [(c, chip, dataflow) for c in chunks]))
        done = {}
        for chunk, res in zip(chunks, parts):
            done.update(zip(chunk, res))
    return [dataclasses.replace(done[k], name=op.name) for k, op in zip(keys, ops)]


def _check_dim(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


def simulate_gemm(m: int, k: int, n: int, chip, *, dtype: str | None = None,
                  dataflow: str | None = None, batch: int = 1, name: str = "gemm") -> OpStats:
    """Time ``C[m×n] = A[m×k]·B[k×n]`` with every operand in ``dtype`` (default: the chip's),
    FP32 accumulation (INT32 for integer dtypes) and the output stored in ``dtype``; operands
    in DRAM, or on a chip without DRAM resident in the scratchpads (:func:`on_chip_gemm`)."""
    for nm, v in (("m", m), ("k", k), ("n", n), ("batch", batch)):
        _check_dim(nm, v)
    dtype = chip.default_dtype if dtype is None else dtype
    from ..arch.dtypes import check_dtype
    check_dtype(dtype)
    if not chip.supports(dtype):
        raise ValueError(f"dtype {dtype!r} is not supported by chip {chip.name!r} "
                         f"(supported: {', '.join(chip.dtypes)})")
    acc = "fp32"
    op = Gemm(name=name, m=m, k=k, n=n, batch=batch, a_dtype=dtype, b_dtype=dtype,
              c_dtype=dtype, acc_dtype=acc)
    if not chip.has_dram:
        op = on_chip_gemm(op, chip)
    return simulate(op, chip, dataflow=dataflow)


def on_chip_gemm(op: Gemm, chip) -> Gemm:
    """``op`` with A, B and C resident in the scratchpads (an all-SRAM chip: operands stream
    at the scratchpad bandwidth), or a ValueError naming what does not fit the scratchpad
    space the residency planner may fill (``[residency] reserve_fraction`` kept for tiles)."""
    resident = all_resident(op)
    need = resident.resident_bytes
    room = capacities(chip).scratchpad
    if need > room:
        raise ValueError(
            f"GEMM {op.m}×{op.k}×{op.n}" + (f" (batch {op.batch})" if op.batch > 1 else "")
            + f" does not fit on chip {chip.name!r} (no DRAM): A, B and C need {need:,} bytes, "
            f"the scratchpads hold {room:,} besides the tile reserve; use more chips "
            f"(split the GEMM), a narrower precision or a smaller batch")
    return resident


def all_resident(op: Gemm) -> Gemm:
    """``op`` with A, B and C in the scratchpads, holding their own bytes there."""
    return dataclasses.replace(op, a_source="scratchpad", b_source="scratchpad",
                               c_dest="scratchpad",
                               resident_bytes=int(op.a_bytes + op.b_bytes + op.c_bytes))
