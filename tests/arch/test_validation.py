"""Broken chip descriptions are rejected with one exact message naming file, key, value and
what was expected."""

import copy
import dataclasses
import tomllib
from importlib import resources

import pytest

from diptych.arch import ConfigError, chip_from_dict, load_chip, load_chip_file


def base() -> dict:
    text = resources.files("diptych.arch.chips").joinpath("tpu-v4.toml").read_text()
    return tomllib.loads(text)


def _set(path, value):
    def mod(d):
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        d[last] = value
    return mod


def _del(path):
    def mod(d):
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        del d[last]
    return mod


KNOWN_TOP = ("area, area_budget_mm2, attention, attention_fa2, clock_ghz, collectives, "
             "comm_kernels, core, cost, default_dtype, description, die, dma, dram, dram2, dram3, "
             "elementwise_kernels, elementwise_kernels_megatron, energy, "
             "interconnect, name, noc, overheads, package, power, residency, shared_buffer, "
             "split_accumulator, tdp_w, tensor_cores, tp_overlap")

BROKEN = [
    ("misspelt key", _set("clock_gz", 1.0),
     "bad.toml: clock_gz: unknown key (did you mean 'clock_ghz'?), got 1.0; "
     f"expected one of: {KNOWN_TOP}"),
    ("negative clock", _set("clock_ghz", -1.0),
     "bad.toml: clock_ghz: expected a number >= 0.001 and <= 10 (GHz: 1 MHz is a slow "
     "microcontroller, 10 GHz is above any shipped logic clock), got -1.0"),
    ("rows = 0", _set("core.array.rows", 0),
     "bad.toml: core.array.rows: expected an integer >= 1 and <= 4096, got 0"),
    ("rows too large", _set("core.array.cols", 5000),
     "bad.toml: core.array.cols: expected an integer >= 1 and <= 4096, got 5000"),
    ("rows not integer", _set("core.array.rows", 2.5),
     "bad.toml: core.array.rows: expected an integer, got 2.5"),
    ("default dtype the array lacks", _set("default_dtype", "fp8"),
     "bad.toml: default_dtype: expected a dtype the array supports (int8, bf16), got 'fp8'"),
    ("unknown dtype", _set("default_dtype", "int9"),
     "bad.toml: default_dtype: expected one of 'int4', 'int8', 'fp8', 'bf16', 'fp16', 'fp32', "
     "'mxfp4', 'nvfp4', 'mxfp6', 'mxfp8', 'mxint8', got 'int9'"),
    ("capacity as a string", _set("dram.capacity_gib", "32"),
     "bad.toml: dram.capacity_gib: expected a number, got '32'"),
    ("missing table", _del("core.vector"),
     "bad.toml: core.vector: missing required key (the vector unit table)"),
    ("missing scalar", _del("dram.t_rcd_ns"),
     "bad.toml: dram.t_rcd_ns: missing required key (tRCD in ns; >= 0.1 and <= 1000)"),
    ("bad dataflow", _set("core.array.dataflows", ["ws", "xs"]),
     "bad.toml: core.array.dataflows[1]: expected one of 'os', 'ws', 'is', got 'xs'"),
    ("empty dataflows", _set("core.array.dataflows", []),
     "bad.toml: core.array.dataflows: expected a non-empty list, got []"),
    ("repeated dataflows", _set("core.array.dataflows", ["ws", "ws"]),
     "bad.toml: core.array.dataflows: expected a list without repeated entries, got ['ws', 'ws']"),
    ("unknown dtype key", _set("core.array.macs_per_pe_per_cycle", {"int9": 1}),
     "bad.toml: core.array.macs_per_pe_per_cycle.int9: unknown key (did you mean 'int8'?), got 1; "
     "expected one of: bf16, fp16, fp32, fp8, int4, int8, mxfp4, mxfp6, mxfp8, mxint8, nvfp4"),
    ("no supported dtype", _set("core.array.macs_per_pe_per_cycle", {"int8": 0}),
     "bad.toml: core.array.macs_per_pe_per_cycle: expected at least one dtype with MACs per PE "
     "per cycle > 0, got {}"),
    ("bool as integer", _set("tensor_cores", True),
     "bad.toml: tensor_cores: expected an integer, got True"),
    ("table given as number", _set("dma", 4),
     "bad.toml: dma: expected a table of Dma fields, got 4"),
    ("refresh interval below tRFC", _set("dram.t_refi_ns", 100.0),
     "bad.toml: dram.t_refi_ns: expected more than t_rfc_ns (260.0), got 100.0"),
    ("burst larger than page", _set("dram.burst_bytes", 4096),
     "bad.toml: dram.burst_bytes: expected at most page_bytes (1024), got 4096"),
    ("unknown DRAM kind", _set("dram.kind", "sram"),
     "bad.toml: dram.kind: expected one of 'hbm2', 'hbm2e', 'hbm3', 'hbm3e', 'hbm4', 'ddr3', "
     "'ddr4', 'ddr5', 'lpddr5', 'lpddr5x', 'gddr6', 'gddr7', got 'sram'"),
    ("negative energy", _set("energy.pj_per_dram_bit", -1),
     "bad.toml: energy.pj_per_dram_bit: expected 0 or a number >= 0.01 and <= 1000 (pJ: 0 = "
     "not modelled; 0.01 pJ/bit is 25x below the best die-to-die link, 300x below HBM), got "
     "-1.0"),
    ("NaN clock", _set("clock_ghz", float("nan")),
     "bad.toml: clock_ghz: expected a finite number >= 0.001 and <= 10 (GHz: 1 MHz is a slow "
     "microcontroller, 10 GHz is above any shipped logic clock), got nan"),
    ("infinite capacity", _set("dram.capacity_gib", float("inf")),
     "bad.toml: dram.capacity_gib: expected a finite number >= 0.001 and <= 65536 (GiB: 1 MiB "
     "is below any DRAM device sold this century, 64 TiB is 300x the largest HBM system), got "
     "inf"),
    ("setup cycles near 2**63", _set("dma.setup_cycles", 2**63 - 1),
     "bad.toml: dma.setup_cycles: expected an integer >= 0 and <= 1000000, "
     "got 9223372036854775807"),
    ("vanishing DRAM rate", _set("dram.gbps_per_pin", 1e-300),
     "bad.toml: dram.gbps_per_pin: expected a number >= 0.1 and <= 64 (Gb/s: 0.1 is PC100 "
     "SDRAM, 64 is above GDDR7 at 32-48; per kind at most PIN_RATE_MAX_GBPS), got 1e-300"),
    ("MAC rate below 1/1024", _set("core.array.macs_per_pe_per_cycle", {"int8": 0.0005}),
     "bad.toml: core.array.macs_per_pe_per_cycle.int8: expected 0 or a number >= 1/1024 and "
     "<= 64 (MACs per PE per cycle: 0 = unsupported; 1/1024 is a slow multi-pass mode, 64 a PE "
     "of 64 parallel MACs), got 0.0005"),
    ("MAC rate not a ratio", _set("core.array.macs_per_pe_per_cycle", {"int8": 0.7071}),
     "bad.toml: core.array.macs_per_pe_per_cycle.int8: expected a rate n/d with d <= 1024 (the "
     "array timeline plays whole steps; e.g. 0.25, 0.75 or 1/3 = 0.333...), nearest is "
     "239/338 = 0.707101, got 0.7071"),
    ("pJ per MAC over its range", _set("energy.pj_per_mac", {"int8": 5000.0}),
     "bad.toml: energy.pj_per_mac.int8: expected 0 or a number >= 0.0001 and <= 1000 (pJ: 0 = "
     "not modelled; 0.1 fJ is below any CMOS op, an int4 MAC at 3 nm takes ~10 fJ; 1 nJ is 250x "
     "a 45 nm fp32 MAC), got 5000.0"),
    ("comm-GEMM overlap taking every core",
     _set("tp_overlap", {"splits": 4, "proj_fprop_cores": 2}),
     "bad.toml: tp_overlap.proj_fprop_cores: expected fewer than the chip's 2 tensor cores, "
     "got 2"),
    ("comm-GEMM overlap in no chunks", _set("tp_overlap", {"splits": 0}),
     "bad.toml: tp_overlap.splits: expected an integer >= 1 and <= 1024, got 0"),
    ("area over budget", _set("area_budget_mm2", 100.0),
     "bad.toml: area_budget_mm2: expected at least the modelled die area (419.8 mm²), got 100.0"),
]


@pytest.mark.parametrize("what,mod,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_config_message(what, mod, message):
    d = base()
    mod(d)
    with pytest.raises(ConfigError) as info:
        chip_from_dict(d, source="bad.toml")
    assert str(info.value) == message


def test_config_error_is_value_error():
    assert issubclass(ConfigError, ValueError)


def test_base_is_valid():
    chip_from_dict(base(), source="ok.toml")


def test_file_errors(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = \n")
    with pytest.raises(ConfigError, match=r"broken.toml: invalid TOML"):
        load_chip_file(p)
    with pytest.raises(ConfigError, match=r"missing.toml: cannot read chip file"):
        load_chip_file(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"unknown chip 'tpu-v99': expected a preset"):
        load_chip("tpu-v99")


def test_roundtrip_via_file(tmp_path):
    src = resources.files("diptych.arch.chips").joinpath("tpu-v1.toml").read_text()
    p = tmp_path / "mine.toml"
    p.write_text(src.replace('name = "tpu-v1"', 'name = "mine"'))
    c = load_chip(str(p))
    assert c.name == "mine"
    assert c == dataclasses.replace(load_chip("tpu-v1"), name="mine")


def test_frozen():
    c = load_chip("tpu-v4")
    with pytest.raises(AttributeError):
        c.clock_ghz = 2.0  # type: ignore[misc]
    assert copy.deepcopy(c) == c
