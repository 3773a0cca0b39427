"""Area and energy totals against hand sums from the raw preset TOML files."""

from __future__ import annotations

import math
import tomllib
from importlib import resources

import pytest

from diptych.arch import load_chip, preset_names
from diptych.arch.area import (AREA_BLOCKS, area_breakdown_mm2, area_shares, die_area_mm2,
                               mac_area_ratio)
from diptych.arch.energy import ENERGY_BLOCKS, energy_breakdown_j, energy_j, power_check


def raw(name: str) -> dict:
    return tomllib.loads(resources.files("diptych.arch.chips").joinpath(f"{name}.toml").read_text())


def hand_area(d: dict) -> float:
    """The die-area formula written out once more, from the TOML dict alone."""
    core, area = d["core"], d["area"]
    macs = core["array"]["macs_per_pe_per_cycle"]
    pe = max(n * area["mm2_per_mac"].get(dt, 0.0) for dt, n in macs.items() if n > 0)
    pes = d["tensor_cores"] * core["arrays"] * core["array"]["rows"] * core["array"]["cols"]
    sp = core["scratchpad"]
    sram_mib = (d["tensor_cores"] * (sp["capacity_mib"] + sp.get("accumulator_mib", 0.0))
                + d.get("shared_buffer", {}).get("capacity_mib", 0.0))
    # spare cores ([die]): whole tensor cores, each its PEs, scratchpad and lanes
    spares = d.get("die", {}).get("spare_cores", 0)
    per_core = (pes * pe + d["tensor_cores"] * (sp["capacity_mib"] + sp.get("accumulator_mib", 0.0))
                * area["mm2_per_mib_sram"] + d["tensor_cores"] * core["vector"]["lanes"]
                * area["mm2_per_vector_lane"]) / d["tensor_cores"]
    # D2D PHYs ([package]): each interface's shoreline (GB/s ÷ GB/s per mm) on both its dies;
    # compute dies in a row have n - 1 interfaces, with IO dies one per compute die
    pkg = d.get("package", {})
    n, io = pkg.get("compute_dies", 1), pkg.get("io_dies", 0)
    ifaces = (n if io else n - 1) if n + io > 1 else 0
    d2d = (2 * ifaces * pkg.get("d2d_gb_per_s", 0.0) / pkg.get("d2d_gb_per_s_per_mm", 658.0)
           * pkg.get("d2d_mm2_per_mm", 1.0))
    return (pes * pe + sram_mib * area["mm2_per_mib_sram"]
            + d["tensor_cores"] * core["vector"]["lanes"] * area["mm2_per_vector_lane"]
            + d.get("dram", {}).get("stacks", 0) * area["mm2_per_hbm_phy"]
            + d["interconnect"]["links"] * area["mm2_per_link"] + area["fixed_overhead_mm2"]
            + spares * per_core + d2d)


@pytest.mark.parametrize("name", preset_names())
def test_die_area_equals_hand_sum(name):
    chip = load_chip(name)
    assert die_area_mm2(chip) == pytest.approx(hand_area(raw(name)), rel=1e-12)
    parts = area_breakdown_mm2(chip)
    assert tuple(parts) == AREA_BLOCKS
    assert sum(area_shares(chip).values()) == pytest.approx(1.0)


def test_infer_area_by_hand():
    # infer-2026: 8 cores x 8 arrays x 128x128 PEs sized by mxfp8 and mxfp6 (1 MAC x 0.341e-3
    # mm2, the largest of int4 2 x 0.12e-3, int8 0.26e-3, fp8 0.272e-3, bf16 0.25 x 0.6e-3,
    # mxfp8 and mxfp6 0.341e-3, mxfp4/nvfp4 2 x 0.119e-3)
    parts = area_breakdown_mm2(load_chip("infer-2026"))
    assert parts["arrays"] == pytest.approx(8 * 8 * 128 * 128 * 0.341e-3)
    assert parts["sram"] == pytest.approx(8 * 64 * 0.35)
    assert parts["dram_phy"] == pytest.approx(8 * 16.2)


def test_shared_budget_of_the_headline_pair():
    train, infer = load_chip("train-2026"), load_chip("infer-2026")
    assert train.area_budget_mm2 == infer.area_budget_mm2 > 0
    for c in (train, infer):
        assert die_area_mm2(c) <= c.area_budget_mm2


def test_mac_area_ratio():
    chip = load_chip("infer-2026")
    t = raw("infer-2026")["area"]["mm2_per_mac"]
    assert mac_area_ratio(chip, "int8", "bf16") == pytest.approx(t["int8"] / t["bf16"])
    with pytest.raises(ValueError, match="mm2_per_mac"):
        mac_area_ratio(load_chip("tpu-v1"), "int8", "fp32")


@pytest.mark.parametrize("name", ["train-2026", "infer-2026", "h100"])
def test_energy_equals_hand_sum(name):
    chip = load_chip(name)
    e = raw(name)["energy"]
    dt = chip.default_dtype
    counts = dict(macs={dt: 3.0e12}, sram_bytes=5.0e10, dram_bytes=2.0e10, link_bytes=1.0e9,
                  vector_ops=4.0e9, seconds=0.02)
    hand = (3.0e12 * e["pj_per_mac"][dt] + 5.0e10 * e["pj_per_sram_byte"]
            + 2.0e10 * 8 * e["pj_per_dram_bit"] + 1.0e9 * 8 * e["pj_per_link_bit"]
            + 4.0e9 * e["pj_per_vector_op"]) * 1e-12 + 0.02 * e.get("static_w", 0.0)
    parts = energy_breakdown_j(chip, **counts)
    assert tuple(parts) == ENERGY_BLOCKS
    assert energy_j(chip, **counts) == pytest.approx(hand, rel=1e-12)
    assert parts["dram"] == pytest.approx(2.0e10 * 8 * e["pj_per_dram_bit"] * 1e-12)


def test_energy_rejects_bad_counts():
    chip = load_chip("infer-2026")
    with pytest.raises(ValueError, match="sram_bytes must be a non-negative number, not -1"):
        energy_breakdown_j(chip, sram_bytes=-1)
    with pytest.raises(ValueError, match="macs key must be one of"):
        energy_breakdown_j(chip, macs={"int3": 5})
    with pytest.raises(ValueError, match="no fp32 datapath"):
        energy_breakdown_j(chip, macs={"fp32": 5})
    with pytest.raises(ValueError, match="seconds must be > 0"):
        power_check(chip, 1.0, 0)


def test_power_check_flags_tdp():
    chip = load_chip("infer-2026")
    ok = power_check(chip, energy_j=chip.tdp_w * 0.5, seconds=1.0)
    hot = power_check(chip, energy_j=chip.tdp_w * 2.0, seconds=0.5)
    assert not ok.exceeds_tdp and ok.power_w == pytest.approx(chip.tdp_w / 2)
    assert hot.exceeds_tdp and hot.tdp_fraction == pytest.approx(4.0)
    assert "EXCEEDS TDP" in hot.describe()
    assert math.isclose(ok.tdp_fraction, 0.5)


# ---- INT8 : BF16 MAC area against the RTL (Yosys generic cells of rtl/'s PEs) ---------------


@pytest.fixture(scope="module")
def rtl_cells():
    pytest.importorskip("pyosys", reason="full Yosys (pyosys, the rtl extra) synthesises the PEs")
    from diptych.rtl.area import synth_stats
    from diptych.rtl.pe import Dot4OsPe, Mac, OsPe

    blocks = {}
    for dt in ("int8", "bf16"):  # the blocks `diptych rtl area` reports as mac and pe_os
        blocks[f"{dt}_mac"], blocks[f"{dt}_pe_os"] = Mac(dt), OsPe(dt)
    blocks["dot4_pe_os"] = Dot4OsPe()          # the FP8 dot-product PE: 4 FP8 MACs per cycle
    return {k: v.cells for k, v in synth_stats(blocks).items()}


@pytest.mark.parametrize("name", ["train-2026", "infer-2026", "h100", "tpu-v4", "tpu-v5e"])
def test_int8_bf16_mac_area_ratio_matches_rtl(name, rtl_cells):
    preset = mac_area_ratio(load_chip(name), "int8", "bf16")
    for block in ("mac", "pe_os"):
        rtl = rtl_cells[f"int8_{block}"] / rtl_cells[f"bf16_{block}"]
        # generic cells are not placed area: agreement within 25 % is what the model claims
        assert 0.75 <= preset / rtl <= 1.0 / 0.75, (block, preset, rtl)


@pytest.mark.parametrize("name", ["train-2026", "infer-2026", "h100", "trainium2"])
def test_fp8_bf16_mac_area_ratio_matches_the_dot4_pe(name, rtl_cells):
    """The presets' fp8 coefficient is the dot4 PE's cells per FP8 MAC over a dedicated BF16
    PE's (OS PEs, docs/dse.md 1.1); 10 %: the presets round it, and a Yosys release may move
    the counts by a few percent."""
    preset = mac_area_ratio(load_chip(name), "fp8", "bf16")
    rtl = rtl_cells["dot4_pe_os"] / 4 / rtl_cells["bf16_pe_os"]
    assert 0.9 <= preset / rtl <= 1 / 0.9, (preset, rtl)


@pytest.mark.slow
@pytest.mark.parametrize("name, dtype", [("train-2026", "mxfp8"), ("infer-2026", "mxfp8"),
                                         ("infer-2026", "mxfp6")])
def test_mx_bf16_mac_area_ratio_matches_the_mxdot4_pe(name, dtype, rtl_cells):
    """The presets' mxfp8 and mxfp6 coefficients are the block-scaled mxdot4 PE's cells per MAC
    (it does MXFP8, MXFP6 and MXFP4 at 4 MACs per cycle) over a dedicated BF16 PE's (OS PEs,
    docs/dse.md 1.2), within 10 % (slow tier: one more Yosys synthesis, ≈ 5 s)."""
    from diptych.rtl.area import synth_stats
    from diptych.rtl.pe import OsPe

    mx = synth_stats({"mxdot4_pe_os": OsPe("mxdot4")})["mxdot4_pe_os"].cells
    preset = mac_area_ratio(load_chip(name), dtype, "bf16")
    rtl = mx / 4 / rtl_cells["bf16_pe_os"]
    assert 0.9 <= preset / rtl <= 1 / 0.9, (preset, rtl)


@pytest.fixture(scope="module")
def fp4_pe_cells():
    """Yosys cells of the fp4dot8 OS PE (one synthesis for every preset and format below)."""
    pytest.importorskip("pyosys", reason="full Yosys (pyosys, the rtl extra) synthesises the PEs")
    from diptych.rtl.area import synth_stats
    from diptych.rtl.pe import OsPe

    return synth_stats({"fp4dot8_pe_os": OsPe("fp4dot8")})["fp4dot8_pe_os"].cells


@pytest.mark.slow
@pytest.mark.parametrize("name, dtype", [("infer-2026", "mxfp4"), ("infer-2026", "nvfp4")])
def test_fp4_bf16_mac_area_ratio_matches_the_fp4dot8_pe(name, dtype, rtl_cells, fp4_pe_cells):
    """The presets' mxfp4 and nvfp4 coefficients are the fp4dot8 PE's cells per MAC (MXFP4 and
    NVFP4 at 8 MACs per cycle, twice the mxdot4 PE's rate) over a dedicated BF16 PE's (OS PEs,
    docs/dse.md 1.3), within 10 % (slow tier: one more Yosys synthesis, ≈ 5 s)."""
    preset = mac_area_ratio(load_chip(name), dtype, "bf16")
    rtl = fp4_pe_cells / 8 / rtl_cells["bf16_pe_os"]
    assert 0.9 <= preset / rtl <= 1 / 0.9, (preset, rtl)


# ---- the engine's energy equals this model applied to the engine's own event counts -----------


@pytest.mark.parametrize("chip_name", ["infer-2026", "train-2026", "h100"])
def test_engine_energy_is_the_energy_model_of_its_counts(chip_name):
    from diptych.sim import simulate
    from diptych.workloads.ops import Gemm, VectorOp

    chip = load_chip(chip_name)
    dt = chip.default_dtype
    g = simulate(Gemm(name="g", m=256, k=512, n=384, a_dtype=dt, b_dtype=dt, c_dtype=dt), chip)
    want = energy_breakdown_j(chip, macs={g.mapping["dtype"]: g.macs},
                              sram_bytes=g.sram_read_bytes + g.sram_write_bytes,
                              dram_bytes=g.dram_read_bytes + g.dram_write_bytes,
                              seconds=g.seconds,
                              noc_bytes=(g.dram_read_bytes + g.dram_write_bytes
                                         + g.shared_buffer_read_bytes))
    assert g.energy_j == pytest.approx(sum(want.values()), rel=1e-12)
    assert set(g.energy_breakdown) == set(want) - {"link"}   # ops use no links
    for block, joules in g.energy_breakdown.items():
        assert joules == pytest.approx(want[block], rel=1e-12, abs=1e-18)
    v = simulate(VectorOp(name="v", kind="softmax", elements=1 << 16, ops_per_element=5.0,
                          read_bytes=2.0 * (1 << 16), write_bytes=2.0 * (1 << 16)), chip)
    want = energy_breakdown_j(chip, vector_ops=v.flops,
                              sram_bytes=v.sram_read_bytes + v.sram_write_bytes,
                              dram_bytes=v.dram_read_bytes + v.dram_write_bytes,
                              seconds=v.seconds,
                              noc_bytes=v.dram_read_bytes + v.dram_write_bytes)
    assert v.energy_j == pytest.approx(sum(want.values()), rel=1e-12)
    assert set(v.energy_breakdown) == set(want) - {"link"}
