"""The compare report: a directory of tables and plots with a static ``index.html``.

Files: ``compare.csv`` (one row per run), ``compare.json`` (the ``--json`` structure plus
settings, warnings and per-run power/fit details), ``roofline.svg`` (every op of the reference
runs placed on each chip's roofline), ``decode.svg`` (latency vs throughput), ``floorplan.svg``
and ``index.html`` showing them all: the summary with each chip's precision per phase and the
ratios between chips, the warnings (runs that do not fit, runs above the TDP, unsupported
precisions, contexts beyond the model's window), and on the plots a mark on every point whose
run does not fit in memory or exceeds the TDP, and a stacked bar of each chip's energy by
component per phase (:mod:`.energy_chart`, inline). No server and no external assets: open the
file directly.
"""

from __future__ import annotations

import csv
import html
import io
from pathlib import Path

from ...arch.atomic import atomic_text
from .. import fmt
from ..jsonout import dumps
from .compare import Comparison, _point
from .energy_chart import energy_bars_svg
from ...sim.energy_parts import COLUMNS, OTHER, column
from .compare_table import metrics, ratio_caption
from .csvsafe import safe_rows
from .floorplan import draw_floorplans, save_figure
from .physical import geometry_warnings, provenance
from .plots import decode_curve_plot, roofline_plot

#: How the plots mark points that are not feasible: (matplotlib marker style, legend label).
#: Black, so that they stand out from every line colour.
INFEASIBLE = {"fits": (dict(marker="x", color="black", s=60, linewidths=1.5),
                       "does not fit in memory"),
              "exceeds_tdp": (dict(marker="s", facecolors="none", edgecolors="black", s=90,
                                   linewidths=1.2), "above the chip's TDP")}


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


def _reference_runs(cmp: Comparison, cr) -> list[dict]:
    s = cmp.settings
    return [cr.train, cr.prefill[s.prompts[0]], cr.decode[(s.ref_batch, s.contexts[0])]]


def roofline_inputs(cmp: Comparison):
    for name, cr in cmp.chips.items():
        chip = cr.chip
        ops = [o for r in _reference_runs(cmp, cr) for o in op_points(r)]
        yield (name, chip.peak_ops_per_s[chip.default_dtype], chip.dram_bytes_per_s, ops)


def decode_curves(cmp: Comparison):
    for name, cr in cmp.chips.items():
        for c in cmp.settings.contexts:
            pts = [(b, cr.decode[(b, c)].get("tokens_per_s"), cr.decode[(b, c)].get("tpot_s"))
                   for b in cmp.settings.batches]
            yield (name, c, pts)


def infeasible_points(cmp: Comparison) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Where the plots mark infeasible runs, per kind (``fits``: does not fit, ``exceeds_tdp``):
    ``decode``, (tokens/s, TPOT in ms) of decode runs; ``roofline``, (FLOP/byte, FLOP/s) of
    the ops of the reference runs."""
    out = {k: {"decode": [], "roofline": []} for k in INFEASIBLE}
    for cr in cmp.chips.values():
        bad = lambda r, k: (r.get(k) is False) if k == "fits" else bool(r.get(k))  # noqa: E731
        for r in cr.decode.values():
            for k in INFEASIBLE:
                if bad(r, k) and r.get("tokens_per_s") and r.get("tpot_s"):
                    out[k]["decode"].append((r["tokens_per_s"], r["tpot_s"] * 1e3))
        for r in _reference_runs(cmp, cr):
            for k in INFEASIBLE:
                if bad(r, k):
                    out[k]["roofline"] += [(o["flops"] / o["dram_bytes"], o["flops"] / o["seconds"])
                                           for o in op_points(r)
                                           if o["flops"] and o["dram_bytes"] and o["seconds"]]
    return out


def _mark(fig, points: dict[str, list[tuple[float, float]]], which: str) -> None:
    """Overlay the infeasible ``points[kind][which]`` on the figure's axes, one legend entry
    per kind."""
    ax = fig.axes[0]
    added = False
    for kind, (style, label) in INFEASIBLE.items():
        pts = points[kind][which]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=label, zorder=5, **style)
            added = True
    if added:
        ax.legend(fontsize=7)


def write_report(cmp: Comparison, out: str | Path, serving: dict | None = None) -> list[Path]:
    """Write the report directory; returns the files written. ``serving``: the serving
    study of ``compare --serving`` (:func:`~diptych.sim.serving.study.serving_study`), added
    to compare.json and, as its energy by component, to index.html."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--report {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    rows = cmp.rows()
    p = out / "compare.csv"
    safe = safe_rows(rows)  # no spreadsheet formulas from chip or model names
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(safe[0]))
    w.writeheader()
    w.writerows(safe)
    files.append(atomic_text(p, buf.getvalue()))   # never a partial file (a full disk)
    p = out / "compare.json"
    details = cmp.details()
    details["provenance"] = provenance()
    details["geometry_warnings"] = [w for cr in cmp.chips.values()
                                    for w in geometry_warnings(cr.chip)]
    if serving:
        details["serving"] = serving
    files.append(atomic_text(p, dumps(details)))
    bad = infeasible_points(cmp)
    roof = roofline_plot(roofline_inputs(cmp),
                         dtype_peaks={n: cr.chip.peak_ops_per_s for n, cr in cmp.chips.items()})
    _mark(roof, bad, "roofline")
    dec = decode_curve_plot(decode_curves(cmp))
    _mark(dec, bad, "decode")
    figs = {"roofline.svg": roof, "decode.svg": dec,
            "floorplan.svg": draw_floorplans([cr.chip for cr in cmp.chips.values()])}
    for fname, fig in figs.items():
        save_figure(fig, out / fname)
        files.append(out / fname)
    files.append(atomic_text(out / "index.html", index_html(cmp, rows, serving)))
    return files


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


#: The every-run table: flags first (readable at any width), then the numbers.
RUN_COLUMNS = ("chip", "phase", "batch", "context", "fits", "error", "bound", "precision",
               "seconds", "ttft_s", "tpot_s", "tokens_per_s_per_chip", "tokens_per_s", "mfu",
               "energy_j_per_token", "energy_j", "power_w", "exceeds_tdp", "usd_per_mtok",
               "area_mm2")
_RUN_HEADS = {"tokens_per_s": "tokens/s (the run's chips)",
              "tokens_per_s_per_chip": "tokens/s per chip", "exceeds_tdp": "above TDP",
              "seconds": "time", "ttft_s": "TTFT", "tpot_s": "TPOT",
              "energy_j_per_token": "energy per token", "energy_j": "energy",
              "power_w": "power per chip", "usd_per_mtok": "$ per million tokens"}


def _cell(col: str, v) -> str:
    """One cell of the every-run table in the unit its column carries."""
    if v is None or isinstance(v, (bool, str)):
        return _fmt(v)
    if col in ("seconds", "ttft_s", "tpot_s"):
        return fmt.seconds(v)
    if col.startswith("tokens_per_s"):
        return fmt.eng(v, "tok/s")
    if col == "mfu":
        return fmt.pct(v)
    if col in ("energy_j", "energy_j_per_token"):
        return fmt.eng(v, "J")
    if col == "power_w":
        return fmt.eng(v, "W")
    if col == "usd_per_mtok":
        return fmt.money(v)
    if col == "area_mm2":
        return fmt.number(v, "mm²")
    return _fmt(v)


#: Columns of compare.csv the every-run table leaves out: the energy by component (the
#: stacked bar shows it per reference run; eight more columns would not read).
_CSV_ONLY = frozenset((*COLUMNS, column(OTHER)))


def run_table_html(rows: list[dict]) -> str:
    """The every-run table of the report: readable headers and units, the flags first (the
    CSV keeps the raw columns, the energy by component among them)."""
    e = html.escape
    cols = [c for c in RUN_COLUMNS if c in rows[0]] + [c for c in rows[0]
                                                        if c not in RUN_COLUMNS
                                                        and c not in _CSV_ONLY]
    head = "".join(f"<th>{e(_RUN_HEADS.get(c, fmt.column_label(c)))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{e(_cell(c, r[c]))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_html(cmp: Comparison) -> str:
    """The summary table: one column per chip (with the runs' flags), then the ratios."""
    e = html.escape
    names = list(cmp.chips)
    head = "".join(f"<th>{e(n)}</th>" for n in names)
    head += "".join(f"<th class=ratio>{e(n)} / {e(names[0])}</th>" for n in names[1:])
    lines, section = [], None
    for m in metrics(cmp):
        if m.section != section:
            lines.append(f"<tr class=section><th colspan={2 * len(names)}>{e(m.section)}</th></tr>")
            section = m.section
        cells = []
        for text, notes in zip(m.cells, m.notes):
            if "unsupported" in notes:
                cells.append("<td class=bad>unsupported</td>")
                continue
            flags = "".join(f" <span class=flag>{e(n)}</span>" for n in notes)
            cells.append(f"<td{' class=bad' if notes else ''}>{e(text)}{flags}</td>")
        ratios = list(m.ratios) or [""] * (len(names) - 1)
        cells += [f"<td class=ratio>{e(r)}</td>" for r in ratios]
        lines.append(f"<tr><th>{e(m.label)}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(lines)}</table>"


def waterfall_html(cmp: Comparison) -> str:
    """"Where the peak goes": one row per chip and phase, the share of the peak each
    mechanism takes and the MFU (``compare --waterfall``; empty without it)."""
    e = html.escape
    rows, mechs = [], []
    for name in cmp.chips:
        for phase, wf in cmp.summary(name).get("waterfall", {}).items():
            if not wf:
                continue
            share = {x["mechanism"]: x["share"] for x in wf["steps"]}
            mechs += [m for m in share if m not in mechs]
            rows.append((name, phase, share, wf["mfu"]))
    if not rows:
        return ""
    head = "".join(f"<th>{e(m.replace('_', ' '))}</th>" for m in mechs)
    body = "".join(
        f"<tr><td>{e(n)}</td><td>{e(ph)}</td>"
        + "".join(f"<td>{100 * sh.get(m, 0.0):.1f} %</td>" for m in mechs)
        + f"<td>{100 * mfu:.1f} %</td></tr>" for n, ph, sh, mfu in rows)
    return ("<h2>Where the peak goes</h2><p>Share of each chip's peak that each mechanism "
            "takes, added in this order; the shares and the MFU add up to 100 % "
            "(docs/workloads.md, \"Efficiency waterfall\").</p>"
            f"<table><tr><th>chip</th><th>phase</th>{head}<th>MFU</th></tr>{body}</table>")


def energy_html(cmp: Comparison) -> str:
    """"Energy by component": one stacked bar per chip and phase, of the phase's reference
    run (empty when no run has a breakdown)."""
    s = cmp.settings
    points = {"train": _point("train", None), "prefill": _point("prefill", s.prompts[0]),
              "decode": _point("decode", (s.ref_batch, s.contexts[0]))}
    rows = [(f"{name} · {points[ph]}", parts) for name in cmp.chips
            for ph, parts in cmp.summary(name)["energy_breakdown_j"].items()]
    svg = energy_bars_svg(rows)
    if not svg:
        return ""
    return ("<h2>Energy by component</h2><p>Each phase's reference run: the share of its "
            "energy each component spends (MAC arrays, vector units, SRAM, DRAM, on-chip "
            "network and die-to-die hop, chip-to-chip links, static power), its total at "
            "the right (all the run's chips: a training step, a prompt, a decode step); "
            "hover a segment for its joules. Also in compare.json "
            "(<code>energy_breakdown_j</code>).</p>" + svg)


def serving_energy_html(study: dict | None) -> str:
    """The serving study's energy by component: one stacked bar per deployment, of its run
    at the highest load meeting the SLOs, per output token; or, for the search's result
    (``compare --serving``), one per design's chosen plan at the target load (empty without a
    breakdown)."""
    if not study:
        return ""
    if "per_design" in study:           # compare --serving: each design's chosen plan
        def label(name: str, b: dict) -> str:
            pools = ", ".join(f"{p['role']} {p['replicas']} x "
                              + (f"ep {p['ep']}" if p["ep"] > 1 else f"tp {p['tp']}")
                              for p in b["pools"])
            return f"{name} ({pools})"

        rows = [(label(name, d["best"]), d["best"].get("energy_breakdown_j_per_token"))
                for name, d in study["per_design"].items() if d["best"] is not None]
        svg = energy_bars_svg(rows)
        return ("<h2>Serving at each design's best: energy by component</h2><p>Each design's "
                "chosen plan at the target load (<code>compare --serving</code>): the share of "
                "its energy each component spends, the joules per output token at the right. "
                "Also in compare.json (<code>serving.per_design</code>, "
                "<code>energy_breakdown_j_per_token</code>).</p>" + svg) if svg else ""
    rows = [(f"{name} (colocated)", d.get("energy_breakdown_j_per_token"))
            for name, d in study.get("colocated", {}).items()]
    rows += [(f"prefill {d['prefill']} + decode {d['decode']}",
              d.get("energy_breakdown_j_per_token")) for d in study.get("disaggregated", [])]
    svg = energy_bars_svg(rows)
    if not svg:
        return ""
    return ("<h2>Serving under SLOs: energy by component</h2><p>Each deployment's run at the "
            "highest load meeting the SLOs (<code>compare --serving</code>): the share of "
            "its energy each component spends, the joules per output token at the right "
            "(idle, host and swap time are static power, KV transfers links). Also in "
            "compare.json (<code>serving</code>, "
            "<code>energy_breakdown_j_per_token</code>).</p>" + svg)


def index_html(cmp: Comparison, rows: list[dict], serving: dict | None = None) -> str:
    """A self-contained page: settings, warnings, the summary, the plots and every run (and
    ``serving``'s energy by component, :func:`serving_energy_html`)."""
    e = html.escape
    names = list(cmp.chips)
    verdicts = cmp.verdicts()
    verdict = ("<h2>Verdict</h2><ul>" + "".join(f"<li>{e(v['text'])}</li>"
                                                  for v in verdicts.values()) + "</ul>"
               if verdicts else "")
    warns = cmp.warnings()
    warn = ("<h2>Warnings</h2><ul class=warn>" + "".join(f"<li>{e(w)}</li>" for w in warns)
            + "</ul><p>Marked on the plots: × does not fit in memory, □ above the chip's "
              "TDP.</p>") if warns else ""
    window = (f" The model's max_position_embeddings is {cmp.max_positions}."
              if cmp.max_positions else "")
    prov = provenance()
    made = (f"<p>{e(prov['made_by'])}, <code>{e(prov['command'])}</code>, "
            f"{e(prov['date_utc'])}</p>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>diptych compare: {e(cmp.model)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 8px;
text-align:right}}th{{background:#f3f3f3}}.warn{{color:#a00}}.bad{{background:#fff3e0}}
.flag{{color:#a00;font-size:11px}}.ratio{{color:#06c}}tr.section th{{text-align:left;
background:#e8e8e8}}img{{max-width:100%;border:1px solid #ddd;margin:1em 0}}</style></head><body>
<h1>{e(cmp.model)}: {e(' vs '.join(names))}</h1>
<p>{e(cmp.settings.describe())}.{e(window)}</p>{made}
<p>{e(ratio_caption(cmp))}</p>{verdict}{warn}
<h2>Summary</h2>{summary_html(cmp)}{waterfall_html(cmp)}{energy_html(cmp)}
{serving_energy_html(serving)}
<h2>Floorplans</h2><img src="floorplan.svg" alt="floorplans">
<h2>Roofline</h2><img src="roofline.svg" alt="roofline">
<h2>Decode latency vs throughput</h2><img src="decode.svg" alt="decode curve">
<h2>Every run</h2><p>Also as <a href="compare.csv">compare.csv</a> and
<a href="compare.json">compare.json</a>.</p>
{run_table_html(rows)}
</body></html>
"""
