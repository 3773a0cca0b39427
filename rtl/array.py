"""``SystolicArray(rows, cols, dtype, dataflow)``: an R×C MAC array with unskewed interfaces.

``dtype`` is the PE datapath (:mod:`diptych.rtl.datapath`): ``int8``, ``bf16``, ``fp8``,
``multi``, ``fused``, ``dot4`` or ``mx`` (the block-scaled PE, :mod:`diptych.rtl.mx`: OS only;
40-bit lanes of four FP8 elements and the block's E8M0 scale in bits 39:32, and one more input,
``in_block_last``, presented with ``in_valid``: the step closes a K-block, whose dot the PEs
scale by the scales in that step's lanes and add to their accumulators; ``in_last`` closes one
too), ``mxdot4`` or ``mxint8`` (block-scaled, OS and WS: every 40-bit lane carries its
block's scale, :mod:`diptych.rtl.mx_ws`) or ``fp4dot8`` (eight FP4 elements and the block's
E8M0/E4M3 scale per 40-bit lane, OS only). Datapaths with several modes have a ``mode`` input
(3 bits)
presented with ``in_valid`` and carried with the row through the array, so each step (OS) or row
(WS) is computed in the mode it was presented with. Lanes of ``a_data``/``b_data``/``w_data``
are the datapath's lane width (8, 16 or 32 bits); in the ``multi`` and ``fused`` datapaths an
8-bit mode packs two K-consecutive elements into each 16-bit lane, in the ``dot4`` datapath four
into each 32-bit lane (low byte first).

The array obeys the timing contract of design.md §4, stated in code in
:mod:`diptych.sim.timing` (the cocotb bench checks every output against it). Conventions:
cycle ``n`` ends with rising edge ``n``; a value *presented in cycle n* is driven on the input
ports during cycle ``n`` and sampled at edge ``n``; an output *appearing in cycle n* is
visible on the (registered) output ports during cycle ``n``. There is no back-pressure: the
producer obeys the issue rules of the contract and the consumer takes every ``out_valid``.

Output stationary (``dataflow="os"``), C[R×C] = A[R×K]·B[K×C], one step ``k`` per valid cycle

* ``in_valid`` — a step is presented; ``in_last`` — it is the tile's last step;
* ``a_data[i]`` = A[i, k] (``rows`` elements), ``b_data[j]`` = B[k, j] (``cols`` elements);
* ``out_valid``, ``out_row`` (the row of C, bottom row first), ``out_data[j]`` = C[row, j].

Issue rules: one step per cycle at most, and a tile's last step at least ``rows`` cycles after
the previous tile's last step; output row ``i`` appears in cycle ``L + R + C − 1 + (R − 1 − i)``.

Weight stationary (``dataflow="ws"``), C[M×C] = P + A[M×R]·W[R×C]

* ``w_load`` with ``w_data[j]``: one row of W per cycle, **bottom row first** (W[R−1, :] in
  the first load cycle, W[0, :] in the R-th), shifted down into the shadow registers;
* ``in_valid`` with ``a_data[i]`` = A[m, i] and ``psum_data[j]`` = P[m, j] (FP32 bits for
  BF16, int32 for INT8: the partial sums entering at the top edge); ``in_first`` marks a
  tile's first row, which swaps the shadow weights into use as it travels through the array;
* ``out_valid``, ``out_data[j]`` = C[m, j], rows in the order they were presented.

Issue rules: the R load cycles are consecutive; a tile's first row comes at least R cycles
after its load starts; the next load starts at least ``R + C − 2`` cycles after this tile's
first row; row ``m`` presented in cycle ``s`` appears in cycle ``s + R + C − 1``.

Operands and results are little-endian packed vectors in the generated Verilog: element ``e``
of ``a_data`` occupies bits ``[w·e + w − 1 : w·e]``.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .datapath import MODE_BITS, get_datapath
from .pe import OsPe, WsPe, operand_bits

__all__ = ["SystolicArray", "MAX_DIM", "DATAFLOWS", "check_config"]

#: Largest supported rows/cols (Verilog generation and simulation cost grow as rows × cols).
MAX_DIM = 64
DATAFLOWS = ("os", "ws")


def check_config(rows, cols, dtype, dataflow) -> None:
    """Validate an array configuration; raises ValueError naming the bad field and value."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if v > MAX_DIM:
            raise ValueError(f"{name} must be at most {MAX_DIM}, not {v!r}")
    operand_bits(dtype)
    if dataflow not in DATAFLOWS:
        raise ValueError(f"dataflow must be one of {', '.join(DATAFLOWS)}, not {dataflow!r}")
    why = get_datapath(dtype).os_only
    if why and dataflow != "os":
        raise ValueError(f"the {dtype} datapath is output-stationary only ({why}), not dataflow "
                         f"{dataflow!r}")


def _delay(m: Module, sig, n: int, name: str):
    """``sig`` delayed by ``n`` registers (``n`` = 0 returns ``sig``)."""
    for s in range(n):
        r = Signal.like(sig, name=f"{name}_d{s + 1}")
        m.d.sync += r.eq(sig)
        sig = r
    return sig


class SystolicArray(wiring.Component):
    """An R×C systolic MAC array; see the module docstring for ports and timing."""

    def __init__(self, rows: int, cols: int, dtype: str = "int8", dataflow: str = "os"):
        try:
            check_config(rows, cols, dtype, dataflow)
        except ValueError:
            self._MustUse__silence = True       # a rejected instance is not "unused" design
            raise
        self.rows, self.cols, self.dtype, self.dataflow = rows, cols, dtype, dataflow
        w = operand_bits(dtype)
        sig = {
            "in_valid": In(1),
            "a_data": In(data.ArrayLayout(w, rows)),
            "out_valid": Out(1),
            "out_data": Out(data.ArrayLayout(32, cols)),
        }
        if get_datapath(dtype).has_mode_port:
            sig["mode"] = In(MODE_BITS)
        if get_datapath(dtype).block_port:
            sig["in_block_last"] = In(1)
        if dataflow == "os":
            sig.update({
                "in_last": In(1),
                "b_data": In(data.ArrayLayout(w, cols)),
                "out_row": Out(unsigned(max(1, (rows - 1).bit_length()))),
            })
        else:
            sig.update({
                "in_first": In(1),
                "psum_data": In(data.ArrayLayout(32, cols)),
                "w_load": In(1),
                "w_data": In(data.ArrayLayout(w, cols)),
            })
        super().__init__(sig)

    def elaborate(self, platform):
        return self._elaborate_os() if self.dataflow == "os" else self._elaborate_ws()

    def _west_edge(self, m: Module, pe, flag: str) -> None:
        """Row i's operand, valid, ``flag`` (last/first) and mode enter PE(i, 0) delayed by i
        (the skew) and travel east one register per PE."""
        ports = [("a", self.a_data, "a"), ("valid", self.in_valid, "valid"),
                 (flag, getattr(self, f"in_{flag}"), flag)]
        if hasattr(self, "mode"):
            ports.append(("mode", self.mode, "mode"))
        if hasattr(self, "in_block_last"):
            ports.append(("block_last", self.in_block_last, "block_last"))
        for i in range(self.rows):
            for port, src, name in ports:
                sig = src[i] if port == "a" else src
                m.d.comb += getattr(pe[i][0], f"{port}_in").eq(_delay(m, sig, i, f"{name}{i}"))
                for j in range(1, self.cols):
                    m.d.comb += getattr(pe[i][j], f"{port}_in").eq(
                        getattr(pe[i][j - 1], f"{port}_out"))

    def _elaborate_os(self):
        m = Module()
        R, C = self.rows, self.cols
        if get_datapath(self.dtype).block_port:
            from .mx import MxOsPe
            pe = [[MxOsPe() for _ in range(C)] for _ in range(R)]
        else:
            pe = [[OsPe(self.dtype) for _ in range(C)] for _ in range(R)]
        for i in range(R):
            for j in range(C):
                m.submodules[f"pe_{i}_{j}"] = pe[i][j]
        self._west_edge(m, pe, "last")
        # North edge: column j delayed by j.
        for j in range(C):
            m.d.comb += pe[0][j].b_in.eq(_delay(m, self.b_data[j], j, f"b{j}"))
            for i in range(1, R):
                m.d.comb += pe[i][j].b_in.eq(pe[i - 1][j].b_out)
        # Drain: per column, a counter started when the bottom PE finishes a tile counts the
        # R rows out of the bottom (cnt = R, R−1, …, 1 while row R−cnt… leaves). Row i's drain
        # register shifts down only while it still holds results of that tile (cnt > R − i):
        # it may be reloaded by the next tile from then on, which the issue rule allows.
        cnt_bits = R.bit_length()
        out_row = []
        bottom_valid = []
        for j in range(C):
            cnt = Signal(cnt_bits, name=f"drain_cnt{j}")
            bot = pe[R - 1][j]
            with m.If(bot.valid_in & bot.last_in):
                m.d.sync += cnt.eq(R)
            with m.Elif(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)
            for i in range(1, R):       # row 0 has nothing above it: it never shifts
                m.d.comb += [pe[i][j].shift.eq(cnt > R - i),
                             pe[i][j].drain_in.eq(pe[i - 1][j].drain_out)]
            bottom_valid.append(cnt != 0)
            out_row.append(cnt - 1)
        # De-skew: column j's bottom delayed by C − 1 − j, so a row leaves in one cycle.
        for j in range(C):
            m.d.comb += self.out_data[j].eq(
                _delay(m, pe[R - 1][j].drain_out, C - 1 - j, f"out{j}"))
        m.d.comb += [self.out_valid.eq(bottom_valid[C - 1]), self.out_row.eq(out_row[C - 1])]
        return m

    def _elaborate_ws(self):
        m = Module()
        R, C = self.rows, self.cols
        pe = [[WsPe(self.dtype) for _ in range(C)] for _ in range(R)]
        for i in range(R):
            for j in range(C):
                m.submodules[f"pe_{i}_{j}"] = pe[i][j]
                m.d.comb += pe[i][j].w_load.eq(self.w_load)
        self._west_edge(m, pe, "first")
        for j in range(C):
            m.d.comb += [
                pe[0][j].psum_in.eq(_delay(m, self.psum_data[j], j, f"psum{j}")),
                pe[0][j].w_in.eq(self.w_data[j]),
            ]
            for i in range(1, R):
                m.d.comb += [pe[i][j].psum_in.eq(pe[i - 1][j].psum_out),
                             pe[i][j].w_in.eq(pe[i - 1][j].w_out)]
        for j in range(C):
            m.d.comb += self.out_data[j].eq(
                _delay(m, pe[R - 1][j].psum_out, C - 1 - j, f"out{j}"))
        m.d.comb += self.out_valid.eq(pe[R - 1][C - 1].valid_out)
        return m
