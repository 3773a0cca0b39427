"""Drive a :class:`~diptych.rtl.bench.Plan` through Amaranth's Python simulator (no build step).

The fast test tier uses this; the cocotb bench (:mod:`diptych.rtl.cocotb_bench`) does the same
on Verilator.
"""

from __future__ import annotations

from amaranth.sim import Simulator

from .array import SystolicArray
from .bench import Plan, unpack

__all__ = ["run_plan"]


def _port(dut, name):
    p = getattr(dut, name)
    return p.as_value() if hasattr(p, "as_value") else p


def run_plan(plan: Plan, vcd_path: str | None = None) -> list[tuple[int, int | None, tuple[int, ...]]]:
    """Simulate ``plan`` cycle by cycle; returns the monitor's ``(cycle, out_row, words)``."""
    dut = SystolicArray(plan.rows, plan.cols, plan.dtype, plan.dataflow)
    observed = []
    ports = {n: _port(dut, n) for n in plan.input_ports}
    out_data = _port(dut, "out_data")

    async def testbench(ctx):
        for cycle in range(plan.n_cycles):
            for name, value in plan.inputs_at(cycle).items():
                ctx.set(ports[name], value)
            if ctx.get(dut.out_valid):
                row = ctx.get(dut.out_row) if plan.dataflow == "os" else None
                observed.append((cycle, row, unpack(ctx.get(out_data), 32, plan.cols)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    if vcd_path:
        with sim.write_vcd(vcd_path):
            sim.run()
    else:
        sim.run()
    return observed
