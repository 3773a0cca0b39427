"""Dtype scaling of the array timeline (design.md §4, the docstring of :mod:`.timing`).

INT8 and BF16 share one single-cycle timeline. A precision with ``rate`` MACs per PE per cycle:

* output stationary: each fold's depth becomes ``ke = ceil(K · den / num)`` steps where
  ``rate = num/den``; ``rate = 2`` halves the steps, ``rate = 1/4`` (four passes) quadruples
  them (``timing.os_fold_steps``);
* weight/input stationary: with ``rate ≥ 1`` a PE holds ``rate`` weights, so a stationary tile
  covers ``R · rate`` rows of K (``stationary_rows``); with ``rate < 1`` each streamed row
  takes ``1/rate`` cycles (``me = ceil(M · den / num)``, ``timing.ws_fold_rows``).

So peak MACs per cycle of an R×C array is ``R·C·rate`` in every dataflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from ..arch.chip import MAX_RATE_DENOMINATOR
from . import timing as T


@dataclass(frozen=True)
class Rates:
    rate: float
    os_num: int
    os_den: int
    ws_num: int
    ws_den: int
    stationary_rows: int
    #: the WS weight-install path (timing.ws_install_cycles / ws_weight_load): rows written
    #: per cycle, and 1 for the systolic swap wave, 0 for a global swap
    ws_load_rows_per_cycle: int = 1
    ws_wave: int = 1


@lru_cache(maxsize=256)
def array_rates(chip, dtype: str) -> Rates:
    """The rate parameters of ``chip``'s array in ``dtype``; ValueError if unsupported.
    Memoised (a search asks once per GEMM; three ``Fraction`` reductions each, issue 27):
    ``Rates`` is frozen."""
    arr = chip.core.array
    r = arr.macs_per_pe_per_cycle[dtype]
    if r <= 0:
        raise ValueError(f"dtype {dtype!r} is not supported by chip {chip.name!r} "
                         f"(supported: {', '.join(arr.dtypes)})")
    fr = Fraction(r).limit_denominator(MAX_RATE_DENOMINATOR)  # exact: arch.chip.check_rate
    ws = min(fr, Fraction(1))
    return Rates(rate=float(r), os_num=fr.numerator, os_den=fr.denominator,
                 ws_num=ws.numerator, ws_den=ws.denominator,
                 stationary_rows=T.ws_stationary_depth(arr.rows, r),
                 ws_load_rows_per_cycle=arr.weight_load_rows_per_cycle,
                 ws_wave=1 if arr.weight_swap == "wave" else 0)
