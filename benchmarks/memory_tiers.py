"""A floorplan study with a second memory tier (issue 25 item 3; docs/chips.md, "A floorplan
study"): the same 80 mm of die edge spent on HBM3E stacks or on LPDDR5X packages beside them.

    python benchmarks/memory_tiers.py [--quick] [--out FILE]

Three designs, each infer-2026 but for its memories (two HBM PHYs take 20 mm of edge, as five
LPDDR5X PHYs do; the LPDDR5X record, energy, price and PHY size are those of
examples/chips/infer-2026-lpddr.toml, several of them ``[assumption]``):

* ``8 HBM``: infer-2026, 192 GiB at 9.8 TB/s;
* ``6 HBM + 5 LPDDR``: examples/chips/infer-2026-lpddr.toml, 144 + 160 GiB;
* ``4 HBM + 10 LPDDR``: 96 + 320 GiB;
* ``2 HBM + 15 LPDDR``: 48 + 480 GiB (a prefill die's choice: the weights in LPDDR).

Workloads, FP8 on one chip: Llama-3-70B decode at an 8k context over a range of batches (the
best tokens/s among the batches that fit, and what it costs per million tokens); its 8k-token
prefill (a prefill-only die's figure: TTFT); Qwen3-235B-A22B decode at a 4k context (235 GB of
weights: more than the HBM of any design; ``8 HBM`` also as two chips at TP 2, per chip). Prints a Markdown table per workload and a verdict
line each; every number is a ``diptych run`` (schedule execution, the residency planner
placing what the HBM cannot hold in the second tier, docs/chips.md "Memory tiers").
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "chips" / "infer-2026-lpddr.toml"


def designs() -> dict:
    """The three designs of the module docstring, by name."""
    base, tiered = load_chip("infer-2026"), load_chip(str(EXAMPLE))
    per_stack = base.dram.capacity_gib / base.dram.stacks
    per_pkg = tiered.dram2.capacity_gib / tiered.dram2.stacks

    def hbm_lpddr(stacks: int, pkgs: int):
        dram = dataclasses.replace(base.dram, stacks=stacks, capacity_gib=stacks * per_stack)
        tier = dataclasses.replace(tiered.dram2, stacks=pkgs, capacity_gib=pkgs * per_pkg)
        return dataclasses.replace(base, name=f"infer-2026 {stacks} HBM + {pkgs} LPDDR",
                                   dram=dram, dram2=tier)

    return {"8 HBM": base, "6 HBM + 5 LPDDR": hbm_lpddr(6, 5),
            "4 HBM + 10 LPDDR": hbm_lpddr(4, 10), "2 HBM + 15 LPDDR": hbm_lpddr(2, 15)}


def _run(chip, model: str, **kw):
    r = run_workload(chip, model, Scenario.of(**kw))
    tiers = r.info.get("memory_tiers")
    return {"seconds": r.seconds, "fits": r.fits, "tokens_per_s": r.tokens_per_s,
            "usd_per_mtok": r.usd_per_mtok, "cost_usd": r.cost_usd,
            "memory_gib": r.memory_bytes / 2**30,
            "tier2_gib": tiers["bytes"]["dram2"] / 2**30 if tiers else 0.0}


def decode_curve(chip, batches, model="llama-3-70b", context=8000) -> list[dict]:
    return [{"batch": b, **_run(chip, model, phase="decode", batch=b, prompt=context,
                                 gen=1)} for b in batches]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three batches instead of six")
    ap.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    a = ap.parse_args(argv)
    batches = (32, 96, 192) if a.quick else (32, 64, 96, 128, 192, 256)
    t0 = time.process_time()
    ds = designs()
    lines = ["| design | HBM | LPDDR5X | chip cost | edge used (mm) | buildable |",
             "|---|---|---|---|---|---|"]
    from diptych.arch.cost import chip_cost
    from diptych.arch.geometry import check, dies
    for name, c in ds.items():
        tier = f"{c.dram2.capacity_gib:g} GiB, {c.dram2.peak_bytes_per_s / 1e12:.2f} TB/s" \
            if c.dram2 is not None else "-"
        lines.append(f"| {name} | {c.dram.capacity_gib:g} GiB, "
                     f"{c.dram.peak_bytes_per_s / 1e12:.1f} TB/s | {tier} | "
                     f"${chip_cost(c).total_usd:,.0f} | "
                     f"{sum(d.demand_mm for d in dies(c)):.0f} | "
                     f"{'yes' if not check(c) else '; '.join(v.kind for v in check(c))} |")
    lines += ["", "Llama-3-70B FP8 decode, 8k context, one chip (TPOT ms / tokens/s; "
              "'-' = does not fit):", "",
              "| batch | " + " | ".join(ds) + " |", "|---" * (len(ds) + 1) + "|"]
    curves = {n: decode_curve(c, batches) for n, c in ds.items()}
    for i, b in enumerate(batches):
        cells = []
        for n in ds:
            p = curves[n][i]
            cells.append(f"{p['seconds'] * 1e3:.1f} / {p['tokens_per_s']:,.0f}"
                         + (f" ({p['tier2_gib']:.0f} GiB in LPDDR)" if p["tier2_gib"] else "")
                         if p["fits"] else "-")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    best = {n: max((p for p in curves[n] if p["fits"]), key=lambda p: p["tokens_per_s"],
                   default=None) for n in ds}
    lines += ["", "| design | best batch that fits | tokens/s | $ per million tokens |",
              "|---|---|---|---|"]
    for n, p in best.items():
        lines.append(f"| {n} | {p['batch']} | {p['tokens_per_s']:,.0f} | "
                     f"{p['usd_per_mtok']:.3f} |" if p else f"| {n} | none | - | - |")
    lines += ["", "Llama-3-70B FP8 prefill, one 8k prompt (TTFT), and Qwen3-235B-A22B FP8 "
              "decode at batch 32, 4k context:", "",
              "| design | prefill TTFT | prefill $/Mtok | Qwen3-235B TPOT | tokens/s | "
              "$/Mtok | in LPDDR |", "|---|---|---|---|---|---|---|"]
    for n, c in ds.items():
        pf = _run(c, "llama-3-70b", phase="prefill", batch=1, prompt=8000)
        q = _run(c, "qwen3-235b-a22b", phase="decode", batch=32, prompt=4000, gen=1)
        qcell = (f"{q['seconds'] * 1e3:.1f} ms | {q['tokens_per_s']:,.0f} | "
                 f"{q['usd_per_mtok']:.3f} | {q['tier2_gib']:.0f} GiB" if q["fits"] else
                 f"does not fit ({q['memory_gib']:.0f} GiB) | - | - | -")
        lines.append(f"| {n} | {pf['seconds'] * 1e3:.0f} ms"
                     + (f" ({pf['tier2_gib']:.0f} GiB in LPDDR)" if pf["tier2_gib"] else "")
                     + f" | {pf['usd_per_mtok']:.3f} | " + qcell + " |")
    q2 = _run(ds["8 HBM"], "qwen3-235b-a22b", phase="decode", batch=32, prompt=4000, gen=1,
              tp=2)
    lines.append(f"| 8 HBM, 2 chips (TP 2) | | | {q2['seconds'] * 1e3:.1f} ms | "
                 f"{q2['tokens_per_s']:,.0f} ({q2['tokens_per_s'] / 2:,.0f} per chip) | "
                 f"{q2['usd_per_mtok']:.3f} | - |")
    lines += ["", f"({time.process_time() - t0:.0f} s CPU)"]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
