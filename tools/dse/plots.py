"""Plots of the DSE tools, as matplotlib Figures (no pyplot state, no display needed).

Every function returns a :class:`matplotlib.figure.Figure` whose artists carry labels, so tests
can check axes and data through the objects rather than pixels.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from .pareto import pareto_front


def text(s) -> str:
    """``s`` as literal plot text: matplotlib reads ``$...$`` as maths, so every label or
    title built from a user's string (chip, model, metric names) goes through this."""
    return str(s).replace("$", r"\$")


def _figure(size=(6.4, 4.8)):
    from matplotlib.figure import Figure
    return Figure(figsize=size, layout="constrained")


def pareto_plot(xs: Sequence[float], ys: Sequence[float], *, x_label: str, y_label: str,
                sense_x: str = "min", sense_y: str = "max", title: str | None = None,
                log_x: bool = False, log_y: bool = False, annotations=None):
    """Scatter of every point (label ``points``) with the Pareto front as a step line (label
    ``Pareto front``, its data = the front points in x order)."""
    front = pareto_front(xs, ys, sense_x, sense_y)
    fig = _figure()
    ax = fig.add_subplot()
    ok = [i for i in range(len(xs)) if xs[i] is not None and ys[i] is not None]
    ax.scatter([xs[i] for i in ok], [ys[i] for i in ok], s=12, color="#9aa7b8", alpha=0.7,
               label="points")
    fx = [xs[i] for i in front]
    fy = [ys[i] for i in front]
    order = sorted(range(len(fx)), key=lambda k: fx[k])
    fx, fy = [fx[k] for k in order], [fy[k] for k in order]
    ax.plot(fx, fy, "o-", color="#c44e52", drawstyle="steps-post" if len(fx) > 1 else "default",
            label="Pareto front", markersize=5)
    if annotations is not None:
        for i in front:
            ax.annotate(text(annotations[i]), (xs[i], ys[i]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(text(x_label))
    ax.set_ylabel(text(y_label))
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_title(text(title or f"Pareto front: {y_label} vs {x_label} ({len(front)} of "
                      f"{len(ok)})"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def roofline_plot(chips: Iterable[tuple[str, float, float, Sequence[dict]]], *,
                  dtype_peaks: dict[str, dict[str, float]] | None = None):
    """Roofline per chip: ``(name, peak_ops_per_s, dram_bytes_per_s, ops)``.

    ``dtype_peaks[name]`` optionally maps other precisions to their peaks: a dashed roof
    ``<name> roof (<dtype>)`` is drawn for each one some op of that chip ran in (op key
    ``dtype``), e.g. BF16 layers on an FP8 chip.
    ``ops`` are dicts with ``flops``, ``dram_bytes`` and ``seconds``; each op is placed at its
    arithmetic intensity (flops / DRAM byte) and achieved rate (flops / s). Ops with no flops or
    no DRAM traffic cannot be placed on a log-log roofline and are left out (counted in the
    legend). The roof line of each chip is labelled ``<name> roof``; its ops ``<name> ops``.
    """
    from matplotlib import colormaps

    fig = _figure((7.5, 5.2))
    ax = fig.add_subplot()
    chips = list(chips)
    colors = colormaps["tab10"]
    lo_i, hi_i = math.inf, 0.0
    placed_all = []
    for k, (name, peak, bw, ops) in enumerate(chips):
        pts = [(o["flops"] / o["dram_bytes"], o["flops"] / o["seconds"])
               for o in ops if o.get("flops") and o.get("dram_bytes") and o.get("seconds")]
        placed_all.append(pts)
        if pts:
            lo_i = min(lo_i, min(p[0] for p in pts))
            hi_i = max(hi_i, max(p[0] for p in pts))
        ridge = peak / bw
        lo_i, hi_i = min(lo_i, ridge / 100), max(hi_i, ridge * 100)
    for k, ((name, peak, bw, ops), pts) in enumerate(zip(chips, placed_all)):
        c = colors(k % 10)
        n = 200
        xs = [lo_i * (hi_i / lo_i) ** (j / (n - 1)) for j in range(n)]
        shown = text(name)
        ax.plot(xs, [min(peak, bw * x) for x in xs], color=c, label=f"{shown} roof")
        used = {o.get("dtype") for o in ops if o.get("dtype")}
        for dt, p in sorted(((dtype_peaks or {}).get(name) or {}).items()):
            if dt in used and p != peak:
                ax.plot(xs, [min(p, bw * x) for x in xs], color=c, linestyle="--",
                        linewidth=0.9, label=f"{shown} roof ({dt})")
        skipped = len(ops) - len(pts)
        note = f" ({skipped} not placeable)" if skipped else ""
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, color=c, alpha=0.6,
                   label=f"{shown} ops{note}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("achieved FLOP/s")
    skipped_all = sum(len(c[3]) for c in chips) - sum(len(p) for p in placed_all)
    ax.set_title("Roofline: every op placed" if not skipped_all else
                 f"Roofline: {sum(len(p) for p in placed_all)} ops placed, {skipped_all} "
                 f"without FLOPs or DRAM traffic left out")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    return fig


def decode_curve_plot(curves: Iterable[tuple[str, int, Sequence[tuple[int, float, float]]]]):
    """Latency/throughput curves: ``(chip, context, [(batch, tokens_per_s, tpot_s), ...])``.

    x = tokens/s (throughput), y = time per output token in ms; one line per chip and context,
    labelled ``<chip> ctx=<context>``, each point annotated with its batch.
    """
    fig = _figure((7.0, 5.0))
    ax = fig.add_subplot()
    for chip, context, pts in curves:
        pts = [p for p in pts if p[1] and p[2]]
        if not pts:
            continue
        pts = sorted(pts)
        line, = ax.plot([p[1] for p in pts], [p[2] * 1e3 for p in pts], "o-",
                        label=text(f"{chip} ctx={context}"))
        for b, tps, tpot in pts:
            ax.annotate(f"b{b}", (tps, tpot * 1e3), fontsize=6, xytext=(3, 3),
                        textcoords="offset points", color=line.get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decode throughput (tokens/s per chip group)")
    ax.set_ylabel("time per output token (ms)")
    ax.set_title("Decode: latency vs throughput (points: batch size)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    return fig
