"""diptych.rtl: an Amaranth INT8/BF16 systolic MAC array, bit- and cycle-exact to the simulator.

* :mod:`.golden` — NumPy golden model of the numerics (bit patterns in and out);
* :mod:`.fp`, :mod:`.pe`, :mod:`.array` — the components: BF16 multiplier, FP32 adder, MACs,
  OS/WS PEs and ``SystolicArray(rows, cols, dtype, dataflow)``;
* :mod:`.bench` — stimulus, reference model (golden bits, ``diptych.sim.timing`` cycles) and
  scoreboard; :mod:`.pysim` drives it in amaranth.sim, :mod:`.cocotb_bench` on Verilator
  (:mod:`.verilator` builds and runs it);
* :mod:`.verilog`, :mod:`.area` — Verilog generation and Yosys cell counts.

Importing the package loads nothing heavy; import the submodules you need.
"""
