"""cocotb bench for the systolic array (run inside the simulator by :func:`run_model`).

In the style of cocotb's ``examples/matrix_multiplier``: a testbench class with a **driver**
(presents the plan's inputs cycle by cycle: bubbles with random data, long constant stretches
in one go), a **monitor** (records every ``out_valid`` cycle with its row and words), a
**reference model** (the plan: expected bits from the NumPy golden model, expected cycles from
``diptych.sim.timing``) and a **scoreboard** (:func:`diptych.rtl.bench.score`: every output
bit-exact and in its predicted cycle, nothing else). One simulator run executes several plans
(seeds, directed tests) on one build, resetting the array before each. The plans are made by
the caller and arrive pickled in the file ``DIPTYCH_RTL_PLANS`` (so this process imports only
the light :mod:`diptych.rtl.plan`, not NumPy, Amaranth or the engine); what the monitor saw is
written per plan to the JSON file ``DIPTYCH_RTL_OBSERVED``, which the caller scores.

Cycle numbering matches the contract: cycle 0 is the first cycle after reset is released;
inputs for cycle ``c`` are written just after edge ``c − 1`` and sampled by the DUT at edge
``c``; outputs of cycle ``c`` are read in the read-only phase after edge ``c − 1``.
"""

from __future__ import annotations

import bisect
import json
import os
import pickle

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import First, ReadOnly, RisingEdge, Timer

#: Clock period in ns.
PERIOD_NS = 10

from .plan import Plan, score, unpack


class ArrayTB:
    """Driver, monitor and scoreboard around one DUT and one :class:`Plan`."""

    def __init__(self, dut, plan: Plan):
        self.dut = dut
        self.plan = plan
        self.observed: list[tuple[int, int | None, tuple[int, ...]]] = []

    def _write(self, values: dict[str, int]) -> None:
        for name, value in values.items():
            getattr(self.dut, name).value = value

    async def reset(self) -> None:
        self.dut.rst.value = 1
        self._write(self.plan.inputs_at(-1))
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def _edges(self, n: int) -> None:
        """Wait for the next ``n`` rising clock edges (a long wait sleeps through mid-cycles
        on a timer, so Python does not wake up every cycle)."""
        if n > 1:
            await Timer((n - 1) * PERIOD_NS + PERIOD_NS // 2, unit="ns")
        await RisingEdge(self.dut.clk)

    async def driver(self) -> None:
        for _, n, values in self.plan.segments():
            self._write(values)
            await self._edges(n)

    async def monitor(self) -> None:
        """Sample ``out_valid`` in every cycle; through long stretches in which no output is
        expected, sleep until ``out_valid`` rises or the stretch ends (the cycle is always
        recomputed from the simulation time, so a stray output is caught in its cycle)."""
        dut = self.dut
        os_flow = self.plan.dataflow == "os"
        expected = sorted(self.plan.expected)
        t0 = get_sim_time(unit="ns")               # edge −1: cycle 0 starts now
        await ReadOnly()
        while True:
            cycle = int(round((get_sim_time(unit="ns") - t0) / PERIOD_NS))
            if cycle >= self.plan.n_cycles:
                break
            valid = int(dut.out_valid.value)
            if valid:
                row = int(dut.out_row.value) if os_flow else None
                words = unpack(int(dut.out_data.value), 32, self.plan.cols)
                self.observed.append((cycle, row, words))
            i = bisect.bisect_right(expected, cycle)
            nxt = expected[i] if i < len(expected) else self.plan.n_cycles
            if valid or nxt - cycle <= 2:
                await RisingEdge(dut.clk)
            else:                   # to the start of cycle nxt − 1, unless out_valid rises
                fired = await First(RisingEdge(dut.out_valid),
                                    Timer((nxt - cycle - 2) * PERIOD_NS + PERIOD_NS // 2,
                                          unit="ns"))
                if not isinstance(fired, RisingEdge):
                    await RisingEdge(dut.clk)
            await ReadOnly()

    def scoreboard(self) -> list[str]:
        return score(self.plan, self.observed)


@cocotb.test()
async def systolic_array_bench(dut):
    """Every plan in turn: reset, drive, monitor, score."""
    with open(os.environ["DIPTYCH_RTL_PLANS"], "rb") as f:
        plans: list[tuple[str, Plan]] = pickle.load(f)
    out_path = os.environ["DIPTYCH_RTL_OBSERVED"]
    cocotb.start_soon(Clock(dut.clk, PERIOD_NS, unit="ns").start())
    observed, failed = [], []
    for name, plan in plans:
        tb = ArrayTB(dut, plan)
        await tb.reset()
        drv = cocotb.start_soon(tb.driver())
        mon = cocotb.start_soon(tb.monitor())
        await drv
        await mon
        errors = tb.scoreboard()
        observed.append({"name": name, "observed": tb.observed})
        if errors:
            failed.append(f"{name}: " + "\n  ".join(errors))
        dut._log.info("%s: %d outputs expected, %d seen, %d errors", name,
                      len(plan.expected), len(tb.observed), len(errors))
        await RisingEdge(dut.clk)
        with open(out_path, "w") as f:
            json.dump(observed, f)
    assert not failed, "scoreboard mismatches:\n" + "\n".join(failed)
