"""Every preset loads, and derived peaks equal published figures / hand computations."""

import pytest

from diptych.arch import load_chip, preset_names
from diptych.arch.area import area_breakdown_mm2, die_area_mm2

EXPECTED_PRESETS = {"tpu-v1", "tpu-v4", "tpu-v5e", "trainium2", "h100", "train-2026", "infer-2026"}


def test_all_expected_presets_ship():
    assert EXPECTED_PRESETS <= set(preset_names())


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_preset_loads_and_is_consistent(name):
    chip = load_chip(name)
    assert chip.name == name
    assert chip.default_dtype in chip.peak_ops_per_s
    assert sum(area_breakdown_mm2(chip).values()) == pytest.approx(die_area_mm2(chip))
    assert die_area_mm2(chip) > 0
    if chip.area_budget_mm2:
        assert die_area_mm2(chip) <= chip.area_budget_mm2


# (chip, dtype, published peak ops/s, source)
PUBLISHED_PEAKS = [
    ("tpu-v1", "int8", 92e12, "Jouppi et al. ISCA 2017: 92 TOPS"),
    ("tpu-v4", "bf16", 275e12, "cloud.google.com/tpu/docs/v4: 275 TFLOP/s"),
    ("tpu-v4", "int8", 275e12, "cloud.google.com/tpu/docs/v4: 275 TOPS"),
    ("tpu-v5e", "bf16", 197e12, "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s"),
    ("tpu-v5e", "int8", 394e12, "cloud.google.com/tpu/docs/v5e: 394 TOPS"),
    ("trainium2", "bf16", 667e12, "AWS Neuron docs: 667 TFLOP/s"),
    ("h100", "bf16", 989.4e12, "NVIDIA H100 SXM dense BF16"),
    ("h100", "fp8", 1978.9e12, "NVIDIA H100 SXM dense FP8"),
]


@pytest.mark.parametrize("chip,dtype,published,source", PUBLISHED_PEAKS)
def test_peak_matches_published(chip, dtype, published, source):
    assert load_chip(chip).peak_ops_per_s[dtype] == pytest.approx(published, rel=0.01), source


PUBLISHED_DRAM = [
    ("tpu-v1", 34e9), ("tpu-v4", 1200e9), ("tpu-v5e", 819e9), ("trainium2", 2.9e12),
    ("h100", 3.35e12),
]


@pytest.mark.parametrize("chip,published", PUBLISHED_DRAM)
def test_dram_bandwidth_matches_published(chip, published):
    assert load_chip(chip).dram_bytes_per_s == pytest.approx(published, rel=0.01)


def test_peak_by_hand_tpu_v4():
    c = load_chip("tpu-v4")
    # 2 cores x 4 MXUs x 128 x 128 PEs x 1 MAC x 2 ops x 1.05 GHz
    assert c.peak_ops_per_s["bf16"] == 2 * 4 * 128 * 128 * 1 * 2 * 1.05e9
    # 4 stacks x 8 channels x 2 pseudo-channels x 64 bits x 2.34375 Gb/s / 8
    assert c.dram_bytes_per_s == 4 * 8 * 2 * 64 * 2.34375e9 / 8


def test_sram_bytes_tpu_v1():
    assert load_chip("tpu-v1").sram_bytes == 28 * 2**20  # 24 MiB UB + 4 MiB accumulators


def test_study_chips_share_area_budget():
    a, b = load_chip("train-2026"), load_chip("infer-2026")
    assert a.area_budget_mm2 == b.area_budget_mm2 > 0
    # The inference part has more DRAM bandwidth per peak op and more SRAM; the training part
    # more BF16 compute and more interconnect.
    assert (b.dram_bytes_per_s / b.peak_ops_per_s["fp8"]) > (a.dram_bytes_per_s / a.peak_ops_per_s["fp8"])
    assert b.sram_bytes > a.sram_bytes
    assert a.peak_ops_per_s["bf16"] > b.peak_ops_per_s["bf16"]
    assert a.interconnect.bytes_per_s_per_direction > b.interconnect.bytes_per_s_per_direction


def test_unsupported_dtype_has_no_peak():
    c = load_chip("tpu-v1")
    assert "bf16" not in c.peak_ops_per_s
    assert c.peak_macs_per_cycle("bf16") == 0
