"""``diptych plan``: search the parallel layouts of a training run on a cluster and rank them."""

from __future__ import annotations

import json

import click

from ..workloads.precision import RECIPES
from . import fmt
from .errors import friendly
from ..workloads.moe import DISPATCHERS
from .moe_skew import MOE_SKEW


def _exposed(e: dict) -> str:
    """Exposed communication by kind (tp, cp, ep, pp, dp), the kinds that expose any:
    ``tp 1.2 ms, dp 40 ms``."""
    return ", ".join(f"{k} {fmt.seconds(v)}" for k, v in e.items() if v) or "none"


def _table(res, top: int):
    from rich.table import Table

    t = Table("#", "tp", "pp", "dp", "cp", "ep", "ZeRO", "schedule", "mb", "recompute",
              "offload", "step", "MFU", "bubble", "exposed communication", "memory/chip",
              title=f"best {min(top, len(res.plans))} of {res.candidates} plans "
                    f"({res.fitting} fit; {len(res.plans)} simulated with the engine)")
    for i, r in enumerate(res.plans[:top], 1):
        p = r.plan
        sched = f"interleaved v{p.virtual_stages}" if p.schedule == "interleaved" else p.schedule
        t.add_row(str(i), str(p.tp), str(p.pp), str(p.dp), str(p.cp), str(p.ep), str(p.zero),
                  sched, str(p.micro_batch), p.recompute, p.offload, fmt.seconds(r.seconds),
                  fmt.pct(r.mfu), fmt.pct(r.bubble_fraction), _exposed(r.exposed_comm_s),
                  fmt.gib(r.memory_bytes_per_chip))
    return t


def _detail(r):
    from rich.table import Table

    t = Table("collective", "group", "algorithm", "bytes/rank", "time",
              title=f"best plan: {r.plan.describe()}; memory per chip "
                    + ", ".join(f"{k} {fmt.gib(v)}" for k, v in r.memory.breakdown.items()))
    for label, c in r.comm.items():
        t.add_row(label, f"{c['group_kind']} ({c['group']})", c["algorithm"],
                  fmt.si(c["bytes"], "B"), fmt.seconds(c["seconds"]))
    return t


class IntList(click.ParamType):
    """A comma-separated list of positive integers (non-negative with ``zero_ok``)."""

    name = "LIST"

    def __init__(self, zero_ok: bool = False):
        self.zero_ok = zero_ok

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = []
        for part in str(value).split(","):
            try:
                v = int(part.strip())
            except ValueError:
                v = None
            if v is None or v < (0 if self.zero_ok else 1):
                kind = "non-negative" if self.zero_ok else "positive"
                self.fail(f"expected comma-separated {kind} integers, not {value!r}", param, ctx)
            out.append(v)
        return tuple(dict.fromkeys(out))


class NameList(click.ParamType):
    """A comma-separated list of names from :mod:`diptych.sim.cluster.plan`'s tuple
    ``domain`` (``SCHEDULES`` or ``RECOMPUTE``; looked up when a value is given, so that
    ``--help`` imports no simulator)."""

    name = "LIST"

    def __init__(self, domain: str):
        self.domain = domain

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from ..sim.cluster import plan as plan_mod

        choices = getattr(plan_mod, self.domain)
        out = [part.strip() for part in str(value).split(",")]
        for v in out:
            if v not in choices:
                self.fail(f"{v!r} is not one of {', '.join(choices)}", param, ctx)
        return tuple(dict.fromkeys(out))


@click.command("plan")
@click.option("--model", required=True, help="Built-in model name or path to a HF config.json.")
@click.option("--chip", required=True, help="Chip preset name or TOML path.")
@click.option("--cluster", "cluster", required=True,
              help="Cluster preset (dgx-h100, tpu-v4-pod) or TOML path.")
@click.option("--chips", type=int, required=True, help="Chips the run uses.")
@click.option("--batch", type=int, required=True, help="Global batch in sequences.")
@click.option("--seq", type=int, required=True, help="Sequence length in tokens.")
@click.option("--top", type=int, default=5, show_default=True, help="Plans to show.")
@click.option("--refine", type=int, default=8, show_default=True,
              help="Best screened plans to simulate with the engine.")
@click.option("--max-tp", type=int, help="Largest tensor-parallel degree (default: the "
                                         "scale-up domain).")
@click.option("--attention", type=click.Choice(["fused", "unfused"]), default="fused",
              show_default=True)
@click.option("--tp", "tp", type=IntList(), help="Only these tensor-parallel degrees (e.g. 8 "
                                                 "or 4,8).")
@click.option("--pp", "pp", type=IntList(), help="Only these pipeline depths.")
@click.option("--cp", "cp", type=IntList(), help="Only these context-parallel degrees.")
@click.option("--ep", "ep", type=IntList(), help="Only these expert-parallel degrees (MoE).")
@click.option("--zero", "zero", type=IntList(zero_ok=True),
              help="ZeRO stages to try (default 0,1,2,3).")
@click.option("--micro-batch", "micro_batch", type=IntList(),
              help="Micro-batch sizes in sequences to try (default 1,2,4).")
@click.option("--virtual-stages", "virtual_stages", type=IntList(),
              help="Virtual stages per rank for interleaved 1F1B (default 2,4).")
@click.option("--schedule", "schedule", type=NameList("SCHEDULES"),
              help="Pipeline schedules to try (default 1f1b,gpipe,interleaved).")
@click.option("--recompute", "recompute", type=NameList("RECOMPUTE"),
              help="Activation recomputation modes to try (default none,selective,full).")
@click.option("--offload", "offload", type=NameList("OFFLOADS"),
              help="Training state in the chip's second memory tier ([dram2]) to try: none, "
                   "optimizer (master weights and Adam moments), params (those and the "
                   "weights), ZeRO-Offload-style (docs/cluster.md, \"Offload\"). Default: all "
                   "three on a chip with [dram2], none otherwise.")
@click.option("--recipe", type=click.Choice(RECIPES),
              help="Train with this precision recipe (docs/precision.md) instead of BF16: "
                   "fp8-delayed, fp8-current or mxfp8.")
@click.option("--moe-skew", type=MOE_SKEW,
              help="MoE: the experts' popularity skew (coefficient of variation, or aux-loss: "
                   "0.31, as measured; default 0).")
@click.option("--moe-capacity-factor", type=float,
              help="MoE: expert capacity over its mean tokens (default: dropless).")
@click.option("--moe-pad", is_flag=True, default=None,
              help="MoE: pad every expert to its capacity (needs --moe-capacity-factor).")
@click.option("--moe-dispatcher", type=click.Choice(list(DISPATCHERS)), default=None,
              help="MoE: how the router and the token permutation run: fused (default: one "
                   "top-k, one gather each way) or megatron (Megatron-Core's PyTorch code: "
                   "its small kernels and two host synchronisations a layer; "
                   "docs/workloads.md, \"Mixture of experts\").")
@click.option("--sequence-parallel/--no-sequence-parallel", "sequence_parallel", default=None,
              help="Megatron-Core's sequence parallelism in every plan with tp > 1 "
                   "(default on; --no-sequence-parallel ranks the plans without it).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--trace", type=click.Path(dir_okay=False),
              help="Write the best plan's step as a Perfetto trace (one process per rank).")
@click.option("--export-et", "export_et", type=click.Path(file_okay=False),
              help="Write the best plan's step as Chakra execution traces (one per rank).")
@click.option("--execution", type=click.Choice(["schedule", "sum"]), default="schedule",
              show_default=True,
              help="How the refined plans' layers are timed: schedule (each layer kind's "
                   "program scheduled as `diptych run` does: residency, fusion, launches, "
                   "exposed tensor-parallel all-reduces) or sum (its ops summed, the "
                   "all-reduces hidden by the overlap rule). The roofline screen sums.")
@friendly
def plan(model, chip, cluster, chips, batch, seq, top, refine, max_tp, attention, tp, pp, cp,
         ep, zero, micro_batch, virtual_stages, schedule, recompute, offload, recipe, moe_skew,
         moe_capacity_factor, moe_pad, moe_dispatcher, sequence_parallel, as_json, trace,
         export_et, execution):
    """Search tp × pp × dp × cp × ep, ZeRO stage, schedule, micro-batch and recomputation
    for a training step on a cluster; rank the plans that fit by simulated step time.

    Every candidate's memory is checked, those that fit are screened with a roofline
    estimate, and the best --refine are simulated with the engine and an event-level
    pipeline. --tp/--pp/--cp/--ep/--zero/--micro-batch/--virtual-stages/--schedule/
    --recompute narrow the search (comma-separated values), e.g. for MoE models whose space
    is large.
    """
    import sys

    from rich.console import Console

    from ..sim.cluster.search import search_plans
    from ..sim.run import Scenario
    from ..sim.cluster.trace import export_chakra, write_perfetto_trace
    from .progress import progress_display

    from ..sim.limits import MAX_REFINE

    for name, v in (("top", top), ("refine", refine), ("max-tp", max_tp)):
        if v is not None and v < 1:
            raise ValueError(f"--{name} must be a positive integer, not {v}")
    from ..sim.cluster.trace import MAX_ET_RANKS
    if export_et and chips > MAX_ET_RANKS:     # known before the search: say so at once
        raise ValueError(f"--export-et writes one trace per rank: at most {MAX_ET_RANKS:,} "
                         f"ranks, not --chips {chips:,}")
    for name, v in (("top", top), ("refine", refine)):
        if v is not None and v > MAX_REFINE:
            raise ValueError(f"--{name} must be at most {MAX_REFINE} plans (sim/limits.py; "
                             f"each is simulated with the engine), not {v:,}")
    if sequence_parallel and tp is not None and max(tp) < 2:
        raise ValueError(f"--sequence-parallel needs plans with tensor parallelism (tp > 1), "
                         f"not only --tp {','.join(map(str, tp))}")
    narrowed = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "zero": zero,
                "micro_batches": micro_batch, "virtual_stages": virtual_stages,
                "schedules": schedule, "recompute": recompute, "offload": offload}
    space = {k: v for k, v in narrowed.items() if v is not None}
    with progress_display("plan", enabled=not as_json) as progress:
        s = Scenario.of(phase="train", chips=chips, batch=batch, seq=seq, recipe=recipe,
                        attention=attention, execution=execution, moe_skew=moe_skew,
                        moe_capacity_factor=moe_capacity_factor, moe_pad=moe_pad,
                        moe_dispatcher=moe_dispatcher, sequence_parallel=sequence_parallel)
        res = search_plans(model, chip, cluster, s, refine=max(refine, top), max_tp=max_tp,
                           progress=progress, **space)
    if not res.plans:
        raise ValueError(f"no plan fits: {res.candidates} candidates, none within the chip's "
                         f"memory; try more chips, a smaller --batch or --seq")
    best = res.plans[0]
    if trace:
        write_perfetto_trace(best, trace)
    if export_et:
        export_chakra(best, export_et)
    if as_json:
        click.echo(json.dumps(res.to_dict(top), indent=2))
        return
    con = Console() if sys.stdout.isatty() else Console(width=200)
    con.print(_table(res, top))
    con.print(_detail(best))
    if "offload" in best.info:
        con.print(fmt.offload_line(best.info["offload"]))
