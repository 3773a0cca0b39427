"""The public entry points: :func:`simulate` and :func:`simulate_gemm`, memoised."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from .gemm import check_dataflows, gemm_stats
from .ops import Collective, Gemm, VectorOp
from .stats import OpStats
from .vector import vector_stats


@lru_cache(maxsize=4096)
def _gemm_cached(shape: Gemm, chip, dataflow) -> OpStats:
    return gemm_stats(shape, chip, dataflow)


@lru_cache(maxsize=4096)
def _vector_cached(shape: VectorOp, chip) -> OpStats:
    return vector_stats(shape, chip)


def simulate(op, chip, *, dataflow: str | None = None) -> OpStats:
    """Time one op on ``chip``; results are memoised on (shape, dtypes, chip, dataflow).

    ``op`` is a :class:`~diptych.sim.ops.Gemm` or :class:`~diptych.sim.ops.VectorOp`;
    ``dataflow`` (GEMMs only) is ``"os"``, ``"ws"``, ``"is"`` or None for the best the chip
    supports. Raises ValueError for an unsupported dtype or dataflow or a scratchpad too small
    for the minimal tile.
    """
    if isinstance(op, Gemm):
        check_dataflows(chip, dataflow)
        shape = dataclasses.replace(op, name="", tags=())
        st = _gemm_cached(shape, chip, dataflow)
    elif isinstance(op, VectorOp):
        shape = dataclasses.replace(op, name="", tags=())
        st = _vector_cached(shape, chip)
    elif isinstance(op, Collective):
        raise ValueError("collectives are not timed by simulate(); they belong to the "
                         "interconnect model")
    else:
        raise ValueError(f"op must be a Gemm or a VectorOp, not {type(op).__name__}")
    return dataclasses.replace(st, name=op.name)


def _check_dim(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


def simulate_gemm(m: int, k: int, n: int, chip, *, dtype: str | None = None,
                  dataflow: str | None = None, batch: int = 1, name: str = "gemm") -> OpStats:
    """Time ``C[m×n] = A[m×k]·B[k×n]`` with every operand in ``dtype`` (default: the chip's),
    FP32 accumulation (INT32 for integer dtypes) and the output stored in ``dtype``."""
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
    return simulate(op, chip, dataflow=dataflow)
