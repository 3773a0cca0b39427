"""Chip parameters for the program layer: [overheads], [residency], the vector unit on the
array output path, and all-SRAM chips (no [dram]) through chips/area/run."""

import json
import tomllib
from importlib import resources

import pytest
from click.testing import CliRunner

from diptych.arch import ConfigError, Overheads, ResidencyPolicy, chip_from_dict, load_chip
from diptych.arch import preset_names, to_dict
from diptych.arch.area import area_breakdown_mm2, die_area_mm2
from diptych.sim.run import Scenario
from diptych.tools.cli import main


def raw(name="tpu-v4"):
    return tomllib.loads(resources.files("diptych.arch.chips").joinpath(f"{name}.toml")
                         .read_text())


def test_overheads_default_to_zero():
    d = raw("tpu-v4")
    d.pop("overheads", None)
    d["core"]["vector"].pop("on_array_output_path")
    c = chip_from_dict(d)
    assert c.overheads is None and c.fixed_costs == Overheads()
    assert (c.fixed_costs.op_launch_us, c.fixed_costs.step_sync_us,
            c.fixed_costs.collective_launch_us) == (0.0, 0.0, 0.0)
    assert "overheads" not in to_dict(c)              # an absent table stays absent
    assert c.residency is None and c.residency_policy == ResidencyPolicy()
    assert c.core.vector.on_array_output_path is False


@pytest.mark.parametrize("table,key,value,message", [
    ("overheads", "op_launch_us", -1.0, "overheads.op_launch_us: expected 0 or a number >= "
                                         "0.0001 and <= 1000 (µs: 0 = none; 0.1 ns is one "
                                         "cycle at 10 GHz, the fastest clock), got -1.0"),
    ("overheads", "step_sync_us", "fast", "overheads.step_sync_us: expected a number, got "
                                          "'fast'"),
    ("overheads", "kernel_us", 1.0, "overheads.kernel_us: unknown key"),
    ("residency", "scratchpad_kinds", ["weights"], "residency.scratchpad_kinds[0]: expected "
                                                   "one of 'weight', 'activation'"),
    ("residency", "reserve_fraction", 1.0, "residency.reserve_fraction: expected 0 or a number "
                                           ">= 0.001 and <= 0.95 (0 = none; under 0.1 % holds "
                                           "no tile, over 95 % leaves nothing to keep), got 1.0"),
])
def test_wrong_program_tables(table, key, value, message):
    d = raw()
    d.setdefault(table, {})[key] = value
    with pytest.raises(ConfigError) as info:
        chip_from_dict(d, source="bad.toml")
    assert str(info.value).startswith(f"bad.toml: {message}")


def test_vector_flag_must_be_a_bool():
    d = raw()
    d["core"]["vector"]["on_array_output_path"] = 1
    with pytest.raises(ConfigError, match="core.vector.on_array_output_path: expected true or "
                                          "false, got 1"):
        chip_from_dict(d, source="bad.toml")


def test_presets_state_their_fixed_costs():
    h = load_chip("h100").fixed_costs
    assert h.op_launch_us > 0 and h.step_sync_us > 0 and h.collective_launch_us > 0
    assert load_chip("groq-lpu").fixed_costs == Overheads()     # statically scheduled
    assert load_chip("tpu-v1").core.vector.on_array_output_path
    for name in preset_names():                                  # every preset says it
        assert "overheads" in raw(name), name
        assert "on_array_output_path" in raw(name)["core"]["vector"], name


# ---- all-SRAM chips ----------------------------------------------------------------------
def test_groq_preset_has_no_dram():
    c = load_chip("groq-lpu")
    assert c.dram is None and not c.has_dram and c.dram_bytes_per_s == 0.0
    assert c.memory_bytes == c.sram_bytes == 220 * 2**20
    assert area_breakdown_mm2(c)["dram_phy"] == 0.0
    assert die_area_mm2(c) == pytest.approx(725.0, abs=0.5)     # ISCA'20: 25 x 29 mm
    # 4 x 320 x 320 MACs at 900 MHz: 737 TOPS int8 against the 750 quoted
    assert c.peak_ops_per_s["int8"] == pytest.approx(750e12, rel=0.02)
    assert c.peak_ops_per_s["fp16"] == pytest.approx(188e12, rel=0.02)
    assert c.core.scratchpad.bytes_per_cycle * c.clock_hz == pytest.approx(80e12, rel=0.01)
    assert c.ridge_ops_per_byte("int8") == float("inf")
    with pytest.raises(ValueError, match="chip 'groq-lpu' has no DRAM .* the engine needs one"):
        c.require_dram("the engine")


def test_chip_without_dram_table_validates_and_round_trips(tmp_path):
    d = raw("tpu-v4")
    d.pop("dram")
    c = chip_from_dict(d)
    assert c.dram is None
    assert chip_from_dict(to_dict(c)) == c
    f = tmp_path / "sram.toml"
    f.write_text(resources.files("diptych.arch.chips").joinpath("groq-lpu.toml").read_text())
    r = CliRunner().invoke(main, ["chips", "validate", str(f)])
    assert r.exit_code == 0 and "OK (groq-lpu, 725 mm²)" in r.output


def test_cli_on_an_all_sram_chip():
    run = lambda *a: CliRunner().invoke(main, list(a))
    r = run("chips", "show", "groq-lpu")
    assert r.exit_code == 0 and "none: an all-SRAM chip" in r.output
    d = json.loads(run("chips", "show", "groq-lpu", "--json").output)
    assert "dram" not in d and d["derived"]["dram_bytes_per_s"] == 0.0
    assert d["derived"]["area_mm2"]["dram_phy"] == 0.0
    assert "none (all SRAM)" in run("chips", "list").output
    r = run("run", "--chip", "groq-lpu", "--model", "llama-3-8b", "--phase", "decode",
            "--prompt", "128")
    # the engine runs an all-SRAM chip (phase 2b); llama-3-8b's embedding alone exceeds one
    # groq-lpu's SRAM: exit 2 naming it
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "'w_embed'" in r.output and "larger than every memory of chip 'groq-lpu'" in r.output


def test_an_all_sram_chip_runs_when_everything_fits():
    """groq-lpu (no DRAM): `run` (schedule, the default there), `gemm` and the library run
    with every tensor on chip and no DRAM byte; what does not fit is refused with advice."""
    from diptych.sim import simulate_gemm
    from diptych.sim.run import run_workload
    r = run_workload("groq-lpu", "phi-3-mini-4k",
                     Scenario.of(phase="decode", batch=1, prompt=256, tp=32, chips=32))
    assert r.execution == "schedule" and r.dram_bytes == 0 and r.seconds > 0
    assert all(a["location"] != "dram" for x in r.layers for a in x.get("residency", ()))
    with pytest.raises(ValueError, match="execution='sum' reads every operand from DRAM"):
        run_workload("groq-lpu", "phi-3-mini-4k",
                     Scenario.of(phase="decode", batch=1, prompt=256, tp=32, chips=32,
                                 execution="sum"))
    st = simulate_gemm(1024, 2048, 2048, load_chip("groq-lpu"))
    assert st.dram_read_bytes == st.dram_write_bytes == 0 and st.bound == "compute"
    with pytest.raises(ValueError, match="more chips .*narrower precision or a smaller batch"):
        simulate_gemm(16384, 16384, 16384, load_chip("groq-lpu"))
    out = CliRunner().invoke(main, ["gemm", "512", "512", "512", "--chip", "groq-lpu"])
    assert out.exit_code == 0 and "no DRAM" in out.output
