"""Human formatting of the quantities the commands print: times, rates, shares, ratios.

Every function takes ``None`` for a missing value and returns ``"–"``.
"""

from __future__ import annotations

MISSING = "–"


def seconds(s: float | None) -> str:
    """Four significant digits in the unit that keeps 1-999 before the point: ``3.091 s``,
    ``32.91 ms``, ``8.18 µs`` (``1,234 s`` from a thousand seconds on)."""
    if s is None:
        return MISSING
    if s >= 1000:
        return f"{s:,.0f} s"
    if s >= 1:
        return f"{s:.4g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.4g} ms"
    return f"{s * 1e6:.4g} µs"


def si(x: float | None, unit: str = "") -> str:
    """``144.37 GFLOP``, ``70.26 GB``: SI prefixes k to E."""
    if x is None:
        return MISSING
    for s, p in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= s:
            return f"{x / s:.2f} {p}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def eng(x: float | None, unit: str = "", digits: int = 3) -> str:
    """Engineering notation: ``digits`` significant digits and an SI prefix whose exponent is
    a multiple of 3 (p to E): ``9.83 TB/s``, ``412 mW``; a unit of several letters that is
    not an SI symbol takes the prefix apart: ``2.65 k tok/s``, ``7.88 tok/J``."""
    if x is None:
        return MISSING
    if x == 0 or x != x:
        return f"{x:g} {unit}".rstrip()
    import math
    e3 = max(-4, min(6, math.floor(math.log10(abs(x)) / 3)))
    m = x / 10 ** (3 * e3)
    if abs(float(f"{m:.{digits}g}")) >= 1000 and e3 < 6:   # 999.96 k rounds to 1.00 M
        e3 += 1
        m = x / 10 ** (3 * e3)
    prefix = "pnµm kMGTPE"[e3 + 4].strip()
    sep = " " if prefix and unit[:3] in ("tok", "seq", "req") else ""
    return f"{m:.{digits}g} {prefix}{sep}{unit}".rstrip()


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.683`` → ``68.3 %``."""
    return MISSING if x is None else f"{100 * x:.{digits}f} %"


def number(x: float | None, unit: str = "") -> str:
    """Three significant digits below 1000, whole numbers with thousands separators above:
    ``30.4 tok/s``, ``9,664 tok/s``."""
    if x is None:
        return MISSING
    text = f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return f"{text} {unit}".rstrip()


#: Unit suffixes of result columns and how an axis label says them.
_UNITS = (("_per_s_per_usd", "/s per $"), ("_tokens_per_s", " tokens/s"), ("_per_s", "/s"),
          ("_per_j", "/J"), ("_j_per_token", " per token (J)"), ("_per_token", " per token"),
          ("_mm2", " (mm²)"),
          ("_usd", " ($)"), ("_gib", " (GiB)"), ("_mib", " (MiB)"), ("_ghz", " (GHz)"),
          ("_j", " (J)"), ("_w", " (W)"), ("_s", " (s)"))


def column_label(name: str) -> str:
    """A result column as an axis label: its unit suffix said (``area_mm2`` → ``area
    (mm²)``, ``decode_tokens_per_s`` → ``decode tokens/s``), underscores as spaces; ``mfu``
    and ``hfu`` upper-case."""
    if name in ("mfu", "hfu"):
        return name.upper()
    if name == "usd_per_mtok":
        return "$ per million tokens"
    for suffix, said in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].replace("_", " ") + said
    return name.replace("_", " ")


def money(x: float | None) -> str:
    """Dollars, one format everywhere: ``$5,359``, ``$0.00141`` (as :func:`number`)."""
    return MISSING if x is None else f"${number(x)}"


def cost_basis(cost) -> str:
    """What a chip's ``$ per million tokens`` is made of (its ``[cost]`` terms), in words."""
    return (f"chip capex amortised over {cost.lifetime_years:g} years at "
            f"{cost.utilisation:.0%} utilisation + energy at ${cost.usd_per_kwh:g}/kWh, "
            f"PUE {cost.pue:g}")


def ratio(x: float | None) -> str:
    """``3.88×``, ``0.258×``."""
    return MISSING if x is None else f"{x:.3g}×"


def gib(x: float | None) -> str:
    """Bytes in binary gigabytes, one decimal: ``70.6 GiB`` (memory sizes, as chips quote
    their capacity)."""
    return MISSING if x is None else f"{x / 2**30:.1f} GiB"


#: How the waterfall's mechanisms read in the terminal.
_MECHANISM = {"recomputation": "recomputation", "gemm": "GEMMs below peak",
              "pipeline_bubble": "pipeline bubble",
              "non_gemm": "non-GEMM work", "recipe": "recipe overheads",
              "launches": "launches and syncs", "communication": "exposed communication",
              "power": "power-limited clock"}


#: What each flag of a run's variant leaves out, in words (``info.variant``,
#: ``info.pools[].variant``: :class:`~diptych.sim.run.variant.Variant`'s fields).
LEFT_OUT = {"free_vector": "vector-unit ops", "free_recipe": "recipe and format ops",
            "no_launches": "launches and syncs", "free_comm": "collectives",
            "raw_links": "the collective library's losses (links at line rate)",
            "no_power_limit": "the power limit"}


def left_out(variant: dict) -> str:
    """What a run's ``variant`` (its fields as a dict) leaves out, in words (``--ideal``:
    every overhead)."""
    return ", ".join(text for key, text in LEFT_OUT.items() if variant.get(key))


def waterfall_line(wf: dict) -> str:
    """``efficiency: peak 100 % − GEMMs below peak 25.8 % − … = MFU 66.0 %`` (steps that take
    less than 0.05 % left out)."""
    parts = [f"{_MECHANISM.get(s['mechanism'], s['mechanism'])} {pct(s['share'])}"
             for s in wf["steps"] if abs(s["share"]) >= 0.0005]
    return ("efficiency: peak 100.0 % − " + " − ".join(parts)
            + f" = MFU {pct(wf['mfu'])}")


def energy_shares(parts: dict | None, compact: bool = False) -> str:
    """``MAC 41.3 % · SRAM 12.0 % · DRAM 30.1 % · static 15.2 % of 1.23 kJ``: a result's
    ``energy_breakdown_j`` as shares of its total, in the components' order
    (:data:`~diptych.sim.energy_parts.COMPONENTS`, so that lines compare), those under
    0.05 % left out; ``–`` without one. ``compact`` (a table's cell): whole percents, those
    under 0.5 % left out: ``MAC 41 · SRAM 12 · DRAM 30 · static 15 % of 1.23 kJ``."""
    from ..sim.energy_parts import LABELS

    total = sum((parts or {}).values())
    if not parts or total <= 0:
        return MISSING
    if compact:
        shown = [(k, v / total) for k, v in parts.items() if v / total >= 0.005]
        return " · ".join(f"{LABELS.get(k, k)} {100 * x:.0f}" for k, x in shown) \
            + f" % of {eng(total, 'J')}"
    shown = [(k, v / total) for k, v in parts.items() if v / total >= 0.0005]
    return " · ".join(f"{LABELS.get(k, k)} {pct(x)}" for k, x in shown) \
        + f" of {eng(total, 'J')}"


def energy_line(parts: dict | None) -> str:
    """``energy by component  MAC 41.3 % · … of 1.23 kJ`` (:func:`energy_shares`)."""
    return f"energy by component  {energy_shares(parts)}"


def stack_text(info: dict) -> str | None:
    """A result's ``info["stack"]`` (sim/run/stack.py ``stack_info``) in words for a report
    row, None at the defaults; a training run's always names its loss implementation and
    whether it runs sequence parallelism."""
    st = info.get("stack") or {}
    words = [w for w, on in (("NVLS off (NCCL_NVLS_ENABLE=0)", st.get("nvls") is False),
                             (f"attention by {st.get('attention_kernel')}",
                              st.get("attention_kernel", "default") != "default"),
                             ("TP comm overlap off (Megatron's NCCL path)",
                              st.get("tp_comm_overlap") is False),
                             (f"elementwise kernels by {st.get('elementwise_kernels')}",
                              st.get("elementwise_kernels", "default") != "default"),
                             (f"kernel order: {st.get('kernel_order')}",
                              st.get("kernel_order", "default") != "default"),
                             (f"TE userbuffers settings {st.get('tp_overlap_config')}",
                              st.get("tp_overlap_config") is not None),
                             (f"collective algorithms {st.get('collective_algorithms')} "
                              f"(NCCL_ALGO)", st.get("collective_algorithms") is not None),
                             (f"loss: {st.get('cross_entropy')} cross-entropy "
                              f"(cross_entropy_loss_fusion "
                              f"{'true' if st.get('cross_entropy') == 'fused' else 'false'})",
                              "cross_entropy" in st),
                             (f"sequence parallelism "
                              f"{'on' if st.get('sequence_parallel') else 'off'}",
                              "sequence_parallel" in st),
                             (f"hidden dropout {st.get('hidden_dropout')}",
                              bool(st.get("hidden_dropout"))),
                             (f"attention dropout {st.get('attention_dropout')}"
                              + (" (not charged: the chip has no attention table with a "
                                 "dropout_cost)"
                                 if st.get("attention_dropout_cost", 1.0) == 0.0 else ""),
                              bool(st.get("attention_dropout"))))
             if on]
    return ", ".join(words) or None


def offload_line(off: dict) -> str:
    """One line on a plan's offload (:func:`diptych.sim.run.offload.tier_report`): where each
    tensor lives, each tier's bytes, and the second tier's traffic, time and energy (and the
    third's, when part of the offloaded state lives there)."""
    three = off.get("tier3_bytes", 0.0) > 0
    slow = "tiers 2-3" if three else "tier 2"
    where = ", ".join(f"{k} in {slow if v == 'dram2' else 'tier 1'}"
                      for k, v in off["placement"].items())
    if three:
        return (f"offload {off['offload']}: {where}; tier 1 {gib(off['tier1_bytes'])}, tier 2 "
                f"{gib(off['tier2_bytes'])}, tier 3 {gib(off['tier3_bytes'])} per chip; they "
                f"move {si(off['tier2_bytes_moved'], 'B')} and "
                f"{si(off['tier3_bytes_moved'], 'B')} per step: "
                f"{seconds(off['transfer_seconds'])} at their "
                f"{si(off['tier2_bytes_per_s'], 'B/s')} and "
                f"{si(off['tier3_bytes_per_s'], 'B/s')}, {off['transfer_energy_j']:.3g} J")
    return (f"offload {off['offload']}: {where}; tier 1 {gib(off['tier1_bytes'])}, tier 2 "
            f"{gib(off['tier2_bytes'])} per chip; tier 2 moves "
            f"{si(off['tier2_bytes_moved'], 'B')} per step: "
            f"{seconds(off['transfer_seconds'])} at its "
            f"{si(off['tier2_bytes_per_s'], 'B/s')}, {off['transfer_energy_j']:.3g} J")
