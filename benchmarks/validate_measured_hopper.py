"""The h100 preset against kernels measured on a real Hopper GPU (issue 21: component rows):
the system rows' GEMMs by shape held by the power limit, fast accumulation on and off, HBM
streaming power, and fused attention's rate and power; prints Markdown tables.

    python benchmarks/validate_measured_hopper.py [--out FILE] [--all]     # ~30 s warm

The measurements are in ``benchmarks/gpu/h200-2026-12-04/`` (``benchmarks/gpu/*.py`` on one
H200 SXM, 2026-12-04: the GH100 die of the H100 SXM, 132 SMs, the same 700 W limit, HBM3e
at 4.8 TB/s in place of HBM3 at 3.35; PyTorch 2.11, CUDA 13.0, cuDNN 9.19, driver 580). Every
kernel ran back to back for seconds after the GPU was loaded, as a training step runs them,
with normally distributed inputs. Two of them calibrate the preset
(``benchmarks/calibrate_h100_power.py``: the 8192³ GEMMs' sustained rates and the GEMV's
watts per bit) and one its split accumulator (the median of the fast-accumulation pairs);
every other row here is a check. diptych's GEMM column is the shape held to the 700 W TDP
on its own (:func:`validate_power.capped_tflops`: the power-limited clock of the chip's V/f
curve), what a GEMM run back to back sustains; the measured clock is NVML's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from validate_attention import kernel_calls, kernel_tflops
from validate_power import capped_tflops
from validate_split_accumulator import slowdowns

from diptych.arch import load_chip
from diptych.arch.power import chip_at_clock
from diptych.sim.api import simulate
from diptych.sim.run.attention import fused_stats
from diptych.workloads.ops import Gemm

DATA = Path(__file__).parent / "gpu" / "h200-2026-12-04"


def load(name: str):
    """One measurement file of :data:`DATA`, parsed."""
    return json.loads((DATA / name).read_text())


def gemv_pj_per_bit(chip) -> float:
    """diptych's dynamic energy (above ``static_w``) per DRAM bit of the measured GEMV's shape
    on ``chip`` (a BF16 8 GiB matrix times a vector)."""
    st = simulate(Gemm(name="gemv", m=1, k=32768, n=131072), chip)
    return (st.energy_j - chip.energy.static_w * st.seconds) / (st.dram_bytes * 8) * 1e12


def _q(xs) -> str:
    xs = sorted(xs)
    return (f"{statistics.median(xs):.2f} ({xs[len(xs) // 4]:.2f}–{xs[(3 * len(xs)) // 4]:.2f}, "
            f"{xs[0]:.2f}–{xs[-1]:.2f})")


def gemm_rows(chip) -> list[dict]:
    """Per measured GEMM (BF16 all kinds; FP8 with fast accumulation, from the pairs): the
    measured and diptych's sustained TFLOPS."""
    out = []
    for g in load("gemms.json")["gemms"]:
        if g["dtype"] != "bf16" or "tflops" not in g or g["n"] % 16:
            continue        # (GPT-3's unpadded 12,565-wide head: a cuBLAS fallback kernel)
        tf, f = capped_tflops(chip, g["m"], g["n"], g["k"], "bf16", chip.tdp_w)
        out.append(dict(g, diptych=tf, diptych_ghz=f))
    for w in load("accum_power.json")["fast_accum"]:
        fast = w["fast"]
        flops = 2 * w["m"] * w["n"] * w["k"]
        tf, f = capped_tflops(chip, w["m"], w["n"], w["k"], "fp8", chip.tdp_w)
        out.append(dict(m=w["m"], n=w["n"], k=w["k"], dtype="fp8", kind="fast accumulation",
                        tflops=flops / fast["seconds_per_iter"] / 1e12,
                        sm_mhz_mean=fast["sm_mhz_mean"], diptych=tf, diptych_ghz=f))
    return out


def gemm_table(chip, full: bool = False) -> str:
    rows = gemm_rows(chip)
    lines = ["| GEMMs (system rows' shapes) | shapes | measured TFLOPS, median | clock, median | "
             "diptych ÷ measured: median (quartiles, range) | diptych's clock, median |",
             "|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["dtype"], r["kind"]), []).append(r)
    for (dt, kind), rs in sorted(groups.items()):
        lines.append(f"| {dt.upper()} {kind} | {len(rs)} | "
                     f"{statistics.median(r['tflops'] for r in rs):.0f} | "
                     f"{statistics.median(r['sm_mhz_mean'] for r in rs) / 1e3:.2f} GHz | "
                     f"{_q([r['diptych'] / r['tflops'] for r in rs])} | "
                     f"{statistics.median(r['diptych_ghz'] for r in rs):.2f} GHz |")
    sus = load("sustain.json")
    for dt in ("bf16", "fp8"):
        tf, f = capped_tflops(chip, 8192, 8192, 8192, dt, chip.tdp_w)
        s = sus[dt]
        lines.append(f"| 8192³ {dt.upper()}, {s['iters']} back to back (calibration) | 1 | "
                     f"{s['tflops']:.0f} at {s['energy_power_w']:.0f} W | "
                     f"{s['sm_mhz_mean'] / 1e3:.2f} GHz | {tf / s['tflops']:.2f} | {f:.2f} GHz |")
    if full:
        lines += ["", "| M | N | K | dtype | kind | measured TFLOPS | clock | diptych | ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['dtype']} | {r['kind']} | "
                         f"{r['tflops']:.0f} | {r['sm_mhz_mean'] / 1e3:.2f} | "
                         f"{r['diptych']:.0f} | {r['diptych'] / r['tflops']:.2f} |")
    return "\n".join(lines) + "\n"


def accum_table(chip) -> str:
    d = load("accum_power.json")["fast_accum"]
    shapes = [(w["m"], w["k"], w["n"]) for w in d]
    cyc = [w["split"]["seconds_per_iter"] * w["split"]["sm_mhz_mean"]
           / (w["fast"]["seconds_per_iter"] * w["fast"]["sm_mhz_mean"]) for w in d]
    tim = [w["split_over_fast"] for w in d]
    dip = [row[2] for row in slowdowns(chip, shapes, overlaps=(None,))]
    return ("| FP8, fast accumulation off ÷ on (53 shapes) | median (quartiles, range) |\n"
            "|---|---|\n"
            f"| measured, time | {_q(tim)} |\n| measured, time × clock (cycles; calibration) "
            f"| {_q(cyc)} |\n| diptych (overlap {chip.split_accumulator.overlap:g}) | "
            f"{_q(dip)} |\n")


def stream_table(chip) -> str:
    idle = load("gemms.json")["meta"]["idle"]["energy_power_w"]
    st = load("stream_power.json")
    g = simulate(Gemm(name="gemv", m=1, k=32768, n=131072), chip)
    dip = gemv_pj_per_bit(chip)
    lines = ["| HBM streaming (8 GiB) | TB/s | board W | clock | pJ per bit above idle |",
             "|---|---|---|---|---|"]
    for name, r in st.items():
        lines.append(f"| {name} | {r['tb_per_s']:.2f} | {r['energy_power_w']:.0f} | "
                     f"{r['sm_mhz_mean'] / 1e3:.2f} GHz | "
                     f"{(r['energy_power_w'] - idle) / (r['tb_per_s'] * 8e12) * 1e12:.1f} |")
    lines.append(f"| diptych h100, GEMV of the same shape (calibrated on gemv_b1) | "
                 f"{g.dram_bytes / g.seconds / 1e12:.2f} | {g.energy_j / g.seconds:.0f} | "
                 f"{chip.clock_ghz:.2f} GHz | {dip:.1f} |")
    return "\n".join(lines) + f"\n\nidle with a CUDA context: {idle:.1f} W\n"


def attention_power_w(chip, seq: int, heads: int, clock_ghz: float, kernel: str = "default"
                      ) -> tuple[float, float]:
    """(W, TFLOPS) of one causal fused attention call's forward and backward back to back on
    ``chip`` run at ``clock_ghz`` (:func:`~diptych.arch.power.chip_at_clock`), ``heads``
    heads of 128 (MHA), ``seq`` tokens, batch 1; ``kernel`` ``"fa2"``: the chip's
    ``[attention_fa2]``. FLOPs as FlashAttention's benchmark counts them (3.5 × forward)."""
    c = dataclasses.replace(chip, attention=chip.attention_fa2) if kernel == "fa2" else chip
    c = chip_at_clock(c, min(clock_ghz, c.clock_ghz))
    fwd, bwd = kernel_calls(1, seq, heads=heads)
    a, b = fused_stats(fwd, c, simulate), fused_stats(bwd, c, simulate)
    t = a.seconds + b.seconds
    return (a.energy_j + b.energy_j) / t, 3.5 * 4 * heads * seq * seq * 128 / 2 / t / 1e12


def attention_table(chip) -> str:
    rate = {(a["case"], a["backend"]): a for a in load("attention.json")["attention"]}
    pw = {(a["case"], a["backend"]): a for a in
          load("attention_power.json")["attention_power"]}
    lines = ["| causal attention, BF16, hdim 128 (GQA expanded) | kernel | fwd TFLOPS: measured, "
             "diptych | bwd TFLOPS: measured, diptych | fwd+bwd back to back: measured W at "
             "its clock; diptych W at that clock |",
             "|---|---|---|---|---|"]
    for (case, be), a in rate.items():
        if "error" in a:
            continue
        f, b = kernel_tflops(1, a["seq"], True, heads=a["q_heads"], chip=chip.name,
                             kernel="fa2" if be == "flash" else "default")
        p = pw.get((case, be), {})
        if "energy_power_w" in p:
            w, _ = attention_power_w(chip, a["seq"], a["q_heads"], p["sm_mhz_mean"] / 1e3,
                                     "fa2" if be == "flash" else "default")
            pwr = (f"{p['energy_power_w']:.0f} W at {p['sm_mhz_mean'] / 1e3:.2f} GHz; "
                   f"{w:.0f} W ({w / p['energy_power_w']:.2f})")
        else:
            pwr = "—"
        lines.append(f"| {case}, seq {a['seq']}, {a['q_heads']} heads | "
                     f"{'cuDNN' if be == 'cudnn' else 'FlashAttention-2'} | "
                     f"{a['fwd_tflops']:.0f}, {f:.0f} ({f / a['fwd_tflops']:.2f}) | "
                     f"{a['bwd_tflops']:.0f}, {b:.0f} ({b / a['bwd_tflops']:.2f}) | {pwr} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown tables here")
    ap.add_argument("--all", action="store_true", help="also every GEMM shape")
    args = ap.parse_args(argv)
    chip = load_chip("h100")
    text = "\n".join([gemm_table(chip, args.all), accum_table(chip), stream_table(chip),
                      attention_table(chip)])
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
