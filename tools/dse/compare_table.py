"""The summary of a :class:`~diptych.tools.dse.compare.Comparison` as labelled rows, shared by
the terminal table (``diptych compare``) and the HTML report.

Each :class:`Metric` row has one formatted cell per chip, the flags of the runs behind each
cell (``does not fit``, ``> TDP``, ``power-limited``, ``error``, ``unsupported``; a chip that
cannot be built is flagged on its ``dies`` row) and, when the values are
comparable, the ratio of every chip to the first one (``B / A``). Training leads with tokens/s
per chip and ends with the parallel plan it ran (one node's TP × DP, or the plan a cluster
search chose); MFU names the precision of the peak it is taken against and gets no ratio when the
chips' peaks are in different precisions (the ratio would mislead). The chip section states
each chip's spec (dies and outlines, clock, cores and arrays, peak in its inference
precision, DRAM, SRAM, TDP, cost); rates are in engineering notation (``2.65 k tok/s``,
``9.83 TB/s``), times in the unit that keeps 1-999 before the point.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.area import die_area_mm2
from .. import fmt
from ..precision_spec import describe
from ...arch.geometry import check, dies
from .compare import Comparison, run_notes, run_tier


def _dies(chip) -> str:
    """``31.0 × 21.3 mm``, or ``2 × 21.0 × 17.5 mm`` for a package of equal dies."""
    outlines = [f"{g.width_mm:.1f} × {g.height_mm:.1f} mm" for g in dies(chip)]
    if len(set(outlines)) == 1:
        return outlines[0] if len(outlines) == 1 else f"{len(outlines)} × {outlines[0]}"
    return " + ".join(outlines)


def _tier(chip, table: str = "dram2") -> str:
    """``160 GiB lpddr5x, 341 GB/s`` (``behind 2 cxl links, +200 ns``), or ``none``: the
    second tier, or the ``[dram3]`` one."""
    t = getattr(chip, table, None)
    if t is None:
        return "none"
    link = (f" behind {t.links} {t.attach} link(s), +{t.link_latency_ns:g} ns"
            if t.linked else " on the package")
    return f"{fmt.number(t.capacity_gib, 'GiB')} {t.kind}, {fmt.eng(t.bytes_per_s, 'B/s')}{link}"


@dataclass(frozen=True)
class Metric:
    section: str                      # chip, train, prefill, decode, efficiency
    label: str
    cells: tuple[str, ...]            # per chip, formatted
    notes: tuple[tuple[str, ...], ...]  # per chip: flags of the runs behind the cell
    ratios: tuple[str, ...] = ()      # per chip after the first: value ÷ first chip's value


def _ratio_cells(vals) -> tuple[str, ...]:
    base = vals[0]
    return tuple(fmt.ratio(v / base) if (v is not None and base) else fmt.MISSING
                 for v in vals[1:])


def _pair_ratios(a, b) -> tuple[str, ...]:
    return tuple(f"{x} · {y}" for x, y in zip(_ratio_cells(a), _ratio_cells(b)))


def ratio_caption(cmp: Comparison) -> str:
    names = list(cmp.chips)
    if len(names) < 2:
        return ""
    return (f"ratios: each chip ÷ {names[0]} (times: below 1× is faster; rates: above 1× "
            f"is more)")


def metrics(cmp: Comparison) -> list[Metric]:
    """The summary rows, in display order."""
    s = cmp.settings
    names = list(cmp.chips)
    runs = [cmp.chips[n] for n in names]
    summ = [cmp.summary(n) for n in names]
    none = tuple(() for _ in names)
    out: list[Metric] = []

    def row(section, label, vals, cell, notes=none, ratio=True):
        out.append(Metric(section, label, tuple(cell(v) for v in vals), notes,
                          _ratio_cells(vals) if ratio else ()))

    out.append(Metric("chip", "dies (outline)", tuple(_dies(cr.chip) for cr in runs),
                      tuple(("cannot be built",) if check(cr.chip) else () for cr in runs)))
    row("chip", "die area", [die_area_mm2(cr.chip) for cr in runs], lambda v: fmt.number(v, "mm²"))
    row("chip", "clock", [cr.chip.clock_hz for cr in runs], lambda v: fmt.eng(v, "Hz"))
    a = [cr.chip.core for cr in runs]
    out.append(Metric("chip", "tensor cores × arrays", tuple(
        f"{cr.chip.tensor_cores} × {c.arrays} of {c.array.rows}×{c.array.cols}"
        for cr, c in zip(runs, a)), none))
    pdt = [cr.precision["prefill"]["compute"] for cr in runs]
    peaks = [cr.chip.peak_ops_per_s.get(d) if d else None for cr, d in zip(runs, pdt)]
    out.append(Metric("chip", "peak (inference precision)", tuple(
        f"{fmt.eng(v, 'OP/s')} {d}" if v else fmt.MISSING for v, d in zip(peaks, pdt)), none,
        _ratio_cells(peaks) if len(set(pdt)) == 1 else ()))
    row("chip", "DRAM bandwidth", [cr.chip.dram_bytes_per_s or None for cr in runs],
        lambda v: fmt.eng(v, "B/s"))
    row("chip", "DRAM capacity", [cr.chip.dram.capacity_gib if cr.chip.has_dram else None
                                  for cr in runs], lambda v: fmt.number(v, "GiB"))
    if cmp.tiered:
        out.append(Metric("chip", "DRAM tier 2", tuple(_tier(cr.chip) for cr in runs), none))
        if any(cr.chip.dram3 is not None for cr in runs):
            out.append(Metric("chip", "DRAM tier 3", tuple(_tier(cr.chip, "dram3")
                                                          for cr in runs), none))
    row("chip", "on-chip SRAM", [cr.chip.sram_bytes / 2**20 for cr in runs],
        lambda v: fmt.number(v, "MiB"))
    row("chip", "TDP", [cr.chip.tdp_w for cr in runs], lambda v: fmt.eng(v, "W"))
    ics = [cr.chip.interconnect for cr in runs]
    out.append(Metric("chip", "interconnect (per direction)", tuple(
        f"{ic.links} × {fmt.eng(ic.gb_per_s_per_link_per_direction * 1e9, 'B/s')} = "
        f"{fmt.eng(ic.bytes_per_s_per_direction, 'B/s')}"
        if ic is not None and ic.links else "none" for ic in ics), none,
        _ratio_cells([ic.bytes_per_s_per_direction if ic is not None and ic.links else None
                      for ic in ics])))
    row("chip", "chip cost (manufacturing)", [x["cost_usd"] for x in summ], fmt.money)
    infer_same = all(cr.precision["prefill"] == cr.precision["decode"] for cr in runs)
    for ph in (("train", "prefill, decode") if infer_same else ("train", "prefill", "decode")):
        key = ph.split(",")[0]
        ps = [cr.precision[key] for cr in runs]
        row("chip", f"precision: {ph}", ps,
            lambda p: f"unsupported: {p['unsupported']}" if p["unsupported"] else describe(p),
            ratio=False)

    tn = tuple(tuple(run_notes(cr.train)) for cr in runs)
    row("train", "train tokens/s per chip", [x["train"]["tokens_per_s"] for x in summ],
        lambda v: fmt.eng(v, "tok/s"), tn)
    row("train", "train step time", [x["train"]["step_s"] for x in summ], fmt.seconds, tn)
    dts = [x["train"]["mfu_peak_dtype"] for x in summ]
    out.append(Metric("train", "train MFU (of the chip's own peak)",
                      tuple(f"{fmt.pct(x['train']['mfu'])} of {d} peak"
                            if x["train"]["mfu"] is not None else fmt.MISSING
                            for x, d in zip(summ, dts)), tn,
                      _ratio_cells([x["train"]["mfu"] for x in summ])
                      if len(set(dts)) == 1 else ()))
    row("train", "train plan" + (f" ({s.cluster_chips} chips of {s.cluster_name})"
                                 if s.cluster_chips else ""),
        [x["train"]["plan"] for x in summ], lambda p: p["text"] if p else fmt.MISSING, tn,
        ratio=False)

    for i, p in enumerate(s.prompts):
        row("prefill", f"TTFT, {p}-token prompt", [x["prefill"][i]["ttft_s"] for x in summ],
            fmt.seconds, tuple(tuple(run_notes(cr.prefill[p])) for cr in runs))

    for i, d in enumerate(summ[0]["decode"]):
        b, c = d["batch"], d["context"]
        tpot = [x["decode"][i]["tpot_s"] for x in summ]
        tps = [x["decode"][i]["tokens_per_s"] for x in summ]
        out.append(Metric(
            "decode", f"decode b={b} ctx={c}: TPOT · tokens/s",
            tuple(f"{fmt.seconds(t)} · {fmt.eng(r, 'tok/s')}" for t, r in zip(tpot, tps)),
            tuple(tuple(run_notes(cr.decode[(b, c)])) for cr in runs), _pair_ratios(tpot, tps)))
        tier = [run_tier(cr.decode[(b, c)]) for cr in runs]
        if cmp.tiered and any(t["dram2_state_gib"] for t in tier):
            out.append(Metric(
                "decode", f"decode b={b} ctx={c}: state in tier 2 · its share of DRAM bytes",
                tuple(fmt.MISSING if t["dram2_state_gib"] is None else
                      f"{fmt.number(t['dram2_state_gib'], 'GiB')} · "
                      f"{fmt.pct(t['dram2_traffic_share'])}" for t in tier), none))
        if cmp.tiered and any(t["dram3_state_gib"] for t in tier):
            out.append(Metric(
                "decode", f"decode b={b} ctx={c}: state in tier 3 · its share of DRAM bytes",
                tuple(fmt.MISSING if t["dram3_state_gib"] is None else
                      f"{fmt.number(t['dram3_state_gib'], 'GiB')} · "
                      f"{fmt.pct(t['dram3_traffic_share'])}" for t in tier), none))

    ref = (s.ref_batch, s.contexts[0])
    row("efficiency", f"tokens/J (decode b={ref[0]} ctx={ref[1]})",
        [x["tokens_per_j"] for x in summ], lambda v: fmt.eng(v, "tok/J"),
        tuple(tuple(run_notes(cr.decode[ref])) for cr in runs))
    row("efficiency", f"$ per million tokens: capex amortised + energy "
                      f"(decode b={ref[0]} ctx={ref[1]})",
        [x["usd_per_mtok"] for x in summ], fmt.money,
        tuple(tuple(run_notes(cr.decode[ref])) for cr in runs))
    for ph in ("train", "prefill", "decode"):
        row("efficiency", f"bottleneck: {ph}", [x["bottleneck"][ph] for x in summ],
            lambda v: v or fmt.MISSING, ratio=False)
    return out
