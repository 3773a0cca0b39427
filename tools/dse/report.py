"""The compare report: a directory of tables and plots with a static ``index.html``.

Files: ``compare.csv`` (one row per run), ``compare.json`` (the ``--json`` structure plus
settings and per-run power/fit details), ``roofline.svg`` (every op of the reference runs
placed on each chip's roofline), ``decode.svg`` (latency vs throughput), ``floorplan.svg`` and
``index.html`` showing them all. No server and no external assets: open the file directly.
"""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from .compare import Comparison
from .floorplan import draw_floorplans, save_figure
from .plots import decode_curve_plot, roofline_plot


def op_points(run: dict) -> list[dict]:
    """Per-op ``flops``/``dram_bytes``/``seconds`` of a run's ``layers`` (missing → skipped)."""
    out = []
    for op in run.get("layers") or []:
        flops = op.get("flops")
        nbytes = op.get("dram_bytes", op.get("bytes"))
        secs = op.get("seconds")
        if flops is None or nbytes is None or secs is None:
            continue
        out.append({"name": op.get("op", op.get("name", "?")), "flops": flops,
                    "dram_bytes": nbytes, "seconds": secs, "dtype": op.get("dtype")})
    return out


def roofline_inputs(cmp: Comparison):
    s = cmp.settings
    for name, cr in cmp.chips.items():
        chip = cr.chip
        ops = (op_points(cr.train) + op_points(cr.prefill[s.prompts[0]])
               + op_points(cr.decode[(s.ref_batch, s.contexts[0])]))
        yield (name, chip.peak_ops_per_s[chip.default_dtype], chip.dram_bytes_per_s, ops)


def decode_curves(cmp: Comparison):
    for name, cr in cmp.chips.items():
        for c in cmp.settings.contexts:
            pts = [(b, cr.decode[(b, c)].get("tokens_per_s"), cr.decode[(b, c)].get("tpot_s"))
                   for b in cmp.settings.batches]
            yield (name, c, pts)


def write_report(cmp: Comparison, out: str | Path) -> list[Path]:
    """Write the report directory; returns the files written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--report {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    rows = cmp.rows()
    p = out / "compare.csv"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    files.append(p)
    p = out / "compare.json"
    p.write_text(json.dumps(cmp.details(), indent=2))
    files.append(p)
    figs = {
        "roofline.svg": roofline_plot(
            roofline_inputs(cmp),
            dtype_peaks={n: cr.chip.peak_ops_per_s for n, cr in cmp.chips.items()}),
        "decode.svg": decode_curve_plot(decode_curves(cmp)),
        "floorplan.svg": draw_floorplans([cr.chip for cr in cmp.chips.values()]),
    }
    for fname, fig in figs.items():
        save_figure(fig, out / fname)
        files.append(out / fname)
    p = out / "index.html"
    p.write_text(index_html(cmp, rows))
    files.append(p)
    return files


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def index_html(cmp: Comparison, rows: list[dict]) -> str:
    """A self-contained page: settings, the summary, the per-run table and the plots."""
    e = html.escape
    summ = cmp.to_json()["chips"]
    names = list(summ)
    head = "".join(f"<th>{e(n)}</th>" for n in names)

    def line(label, vals):
        return f"<tr><th>{e(label)}</th>" + "".join(f"<td>{e(_fmt(v))}</td>" for v in vals) + "</tr>"

    lines = [line("area (mm²)", [summ[n]["area_mm2"] for n in names]),
             line("tokens per joule (decode ref.)", [summ[n]["tokens_per_j"] for n in names]),
             line("train tokens/s per chip", [summ[n]["train"]["tokens_per_s"] for n in names]),
             line("train MFU", [summ[n]["train"]["mfu"] for n in names]),
             line("train step (s)", [summ[n]["train"]["step_s"] for n in names])]
    for i, p in enumerate(cmp.settings.prompts):
        lines.append(line(f"TTFT {p} (s)", [summ[n]["prefill"][i]["ttft_s"] for n in names]))
    for i, d in enumerate(summ[names[0]]["decode"]):
        lines.append(line(f"decode b={d['batch']} ctx={d['context']}: TPOT (s)",
                          [summ[n]["decode"][i]["tpot_s"] for n in names]))
        lines.append(line(f"decode b={d['batch']} ctx={d['context']}: tokens/s",
                          [summ[n]["decode"][i]["tokens_per_s"] for n in names]))
    for ph in ("train", "prefill", "decode"):
        lines.append(line(f"bottleneck: {ph}", [summ[n]["bottleneck"][ph] for n in names]))
    cols = list(rows[0])
    runs = "".join("<tr>" + "".join(f"<td>{e(_fmt(r[c]))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    hot = [r for r in rows if r.get("exceeds_tdp")]
    warn = (f"<p class=warn>{len(hot)} run(s) draw more average power than the chip's TDP "
            "(column exceeds_tdp): those speeds could not be sustained.</p>") if hot else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>diptych compare: {e(cmp.model)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 8px;
text-align:right}}th{{background:#f3f3f3}}.warn{{color:#a00}}img{{max-width:100%;
border:1px solid #ddd;margin:1em 0}}</style></head><body>
<h1>{e(cmp.model)}: {e(' vs '.join(names))}</h1>
<p>{e(cmp.settings.describe())}</p>{warn}
<h2>Summary</h2><table><tr><th></th>{head}</tr>{''.join(lines)}</table>
<h2>Floorplans</h2><img src="floorplan.svg" alt="floorplans">
<h2>Roofline</h2><img src="roofline.svg" alt="roofline">
<h2>Decode latency vs throughput</h2><img src="decode.svg" alt="decode curve">
<h2>Every run</h2><p>Also as <a href="compare.csv">compare.csv</a> and
<a href="compare.json">compare.json</a>.</p>
<table><tr>{''.join(f'<th>{e(c)}</th>' for c in cols)}</tr>{runs}</table>
</body></html>
"""
