"""Chrome / Perfetto trace-event JSON of one GEMM's schedule (opens in ui.perfetto.dev).

Process 1 is the representative array: one track each for DMA-in of X and W blocks, compute
and write-back, one span per block. Process 2 is DRAM: one track per pseudo-channel with its
busy spans. Times are microseconds from the start of the op.
"""

from __future__ import annotations

import json

from . import engine as E
from .api import simulate_gemm
from .gemm import plan, run_engine
from .ops import Gemm

MAX_BLOCKS = 20000
MAX_SPANS = 200000


def gemm_trace_events(m, k, n, chip, *, dtype=None, dataflow=None) -> list[dict]:
    dtype = chip.default_dtype if dtype is None else dtype
    simulate_gemm(m, k, n, chip, dtype=dtype, dataflow=dataflow)  # validates the inputs
    op = Gemm(name="gemm", m=m, k=k, n=n, a_dtype=dtype, b_dtype=dtype, c_dtype=dtype)
    p = plan(op, chip, dataflow)
    out, tb, tp = run_engine(chip, p["problem"], p["blocks"], p["rates"], p["split"], True,
                             MAX_BLOCKS, MAX_SPANS)
    ghz = chip.clock_ghz
    ev = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "array 0"}},
          {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "DRAM"}}]
    for tid, name in ((1, "DMA-in X"), (2, "DMA-in W"), (3, "compute"), (4, "write-back")):
        ev.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": name}})

    def span(pid, tid, name, s_us, e_us, args=None):
        if e_us > s_us:
            ev.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": s_us,
                       "dur": e_us - s_us, "args": args or {}})

    for b in range(int(out[E.O_NTRACE_BLOCKS])):
        r = tb[b]
        lab = f"block b{int(r[E.T_BT])} m{int(r[E.T_I])} n{int(r[E.T_J])} k{int(r[E.T_K])}"
        span(1, 1, lab, r[E.T_XS] / 1e3, r[E.T_XE] / 1e3)
        span(1, 2, lab, r[E.T_WS] / 1e3, r[E.T_WE] / 1e3)
        span(1, 3, lab, r[E.T_CS] / ghz / 1e3, r[E.T_CE] / ghz / 1e3)
        span(1, 4, lab, r[E.T_OS] / 1e3, r[E.T_OE] / 1e3)
    pcs = set()
    for s in range(int(out[E.O_NTRACE_PC])):
        pc, a, b_, w = tp[s]
        pcs.add(int(pc))
        span(2, int(pc), "write" if w else "read", a / 1e3, b_ / 1e3)
    for pc in sorted(pcs):
        ev.append({"ph": "M", "pid": 2, "tid": pc, "name": "thread_name",
                   "args": {"name": f"pseudo-channel {pc}"}})
    return ev


def write_gemm_trace(path, m, k, n, chip, *, dtype=None, dataflow=None) -> None:
    ev = gemm_trace_events(m, k, n, chip, dtype=dtype, dataflow=dataflow)
    with open(path, "w") as fh:
        json.dump({"traceEvents": ev, "displayTimeUnit": "ns"}, fh)
