"""Power of known component workloads on the h100 preset against public measurements
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
    ("8192³ FP8 GEMM (cuBLAS burn)", "near 700 W (\"likely less\" than BF16; 1530 TFLOPS)",
     "huggingface/gpu-fryer README", 700.0),
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
        out.append((st.energy_j / st.seconds,
                    f"{2 * 8192 ** 3 / st.seconds / 1e12:.0f} TFLOPS at 1.83 GHz"))
    st = simulate(VectorOp(name="copy", kind="copy", elements=2 ** 29, ops_per_element=0.0,
                           read_bytes=2.0 ** 30, write_bytes=2.0 ** 30), chip)
    out.append((st.energy_j / st.seconds, f"{2 ** 31 / st.seconds / 1e12:.2f} TB/s"))
    for b in (1, 64):
        r = run_workload(chip, "llama-3-8b", Scenario(phase="decode", batch=b, prompt=2048,
                                                      gen=128))
        out.append((r.to_dict()["power_w_per_chip"], f"TPOT {r.seconds * 1e3:.2f} ms"))
    out.append((chip.energy.static_w, "[energy] static_w"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    args = ap.parse_args(argv)
    lines = ["| component workload (h100) | measured | diptych | ratio | source |",
             "|---|---|---|---|---|"]
    for (case, measured, src, ref), (w, how) in zip(PUBLISHED, rows()):
        if isinstance(ref, tuple):
            ratio = "in range" if ref[0] <= w <= ref[1] else "outside"
        else:
            ratio = "—" if ref is None else f"{w / ref:.2f}"
        lines.append(f"| {case} | {measured} | {w:.0f} W ({how}) | {ratio} | {src} |")
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if args.out:
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
