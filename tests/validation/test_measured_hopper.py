"""The h100 preset against kernels measured on a real GH100 (an H200 SXM; issue 21 component
checks): benchmarks/validate_measured_hopper.py holds the measurements' reading and prints the
tables (docs/validation-published.md, "Measured on Hopper"). Two 8192³ GEMMs and one GEMV
calibrate the preset's energies and the fast-accumulation pairs its split accumulator; these
tests check what was not fitted: the system rows' other GEMM shapes, each held by the power
limit on its own."""

from __future__ import annotations

import pathlib
import statistics
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import validate_measured_hopper as vm  # noqa: E402

from diptych.arch import load_chip  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return vm.gemm_rows(load_chip("h100"))


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gemm_shapes_held_by_the_power_limit_match_their_measured_rates(rows, dtype):
    """Every measured shape of one format (67 BF16 of three kinds, 53 FP8), each at the clock
    the 700 W limit sustains for it alone: the median within 3 % of the measured sustained
    rate and the middle half within 6 %."""
    r = sorted(x["diptych"] / x["tflops"] for x in rows if x["dtype"] == dtype)
    assert len(r) >= 50
    assert statistics.median(r) == pytest.approx(1.0, abs=0.03)
    assert 0.94 <= r[len(r) // 4] and r[(3 * len(r)) // 4] <= 1.06


def test_split_accumulator_costs_what_the_measured_pairs_do():
    """The preset's overlap is set on the median of the measured pairs' cycle ratios; the
    model's spread over the same 53 shapes stays inside the measured quartiles."""
    text = vm.accum_table(load_chip("h100"))
    med = {}
    for line in text.splitlines():
        if line.startswith("| measured, time × clock") or line.startswith("| diptych"):
            med[line.split("|")[1].strip()[:8]] = float(line.split("|")[2].split()[0])
    assert med["diptych "] == pytest.approx(med["measured"], abs=0.01)


@pytest.mark.parametrize("case", ["llama-3-8b TP1", "grok-1 TP4"])
def test_fused_attention_draws_the_measured_power(case):
    """``[attention] pj_per_mac`` is set on cuDNN's Llama-3-70B kernel; the other two 8k-token
    cuDNN kernels, each at the clock the GH100 held it at, draw their measured power within
    8 %."""
    att = vm.load("attention_power.json")["attention_power"]
    m = next(a for a in att if a["case"] == case and a["backend"] == "cudnn")
    w, _ = vm.attention_power_w(load_chip("h100"), m["seq"], m["q_heads"],
                                m["sm_mhz_mean"] / 1e3)
    assert w == pytest.approx(m["energy_power_w"], rel=0.08)


def test_the_h100_energies_are_what_the_calibration_gives():
    """arch/chips/h100.toml's [energy] and [attention] energies are the ones
    benchmarks/calibrate_h100_power.py solves from the measurements on this engine (to the
    digits the preset carries): a change to the engine that moves a GEMM's, a GEMV's or the
    attention kernel's time or energy must recalibrate them, not leave them stale."""
    import calibrate_h100_power as cal

    _, got = cal.calibrate()
    want = load_chip("h100")
    assert got.energy.pj_per_dram_bit == pytest.approx(want.energy.pj_per_dram_bit, abs=0.011)
    for dt in ("int8", "fp8", "bf16", "fp16", "fp32"):
        assert getattr(got.energy.pj_per_mac, dt) == pytest.approx(
            getattr(want.energy.pj_per_mac, dt), abs=0.0011), dt
    assert got.attention.pj_per_mac == pytest.approx(want.attention.pj_per_mac, abs=0.011)
