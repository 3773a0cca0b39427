"""diptych.rtl: an Amaranth INT8/FP8/BF16/multi-precision systolic MAC array, bit- and
cycle-exact to the simulator, and the golden numerics of the precisions it and the chips use.

* :mod:`.golden` — NumPy golden model of the numerics (bit patterns in and out);
  :mod:`.minifloat` and :mod:`.formats` — FP8/FP6/FP4 elements and the block-scaled MX and
  NVFP4 formats (quantise, dequantise, dot product; no chip in sight);
* :mod:`.datapath` — the PE datapaths, their modes and MACs per cycle;
* :mod:`.fp`, :mod:`.pe`, :mod:`.array` — the components: BF16 and FP8 multipliers, FP32
  adder, MACs, OS/WS PEs and ``SystolicArray(rows, cols, dtype, dataflow)``;
* :mod:`.bench` and :mod:`.plan` — stimulus, reference model (golden bits,
  ``diptych.sim.timing`` cycles) and scoreboard; :mod:`.special` and :mod:`.special_plan` —
  the directed special-value steps of every mode and the plan that runs them; :mod:`.pysim`
  drives a plan in amaranth.sim, :mod:`.cocotb_bench` on Verilator (:mod:`.verilator` builds
  models once and runs plans);
* :mod:`.verilog`, :mod:`.area` — Verilog generation and Yosys cell counts.

Importing the package loads nothing heavy; import the submodules you need.
"""
