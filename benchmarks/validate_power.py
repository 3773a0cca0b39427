"""Power of known component workloads on the h100 and tpu-v4 presets against public measurements
(issue 21 item 1, the check before any coefficient moves); prints a Markdown table.

    python benchmarks/validate_power.py [--out FILE]

Each row is a component workload whose board power has a public measurement: a large GEMM
(power-limited at the 700 W TDP on the real part), HBM streaming and memory-bound decode, the
idle floor. diptych's figure is its own energy model (``[energy]`` of arch/chips/h100.toml)
over the simulated time, at the nominal 1.83 GHz. These rows only check; the table in
docs/validation-published.md, "Power", says what they show.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diptych.arch import load_chip
from diptych.sim.api import simulate
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm, VectorOp

#: (case, measured, source, the figure a ratio is taken against or a (low, high) range, or
#: None) of each row, in the order of :func:`rows`.
PUBLISHED = (
    ("8192³ BF16 GEMM (cuBLAS burn)", "≈ 700 W (power-limited; ~730 TFLOPS sustained)",
     "huggingface/gpu-fryer README (730 TF BF16, 1530 TF FP8 on H100 80GB); FP32 SGEMM "
     "burn already 580–650 W (gpu-fryer issue #4)", 700.0),
    ("8192³ FP8 GEMM (cuBLAS burn)", "near 700 W (\"likely less\" than BF16; 1530 TFLOPS "
     "on constant data: not a calibration, see the capped GEMMs below)",
     "huggingface/gpu-fryer README (its FP8 inputs saturate to +448: src/main.rs)", 700.0),
    ("HBM streaming copy, 2 GiB", "no direct figure; 3–4 pJ/bit × 3.35 TB/s ≈ 80–110 W of "
     "DRAM above the floor", "O'Connor et al., MICRO'17 (HBM2 ~3.9 pJ/bit) [M]", None),
    ("Llama-3-8B decode, batch 1, 2k context", "137–300 W (H200, decode of several models, "
     "no power cap binds)", "Ma et al., arXiv 2605.11999 (abstract)", (137.0, 300.0)),
    ("Llama-3-8B decode, batch 64, 2k context", "267–680 W (H100 SXM, vLLM, batch 1–128) [S]",
     "vendor page, low reliability", (267.0, 680.0)),
    ("idle, memory allocated (P0)", "140–145 W", "wilicc/gpu-burn issue #114 (nvidia-smi)",
     142.5),
)


def rows() -> list[tuple[float, str]]:
    """diptych's watts and how it got them, per row of :data:`PUBLISHED`."""
    chip = load_chip("h100")
    out = []
    for dt in ("bf16", "fp8"):
        st = simulate(Gemm(name="g", m=8192, k=8192, n=8192, a_dtype=dt, b_dtype=dt,
                           c_dtype="bf16"), chip)
        tf, f = capped_tflops(chip, 8192, 8192, 8192, dt, chip.tdp_w)
        out.append((st.energy_j / st.seconds,
                    f"{2 * 8192 ** 3 / st.seconds / 1e12:.0f} TFLOPS at 1.83 GHz; held to "
                    f"{chip.tdp_w:.0f} W: {tf:.0f} TFLOPS at {f:.2f} GHz"))
    st = simulate(VectorOp(name="copy", kind="copy", elements=2 ** 29, ops_per_element=0.0,
                           read_bytes=2.0 ** 30, write_bytes=2.0 ** 30), chip)
    out.append((st.energy_j / st.seconds, f"{2 ** 31 / st.seconds / 1e12:.2f} TB/s"))
    for b in (1, 64):
        r = run_workload(chip, "llama-3-8b", Scenario(phase="decode", batch=b, prompt=2048,
                                                      gen=128))
        out.append((r.to_dict()["power_w_per_chip"], f"TPOT {r.seconds * 1e3:.2f} ms"))
    out.append((chip.energy.static_w, "[energy] static_w"))
    return out


#: GEMMs measured at a known power cap: (M, N, K as published, dtype, cap W, measured TFLOPS,
#: source). FBGEMM's are one kernel family at a 500 W cap, where both formats are deeply
#: clock-limited (their ratio is the energy per MAC's); MAMF's are the best shape of a search at
#: the default 700 W (short bursts, randn inputs), each dtype at its own best shape.
CAPPED = (
    (8192, 8192, 8192, "bf16", 500.0, 585.23, "pytorch/FBGEMM#2546 (H100, 500 W, torch bf16)"),
    (65536, 8192, 7168, "bf16", 500.0, 575.12, "pytorch/FBGEMM#2546"),
    (65536, 3584, 8192, "bf16", 500.0, 546.31, "pytorch/FBGEMM#2546"),
    (8192, 8192, 8192, "fp8", 500.0, 1125.51, "pytorch/FBGEMM#2546 (FP8 row-wise GEMM only)"),
    (65536, 8192, 7168, "fp8", 500.0, 1082.75, "pytorch/FBGEMM#2546"),
    (65536, 3584, 8192, "fp8", 500.0, 1141.38, "pytorch/FBGEMM#2546"),
    (2048, 2048, 13312, "bf16", 700.0, 794.5, "stas00/ml-engineering compute/accelerator "
     "README, MAMF table (H100 SXM, torch 2.7.0+cu126, best of a shape search)"),
    (1024, 9216, 14336, "fp8", 700.0, 1402.6, "stas00/ml-engineering MAMF table "
     "(torch._scaled_mm)"),
)


#: TPU v4 (arch/chips/tpu-v4.toml): (case, measured, source, figure or (low, high) range).
#: Google publishes measured power, not a TDP; no power figure for TPU v5e, v5p, Trillium or
#: the Groq LPU was found (docs/validation-published.md, "Power of component workloads").
TPU_V4 = (
    ("idle (ASIC + HBM)", "90 W", "cloud.google.com/tpu/docs/v4 (\"measured min/mean/max power "
     "90/170/192 W\"); Jouppi et al. ISCA 2023 Table 4 (idle 90 W) [C]", 90.0),
    ("8192³ BF16 GEMM (MXUs near peak)", "192–206 W at full load: production max 192 W; "
     "MLPerf Training 2.0 BERT 197 W, ResNet-50 206 W per chip at 64 chips",
     "Cloud docs (192 W); ISCA 2023 Table 6 [C]", (192.0, 206.0)),
    ("GPT-3 175B training step, TP8, seq 2048 (one node)", "121–206 W: production "
     "workloads 121/170/192 W min/mean/max; MLPerf training 197–206 W",
     "Cloud docs; ISCA 2023 Tables 4 and 6 [C]", (121.0, 206.0)),
)


def tpu_rows() -> list[tuple[float, str]]:
    """diptych's watts on tpu-v4, per row of :data:`TPU_V4`."""
    chip = load_chip("tpu-v4")
    st = simulate(Gemm(name="g", m=8192, k=8192, n=8192, a_dtype="bf16", b_dtype="bf16",
                       c_dtype="bf16"), chip)
    r = run_workload(chip, "gpt3-175b", Scenario.of(phase="train", batch=8, seq=2048, tp=8))
    return [(chip.energy.static_w, "[energy] static_w"),
            (st.energy_j / st.seconds,
             f"{2 * 8192 ** 3 / st.seconds / 1e12:.0f} TFLOPS at {chip.clock_ghz} GHz"),
            (r.to_dict()["power_w_per_chip"], f"MFU {r.to_dict()['mfu']:.2f}")]


def _ratio(w: float, ref) -> str:
    if isinstance(ref, tuple):
        return "in range" if ref[0] <= w <= ref[1] else "outside"
    return "—" if ref is None else f"{w / ref:.2f}"


def tpu_table() -> str:
    """The Markdown table of :data:`TPU_V4`."""
    lines = ["| component workload (tpu-v4) | measured | diptych | ratio | source |",
             "|---|---|---|---|---|"]
    for (case, measured, src, ref), (w, how) in zip(TPU_V4, tpu_rows()):
        lines.append(f"| {case} | {measured} | {w:.0f} W ({how}) | {_ratio(w, ref)} | {src} |")
    return "\n".join(lines) + "\n"


def capped_tflops(chip, m: int, n: int, k: int, dtype: str, cap_w: float) -> tuple[float, float]:
    """(TFLOPS, clock GHz) of one GEMM on ``chip`` held to ``cap_w``: the GEMM simulated at the
    nominal clock, its power split into core (MACs, SRAM, vector: V²·f), I/O (DRAM, NoC, D2D:
    ∝ f) and static, and run at the clock :func:`~diptych.arch.power.sustained_clock` finds
    (a compute-bound GEMM's time ∝ 1/clock, as that function assumes)."""
    import dataclasses

    from diptych.arch.power import PowerSplit, sustained_clock
    c = dataclasses.replace(chip, tdp_w=cap_w)
    st = simulate(Gemm(name="g", m=m, k=k, n=n, a_dtype=dtype, b_dtype=dtype, c_dtype="bf16"),
                  c)
    eb, t = st.energy_breakdown, st.seconds
    split = PowerSplit((eb["mac"] + eb["sram"] + eb.get("vector", 0.0)) / t,
                       (eb["dram"] + eb.get("noc", 0.0) + eb.get("d2d", 0.0)) / t,
                       eb["static"] / t)
    f = sustained_clock(c, st.energy_j, t, split=split)
    return 2.0 * m * n * k / t / 1e12 * f / chip.clock_ghz, f


def capped_table() -> str:
    """The Markdown table of :data:`CAPPED`: measured against diptych under the same cap."""
    chip = load_chip("h100")
    lines = ["| GEMM M×N×K (h100) | dtype | power cap | measured | diptych | ratio | source |",
             "|---|---|---|---|---|---|---|"]
    for m, n, k, dt, cap, tf, src in CAPPED:
        got, f = capped_tflops(chip, m, n, k, dt, cap)
        lines.append(f"| {m}×{n}×{k} | {dt.upper()} | {cap:.0f} W | {tf:,.0f} TFLOPS | "
                     f"{got:,.0f} TFLOPS at {f:.2f} GHz | {got / tf:.2f} | {src} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    args = ap.parse_args(argv)
    lines = ["| component workload (h100) | measured | diptych | ratio | source |",
             "|---|---|---|---|---|"]
    for (case, measured, src, ref), (w, how) in zip(PUBLISHED, rows()):
        lines.append(f"| {case} | {measured} | {w:.0f} W ({how}) | {_ratio(w, ref)} | {src} |")
    table = "\n".join(lines) + "\n\n" + capped_table() + "\n" + tpu_table()
    print(table, end="")
    if args.out:
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
