"""cocotb bench for the systolic array (run inside the simulator by :func:`run_bench`).

In the style of cocotb's ``examples/matrix_multiplier``: a testbench class with a **driver**
(presents the plan's inputs cycle by cycle, bubbles included), a **monitor** (records every
``out_valid`` cycle with its row and words), a **reference model** (the plan: expected bits from
the NumPy golden model, expected cycles from ``diptych.sim.timing``) and a **scoreboard**
(:func:`diptych.rtl.bench.score`: every output bit-exact and in its predicted cycle, nothing
else). The configuration arrives in ``DIPTYCH_RTL_*`` environment variables; a JSON summary
is written to ``DIPTYCH_RTL_SUMMARY`` so the caller can report what was checked.

Cycle numbering matches the contract: cycle 0 is the first cycle after reset is released;
inputs for cycle ``c`` are written just after edge ``c − 1`` and sampled by the DUT at edge
``c``; outputs of cycle ``c`` are read in the read-only phase after edge ``c − 1``.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from .bench import Plan, make_plan, score, unpack


class ArrayTB:
    """Driver, monitor and scoreboard around one DUT and one :class:`Plan`."""

    def __init__(self, dut, plan: Plan):
        self.dut = dut
        self.plan = plan
        self.observed: list[tuple[int, int | None, tuple[int, ...]]] = []

    def _drive(self, cycle: int) -> None:
        for name, value in self.plan.inputs_at(cycle).items():
            getattr(self.dut, name).value = value

    async def reset(self) -> None:
        self.dut.rst.value = 1
        self._drive(-1)
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def driver(self) -> None:
        for cycle in range(self.plan.n_cycles):
            self._drive(cycle)
            await RisingEdge(self.dut.clk)

    async def monitor(self) -> None:
        dut = self.dut
        for cycle in range(self.plan.n_cycles):
            await ReadOnly()
            if int(dut.out_valid.value):
                row = int(dut.out_row.value) if self.plan.dataflow == "os" else None
                words = unpack(int(dut.out_data.value), 32, self.plan.cols)
                self.observed.append((cycle, row, words))
            await RisingEdge(dut.clk)

    def scoreboard(self) -> list[str]:
        return score(self.plan, self.observed)


def _config() -> dict:
    env = os.environ
    return {
        "rows": int(env["DIPTYCH_RTL_ROWS"]), "cols": int(env["DIPTYCH_RTL_COLS"]),
        "dtype": env["DIPTYCH_RTL_DTYPE"], "dataflow": env["DIPTYCH_RTL_DATAFLOW"],
        "seed": int(env.get("DIPTYCH_RTL_SEED", "1")),
        "tiles": int(env.get("DIPTYCH_RTL_TILES", "8")),
    }


@cocotb.test()
async def systolic_array_bench(dut):
    """Random tiles with edge values, bubbles and back-to-back issue; every output checked."""
    cfg = _config()
    plan = make_plan(cfg["rows"], cfg["cols"], cfg["dtype"], cfg["dataflow"],
                     seed=cfg["seed"], tiles=cfg["tiles"])
    tb = ArrayTB(dut, plan)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    await tb.reset()
    drv = cocotb.start_soon(tb.driver())
    mon = cocotb.start_soon(tb.monitor())
    await drv
    await mon
    errors = tb.scoreboard()
    summary = {"tiles": plan.n_tiles, "outputs_checked": len(plan.expected),
               "cycles": plan.n_cycles, "bubbles": plan.bubbles, "errors": errors}
    path = os.environ.get("DIPTYCH_RTL_SUMMARY")
    if path:
        with open(path, "w") as f:
            json.dump(summary, f)
    assert not errors, "scoreboard mismatches:\n" + "\n".join(errors)
    dut._log.info("%d outputs from %d tiles matched bit-exactly at their predicted cycles",
                  len(plan.expected), plan.n_tiles)
