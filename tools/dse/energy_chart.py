"""The compare report's stacked bar of energy by component: one bar per chip and phase.

Each bar is a reference run's ``energy_breakdown_j`` (:mod:`diptych.sim.energy_parts`) as
shares of its total (100 % wide, so that a training step and a decoded token compare), its
total in joules at the right; every segment names its component, share and joules in a
tooltip. An inline SVG written by hand: no plotting library, no external asset, every text
escaped.
"""

from __future__ import annotations

from html import escape

from .. import fmt
from ...sim.energy_parts import COMPONENTS, LABELS, OTHER

#: A colour per component (Tableau 10, colour-blind safe), ``other`` grey.
COLOURS = {"mac": "#4e79a7", "vector": "#f28e2b", "sram": "#59a14f", "dram": "#e15759",
           "noc": "#76b7b2", "d2d": "#edc948", "link": "#b07aa1", "static": "#9c755f",
           OTHER: "#bab0ac"}

_LABEL_W, _BAR_W, _TOTAL_W, _ROW_H, _BAR_H, _TOP = 230, 560, 90, 24, 16, 34


def energy_bars_svg(rows: list[tuple[str, dict | None]]) -> str:
    """The chart of ``(label, energy_breakdown_j)`` rows (a row without a breakdown is drawn
    empty, marked ``–``); an empty string when no row has one."""
    if not any(parts for _, parts in rows):
        return ""
    keys = [k for k in (*COMPONENTS, OTHER)
            if any((parts or {}).get(k) for _, parts in rows)]
    width = _LABEL_W + _BAR_W + _TOTAL_W
    height = _TOP + _ROW_H * len(rows) + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
           f'role="img" aria-label="energy by component">']
    x = _LABEL_W
    for k in keys:                                           # the legend
        out.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{COLOURS[k]}"/>'
                   f'<text x="{x + 16}" y="16">{escape(LABELS[k])}</text>')
        x += 22 + 8 * len(LABELS[k])
    for i, (label, parts) in enumerate(rows):
        y = _TOP + i * _ROW_H
        out.append(f'<text x="{_LABEL_W - 8}" y="{y + 12}" text-anchor="end">'
                   f'{escape(label)}</text>')
        total = sum((parts or {}).values())
        if not parts or total <= 0:
            out.append(f'<text x="{_LABEL_W + 4}" y="{y + 12}">{fmt.MISSING}</text>')
            continue
        x = float(_LABEL_W)
        for k in keys:
            j = parts.get(k, 0.0)
            if j <= 0:
                continue
            w = _BAR_W * j / total
            tip = f"{label}: {LABELS[k]} {fmt.pct(j / total)} ({fmt.eng(j, 'J')})"
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{_BAR_H}" '
                       f'fill="{COLOURS[k]}"><title>{escape(tip)}</title></rect>')
            x += w
        out.append(f'<text x="{_LABEL_W + _BAR_W + 6}" y="{y + 12}">'
                   f'{escape(fmt.eng(total, "J"))}</text>')
    out.append("</svg>")
    return "".join(out)
