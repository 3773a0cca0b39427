"""Calibrate the h100 preset's energy per DRAM bit and per MAC on measured power (issue 21
item 1: component calibration); prints the coefficients ``arch/chips/h100.toml`` carries.

    python benchmarks/calibrate_h100_power.py      # ~5 s warm

The measurements (``benchmarks/gpu/h200-2026-12-04/``, taken with ``benchmarks/gpu/*.py`` on
one H200 SXM: the GH100 die of the H100 SXM, 132 SMs, the same 700 W limit, with HBM3e in
place of HBM3; docs/validation-published.md, "Measured on Hopper") and what each sets:

* ``pj_per_dram_bit``: a batch-1 BF16 GEMV streaming an 8 GiB matrix back to back (decode's
  weight stream) at 4.17 TB/s and 631 W, clock not limited (1980 MHz), against the 122 W the
  same board drew idle with a CUDA context: the watts above idle over the bits moved, i.e.
  the whole path of a DRAM bit to the SMs (HBM, PHY, controller, L2, crossbar) at the
  operating point. diptych's GEMV of the same shape must spend the same dynamic energy
  (its energy above ``static_w`` × time) per DRAM bit. [assumption] HBM3e's energy per bit
  is HBM3's (the die's path is the same).
* ``pj_per_mac`` (bf16, fp8): 8192³ GEMMs with normally distributed inputs (training data;
  constant or low-entropy inputs draw less), back to back for seconds, held by the power
  limit at 665-670 TFLOPS BF16 and 1252-1265 TFLOPS FP8 (per-tensor scales, fast
  accumulation) at 691 W: diptych's GEMM of that shape held to the 700 W TDP
  (:func:`validate_power.capped_tflops`, the chip's V/f curve) must run at their mean. int8
  and fp16 take the delivery of their operand width, fp32 twice the 16-bit one (as before:
  the datapath energies of ``[energy]``'s comment plus the delivery the fit gives).
* ``[attention] pj_per_mac``: cuDNN's fused attention, forward and backward back to back
  (Llama-3-70B's heads at TP4: 16 of 128, 8k tokens, causal), drew 691 W, power-limited at
  1.76 GHz: diptych's kernel of that shape, at that clock, must draw the same (the other
  seven measured kernels check it: ``validate_measured_hopper.py``).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys

from validate_measured_hopper import attention_power_w, gemv_pj_per_bit, load
from validate_power import capped_tflops

from diptych.arch import load_chip

#: the MAC datapath energies (pJ) of the h100 ``[energy]`` comment (TPUv4i Table 2 × 0.7)
DATAPATH = {"int8": 0.07, "fp8": 0.14, "bf16": 0.41, "fp16": 0.50, "fp32": 1.18}
SHAPE = 8192
#: the attention case that calibrates ``[attention] pj_per_mac`` (the others check it)
ATTENTION_CASE = "llama-3-70b TP4"


def measured() -> dict:
    """The calibration targets read from :data:`validate_measured_hopper.DATA`."""
    gem = load("gemms.json")
    sus = load("sustain.json")
    acc = load("accum_power.json")
    st = load("stream_power.json")
    idle = gem["meta"]["idle"]["energy_power_w"]
    gemv = st["gemv_b1_8gib"]
    out = {"idle_w": idle, "tdp_w": gem["meta"]["power_limit_w"],
           "gemv_w": gemv["energy_power_w"], "gemv_tb_per_s": gemv["tb_per_s"],
           "pj_per_bit": (gemv["energy_power_w"] - idle) / (gemv["tb_per_s"] * 8e12) * 1e12}
    for dt in ("bf16", "fp8"):
        runs = [sus[dt]["tflops"]] + [b["sustained_tflops"] for b in acc["burst"]
                                      if b["dtype"] == dt and b["m"] == b["n"] == SHAPE]
        out[f"{dt}_tflops"] = statistics.fmean(runs)
        out[f"{dt}_runs"] = runs
    att = load("attention_power.json")["attention_power"]
    out["attention"] = next(a for a in att if a["backend"] == "cudnn"
                            and a["case"] == ATTENTION_CASE)
    return out


def with_energy(chip, **kw):
    return dataclasses.replace(chip, energy=dataclasses.replace(chip.energy, **kw))


def macs_table(chip, bf16: float, fp8: float) -> dict:
    d16, d8 = bf16 - DATAPATH["bf16"], fp8 - DATAPATH["fp8"]
    table = {"int8": DATAPATH["int8"] + d8, "fp8": fp8, "bf16": bf16,
             "fp16": DATAPATH["fp16"] + d16, "fp32": DATAPATH["fp32"] + 2 * d16}
    return dataclasses.replace(chip.energy.pj_per_mac, **{k: round(v, 3) for k, v in table.items()})


def bisect(f, lo: float, hi: float, target: float, rising: bool = True, n: int = 50) -> float:
    for _ in range(n):
        mid = 0.5 * (lo + hi)
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def calibrate(chip=None) -> tuple[dict, object]:
    """(the measured targets, ``chip`` with the calibrated ``[energy]``)."""
    m = measured()
    chip = chip or load_chip("h100")
    bf16, fp8 = chip.energy.pj_per_mac.bf16, chip.energy.pj_per_mac.fp8
    for _ in range(3):      # the GEMV's MACs and the GEMMs' DRAM bits couple the two, weakly
        base = with_energy(chip, pj_per_mac=macs_table(chip, bf16, fp8))
        bit = bisect(lambda b: gemv_pj_per_bit(with_energy(base, pj_per_dram_bit=b)),
                     0.1, 60.0, m["pj_per_bit"])
        bit = round(bit, 2)
        cur = with_energy(base, pj_per_dram_bit=bit)

        def rate(dt, pj):
            c = with_energy(cur, pj_per_mac=macs_table(cur, pj if dt == "bf16" else bf16,
                                                        pj if dt == "fp8" else fp8))
            return capped_tflops(c, SHAPE, SHAPE, SHAPE, dt, m["tdp_w"])[0]
        bf16 = bisect(lambda p: rate("bf16", p), 0.2, 5.0, m["bf16_tflops"], rising=False)
        fp8 = bisect(lambda p: rate("fp8", p), 0.15, 5.0, m["fp8_tflops"], rising=False)
    out = with_energy(chip, pj_per_dram_bit=bit, pj_per_mac=macs_table(chip, bf16, fp8))
    # the fused attention's energy per MAC beyond the GEMMs' (cuDNN, the calibration case)
    case = m["attention"]

    def watts(pj):
        c = dataclasses.replace(out, attention=dataclasses.replace(out.attention, pj_per_mac=pj))
        return attention_power_w(c, case["seq"], case["q_heads"], case["sm_mhz_mean"] / 1e3)[0]
    pj = round(bisect(watts, 0.0, 10.0, case["energy_power_w"]), 3)
    out = dataclasses.replace(out, attention=dataclasses.replace(out.attention, pj_per_mac=pj))
    return m, out


def main() -> int:
    m, chip = calibrate()
    print("measured (benchmarks/gpu/h200-2026-12-04):")
    print(f"  idle {m['idle_w']:.1f} W; GEMV b1 {m['gemv_tb_per_s']:.3f} TB/s at "
          f"{m['gemv_w']:.1f} W -> {m['pj_per_bit']:.2f} pJ per bit above idle")
    for dt in ("bf16", "fp8"):
        print(f"  {SHAPE}^3 {dt.upper()} sustained at the {m['tdp_w']:.0f} W limit: "
              f"{m[f'{dt}_tflops']:.1f} TFLOPS (runs {', '.join(f'{x:.1f}' for x in m[f'{dt}_runs'])})")
    e = chip.energy
    print("h100 [energy]:")
    print(f"  pj_per_dram_bit = {e.pj_per_dram_bit}")
    print("  pj_per_mac = { " + ", ".join(f"{k} = {getattr(e.pj_per_mac, k)}"
                                          for k in ("int8", "fp8", "bf16", "fp16", "fp32")) + " }")
    for dt in ("bf16", "fp8"):
        tf, f = capped_tflops(chip, SHAPE, SHAPE, SHAPE, dt, chip.tdp_w)
        print(f"  check: {SHAPE}^3 {dt.upper()} at {chip.tdp_w:.0f} W: {tf:.1f} TFLOPS at {f:.3f} GHz")
    print(f"  check: GEMV {gemv_pj_per_bit(chip):.2f} pJ per DRAM bit above static")
    a = m["attention"]
    w, tf = attention_power_w(chip, a["seq"], a["q_heads"], a["sm_mhz_mean"] / 1e3)
    print(f"h100 [attention]:\n  pj_per_mac = {chip.attention.pj_per_mac}")
    print(f"  check: cuDNN fwd+bwd, {a['case']}, at the measured {a['sm_mhz_mean'] / 1e3:.3f} "
          f"GHz: {w:.1f} W (measured {a['energy_power_w']:.1f} W), {tf:.0f} TFLOPS "
          f"(measured {a['fwd_bwd_tflops']:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
