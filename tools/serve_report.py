"""The tables and lines ``diptych serve`` prints: a run's summary and latencies, a sweep's
curve, the serving waterfall, and the setup every result states (scheduler, runtime,
parallelism per pool, precision; ``info`` of the ``--json``)."""

from __future__ import annotations

from . import fmt
from .precision_spec import describe as describe_precision
from .serve_afd import afd_rows


def setup_rows(info: dict) -> list[tuple[str, str]]:
    """``(name, text)`` of a result's setup (its ``info``: :data:`~diptych.sim.serving.serve.
    SETUP_KEYS`): scheduler, runtime, parallelism per pool, precision per pool (one line when
    the pools share it)."""
    pools = info["pools"]

    def who(p: dict) -> str:
        return "" if p["role"] == "mixed" else f"{p['role']}: "

    def layout(p: dict) -> str:      # an expert-parallel replica: its EP degree and attention
        if p.get("ep", 1) > 1:
            return f"EP {p['ep']} ({p['attention']} attention)"
        return f"TP {p['tp']}"

    par = "; ".join(f"{who(p)}{p['chip']}, {p['replicas']} replica"
                    f"{'s' if p['replicas'] != 1 else ''} x {layout(p)} = {p['chips']} chip"
                    f"{'s' if p['chips'] != 1 else ''}" for p in pools)
    precs = [describe_precision(p["precision"]) for p in pools]
    prec = precs[0] if len(set(precs)) == 1 else "; ".join(
        f"{who(p)}{d}" for p, d in zip(pools, precs))
    rows = [("scheduler", info["scheduling"]), ("runtime", info["runtime"]),
            ("parallelism", par), ("precision", prec)]
    left = [fmt.left_out(p["variant"]) for p in pools if p.get("variant")]
    if left:
        rows.append(("left out", "; ".join(dict.fromkeys(left))))
    return rows



def setup_line(info: dict) -> str:
    """:func:`setup_rows` in one line (under a sweep's table)."""
    return " · ".join(f"{k}: {v}" for k, v in setup_rows(info))


def ms(x) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.2f} s")


def stats_table(d: dict):
    from rich.table import Table

    t = Table("latency", "mean", "p50", "p90", "p99", title="latencies")
    for key, name in (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                      ("itl_s", "inter-token gap"), ("e2e_s", "end to end")):
        s = d[key]
        t.add_row(name, *[ms(s[k]) for k in ("mean", "p50", "p90", "p99")])
    return t


def summary_table(d: dict):
    from rich.table import Table

    t = Table("quantity", "value", show_header=False, title=d["deployment"],
              caption=d["load"])
    t.add_row("requests", f"{d['requests']} in {d['duration_s']:.1f} s "
              f"({d['requests_per_s']:.2f} req/s)")
    chips = f"{d['chips']} chip" + ("s" if d["chips"] != 1 else "")
    t.add_row("output tokens/s", f"{d['tokens_per_s']:.0f} ({d['tokens_per_s_per_chip']:.0f} "
              f"per chip, {chips})")
    t.add_row("input tokens/s", f"{d['input_tokens_per_s']:.0f}")
    slo = d["slo"]
    t.add_row("goodput", f"{d['goodput_rps']:.2f} req/s ({100 * d['slo_attainment']:.1f} % "
              f"meet TTFT ≤ {slo['ttft_s']:g} s and TPOT ≤ {slo['tpot_s']:g} s)")
    t.add_row("SLOs at p99 (MLPerf rule)", "[green]met[/green]" if d["meets_slo"]
              else "[red]missed[/red]")
    t.add_row("tokens per joule", f"{d['tokens_per_j']:.2f} ({d['energy_j'] / 1e3:.1f} kJ)")
    per_tok = sum((d.get("energy_breakdown_j_per_token") or {}).values())
    t.add_row("energy by component", fmt.energy_shares(d.get("energy_breakdown_j"))
              + (f" ({fmt.eng(per_tok, 'J')} per output token)" if per_tok else ""))
    kv = ", ".join(f"{'' if k['role'] == 'mixed' else k['role'] + ': '}{k['tokens']:,} tokens "
                   f"per replica ({k['kv_bytes'] / 2**30:.1f} GiB per chip)"
                   + (f" + {k['tier2_tokens']:,} in tier 2" if k.get("tier2_tokens") else "")
                   for k in d["kv"])
    t.add_row("KV cache", kv)
    t.add_row("KV occupancy", f"peak {100 * d['kv_peak_fraction']:.1f} %, mean "
              f"{100 * d['kv_mean_fraction']:.1f} %")
    t.add_row("preemptions", f"{d['preemptions']}" + (f" ({d['swap_bytes'] / 2**30:.1f} GiB "
                                                       f"swapped)" if d["swap_bytes"] else ""))
    kt = d["info"].get("kv_tiers")
    if kt:
        t.add_row("KV tiers", kv_tiers_text(kt))
    pc = d["info"].get("prefix_cache")
    if pc:
        t.add_row("prefix cache", prefix_cache_text(pc))
    q = d["queue"]
    if q["waiting"]:
        t.add_row("queue", f"waiting max {max(q['waiting']):.0f}, running max "
                  f"{max(q['running']):.0f}; mean in system {d['mean_in_system']:.1f}")
    info = d["info"]
    t.add_row("steps", f"{info['steps']:,} (timed as {info['execution']}; {info['oracle']} "
              f"step oracle, {info['oracle_simulations']} simulations)")
    for name, text in setup_rows(info) + afd_rows(info):
        t.add_row(name, text)
    return t


def _slo_cell(p: dict) -> str:
    if not p["meets_slo"]:
        return "[red]missed[/red]"
    if not p.get("sustained", True):
        return "[yellow]met, goodput < load[/yellow]"
    return "[green]met[/green]"


def sweep_table(sw: dict, slo: dict):
    from rich.table import Table

    t = Table("QPS", "tokens/s", "goodput", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
              "KV peak", "SLOs", "energy by component, per output token",
              title="throughput–latency curve")
    for p in sw["points"]:
        t.add_row(f"{p['qps']:g}", f"{p['tokens_per_s']:.0f}", f"{p['goodput_rps']:.2f}",
                  ms(p["ttft_s"]["p50"]), ms(p["ttft_s"]["p99"]), ms(p["tpot_s"]["p50"]),
                  ms(p["tpot_s"]["p99"]), f"{100 * p['kv_peak_fraction']:.0f} %",
                  _slo_cell(p),
                  fmt.energy_shares(p.get("energy_breakdown_j_per_token"), compact=True))
    return t


def waterfall_table(wf: dict):
    """The serving waterfall (sim/serving/waterfall.py) as a table."""
    from rich.table import Table


    t = Table(title=f"Where the device time goes ({fmt.seconds(wf['busy_s'])} busy; "
                    f"latency after each mechanism)")
    for c in ("mechanism", "adds", "share", "mean TTFT", "mean TPOT", "output tok/s"):
        t.add_column(c, justify="left" if c == "mechanism" else "right")
    for s in wf["steps"]:
        t.add_row(f"{s['mechanism']}: {s['what']}", fmt.seconds(s["busy_s"]),
                  fmt.pct(s["share"]),
                  fmt.seconds(s["ttft_s"]), fmt.seconds(s["tpot_s"]),
                  f"{s['tokens_per_s']:,.0f}")
    return t


def kv_tiers_text(kt: dict) -> str:
    """A result's ``info.kv_tiers`` in one line: what each tier held at its peak, the bytes
    copied between them and read from the second (and third), and what they cost."""
    gib = 2.0 ** 30
    three = ""
    if "tier3_peak_bytes" in kt:
        three = (f"; tier 3: peak {kt['tier3_peak_bytes'] / gib:.1f} GiB, read "
                 f"{kt['tier3_read_bytes'] / gib:.1f} GiB "
                 f"(+{fmt.eng(kt['tier3_read_added_s'], 's')}, "
                 f"{fmt.eng(kt['tier3_read_added_j'], 'J')})")
    return (f"{kt['mode']}: peak {kt['tier1_peak_bytes'] / gib:.1f} GiB in tier 1, "
            f"{kt['tier2_peak_bytes'] / gib:.1f} GiB in tier 2; moved "
            f"{kt['moved_bytes'] / gib:.1f} GiB ({fmt.eng(kt['move_s'], 's')}, "
            f"{fmt.eng(kt['move_j'], 'J')}); read from tier 2 "
            f"{kt['tier2_read_bytes'] / gib:.1f} GiB (+{fmt.eng(kt['tier2_read_added_s'], 's')}, "
            f"{fmt.eng(kt['tier2_read_added_j'], 'J')})" + three)


def prefix_cache_text(pc: dict) -> str:
    """A result's ``info.prefix_cache`` in one line: hits per tier, misses, evictions and the
    tier-2 copies with their cost."""
    gib = 2.0 ** 30
    return (f"{pc['prefixes']} prefixes: {pc['hits_tier1']} hits in tier 1, "
            f"{pc['hits_tier2']} in tier 2, "
            + (f"{pc['hits_tier3']} in tier 3, " if "hits_tier3" in pc else "")
            + f"{pc['misses']} misses "
            f"({100 * pc['hit_rate']:.0f} % hit); {pc['evicted']} evicted "
            f"({pc['stored_tier2']} to tier 2); tier 2 stored "
            f"{pc['tier2_store_bytes'] / gib:.2f} GiB ({fmt.eng(pc['store_s'], 's')}), loaded "
            f"{pc['tier2_load_bytes'] / gib:.2f} GiB ({fmt.eng(pc['load_s'], 's')}), "
            f"{fmt.eng(pc['move_j'], 'J')}")
