"""A random plan of any datapath: the block-scaled ones' from :mod:`.mx_bench` (their lanes
carry the blocks' scales, blocks of 32) and :mod:`.fp4_bench` (fp4dot8), every other
one's from :mod:`.bench`. Apart from both
so that neither imports the other back."""

from __future__ import annotations

from . import bench
from .datapath import get_datapath
from .fp4_bench import make_fp4_plan
from .mx_bench import make_mx_plan
from .mx_ws import make_mx_ws_plan
from .plan import Plan


def make_plan(rows: int, cols: int, dtype: str, dataflow: str, *, seed: int = 1,
              tiles: int = 8, start: int = 1, modes=None, bubble_data: str = "random") -> Plan:
    """:func:`diptych.rtl.bench.make_plan`'s contract, for every datapath."""
    bench.check_plan_args(rows, cols, dtype, dataflow, tiles, bubble_data)
    if dtype == "fp4dot8":
        return make_fp4_plan(rows, cols, seed=seed, tiles=tiles, start=start, modes=modes,
                             bubble_data=bubble_data)
    if get_datapath(dtype).block_scaled and dataflow == "ws":
        return make_mx_ws_plan(rows, cols, seed=seed, tiles=tiles, start=start, modes=modes,
                               bubble_data=bubble_data, dtype=dtype)
    if get_datapath(dtype).block_scaled:
        return make_mx_plan(rows, cols, seed=seed, tiles=tiles, start=start, modes=modes,
                            bubble_data=bubble_data, dtype=dtype)
    return bench.make_plan(rows, cols, dtype, dataflow, seed=seed, tiles=tiles, start=start,
                           modes=modes, bubble_data=bubble_data)
