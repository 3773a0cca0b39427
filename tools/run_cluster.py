"""``diptych run`` on a cluster: a parallel plan's step (``--cluster``, ``--pp`` ...).

:func:`run_plan` is what the ``run`` command does when it is given ``--cluster`` or any flag
that only a parallel plan has (``--pp``, ``--ep``, ``--cp``, ``--zero``, ``--zero-shards``,
``--schedule``, ``--virtual-stages``, ``--recompute selective``; :func:`plan_flags_given`).
Without ``--cluster`` such a plan runs on one scale-up domain of ``--chips`` chips on the
chip's own links (:func:`diptych.sim.cluster.topology.single_domain`: the fabric ``run``
assumes without a cluster), and the output says so. It prints the plan, step time,
tokens/s, MFU/HFU, the pipeline bubble, exposed communication by kind, memory per chip and
the advice when it does not fit, then every pipeline stage and every collective; ``--json``
prints :meth:`~diptych.sim.cluster.step.ClusterResult.to_dict`; ``--trace`` writes the
step's Perfetto trace with one process per rank.
"""

from __future__ import annotations

import json

import click

from . import fmt
from .precision_spec import describe
from .result_check import check_result

#: Options of ``run`` that only a parallel plan has.
PLAN_ONLY = ("pp", "ep", "cp", "zero", "zero_shards", "schedule", "virtual_stages")


def plan_flags_given(opts: dict) -> list[str]:
    """The plan-only options given (as ``--flag``), ``--recompute selective`` included."""
    out = [f"--{k.replace('_', '-')}" for k in PLAN_ONLY if opts.get(k) is not None]
    if opts.get("recompute") == "selective":
        out.append("--recompute selective")
    return out


def _exposed(e: dict) -> str:
    return ", ".join(f"{k} {fmt.seconds(v)}" for k, v in e.items() if v) or "none"


def totals_table(d: dict):
    """The step's totals (a :meth:`ClusterResult.to_dict`) as a rich table."""
    from rich.table import Table

    t = Table("quantity", "value", show_header=False, title="totals")
    t.add_row("plan", d["plan_text"])
    where = d["cluster"] + (" (default: one switch domain on the chip's own links; give "
                            "--cluster for a cluster)" if d["info"].get("cluster_default")
                            else "")
    t.add_row("cluster", f"{d['chips']} chips of {where}")
    t.add_row("precision", describe(d["precision"]))
    stack = fmt.stack_text(d.get("info", {}))
    if stack:
        t.add_row("software stack", stack)
    ph = d["phase"]
    if ph == "prefill":
        t.add_row("time to first token", fmt.seconds(d["ttft_s"]))
    elif ph == "decode":
        t.add_row("time per output token", fmt.seconds(d["tpot_s"])
                  + f" (mean over {d['info']['decode']['gen']} steps after a "
                    f"{d['info']['decode']['prompt']}-token prompt)")
        t.add_row("tokens/s per user", f"{d['tokens_per_s_per_user']:.1f}")
    else:
        t.add_row("step time", fmt.seconds(d["seconds"]))
    t.add_row("tokens/s", f"{d['tokens_per_s']:.1f} ({d['tokens_per_s_per_chip']:.1f} per chip)")
    dt = d["info"]["compute_dtype"]
    t.add_row("MFU / HFU", f"{fmt.pct(d['mfu'])} / {fmt.pct(d['hfu'])} of the chips' {dt} peak")
    m, p = d["micro_batches"], d["pp"]
    t.add_row("pipeline bubble", f"{fmt.pct(d['bubble_fraction'])} ({m} micro-batch"
              f"{'es' if m > 1 else ''} of {d['micro_batch']} over {p} stage"
              f"{'s' if p > 1 else ''}, {d['info']['schedule']})")
    t.add_row("exposed communication", _exposed(d["exposed_comm_s"]))
    if d.get("energy_j"):
        parts = ", ".join(f"{k.replace('_', ' ')} {fmt.si(v, 'J')}"
                          for k, v in d["energy_breakdown"].items() if v)
        t.add_row("energy per step", f"{fmt.si(d['energy_j'], 'J')} ({parts}); "
                  f"{d['tokens_per_j']:.3g} tokens/J")
        t.add_row("energy by component", fmt.energy_shares(d.get("energy_breakdown_j")))
        hot = " [red]above the TDP[/red]" if d.get("exceeds_tdp") else ""
        t.add_row("power per chip", f"{fmt.si(d['power_w'], 'W')} of its "
                  f"{fmt.si(d['tdp_w'], 'W')} TDP{hot}")
    if d.get("usd_per_mtok") is not None:
        t.add_row("cost", f"{fmt.money(d['cost_usd'])} per chip (manufacturing), "
                  f"{fmt.money(d['usd_per_mtok'])} per million tokens (capex amortised + "
                  "energy: the chip's [cost] terms)")
    mem = d["memory"]
    bd = ", ".join(f"{k} {fmt.gib(v)}" for k, v in mem["breakdown"].items())
    held = (f"{fmt.gib(mem['memory_bytes'])} of {fmt.gib(mem['capacity_bytes'])}"
            if "tier2_parts" not in mem else
            f"tier 1 {fmt.gib(mem['tier1_bytes'])} of {fmt.gib(mem['capacity_bytes'])}, tier 2 "
            f"{fmt.gib(mem['tier2_bytes'])} of {fmt.gib(mem['tier2_capacity_bytes'])}")
    t.add_row("memory per chip", f"{held} on stage {mem['worst_stage']} ({bd}): "
              + ("fits" if mem["fits"] else "[red]does not fit[/red]"))
    if not mem["fits"]:
        t.add_row("advice", mem["advice"] or "-")
    return t


def stages_table(d: dict):
    """Per pipeline stage: forward/backward compute of its chunks per micro-batch, when its
    pipeline finishes, the exposed tail (gradient reduction, optimizer, ZeRO all-gather),
    its end and its memory."""
    from rich.table import Table

    train = d["phase"] == "train"
    cols = (["stage", "forward/mb"] + (["backward/mb"] if train else []) + ["pipeline done"]
            + (["grad reduce", "optimizer", "param all-gather"] if train else [])
            + ["end", "memory"])
    t = Table(*cols, title="pipeline stages (per device; /mb: one micro-batch)")
    for s, mem in zip(d["stage_seconds"], d["memory"]["per_stage"]):
        keys = (["forward_s"] + (["backward_s"] if train else []) + ["finish_s"]
                + (["grad_reduce_exposed_s", "optimizer_s", "param_all_gather_exposed_s"]
                   if train else []) + ["end_s"])
        t.add_row(str(s["stage"]), *(fmt.seconds(s[k]) for k in keys), fmt.gib(mem))
    return t


def comm_table(d: dict):
    """Every distinct collective of the step: group, algorithm, bytes per rank, time."""
    from rich.table import Table

    t = Table("collective", "group", "algorithm", "bytes/rank", "time",
              title="collectives (one of each; exposed totals above)")
    for label, c in d["comm"].items():
        t.add_row(label, f"{c['group_kind']} ({c['group']})", c["algorithm"],
                  fmt.si(c["bytes"], "B"), fmt.seconds(c["seconds"]))
    return t


def curve_table(results: list):
    from rich.table import Table

    phase = results[0].phase
    label = {"prefill": "TTFT", "decode": "TPOT", "train": "step"}[phase]
    t = Table("batch", label, "tokens/s per chip", "MFU", "bubble", "exposed comm",
              "memory/chip", "fits", "energy by component", title="batching curve")
    for r in results:
        t.add_row(str(r.batch), fmt.seconds(r.seconds), f"{r.tokens_per_s / r.chips:.1f}",
                  fmt.pct(r.mfu), fmt.pct(r.bubble_fraction),
                  fmt.seconds(sum(r.exposed_comm_s.values())),
                  fmt.gib(r.memory_bytes_per_chip), "yes" if r.fits else "no",
                  fmt.energy_shares(r.energy_breakdown_j, compact=True))
    return t


def run_plan(con, *, chip, model, phase, batches, cluster, prompt, gen, seq, chips, tp, dp,
             pp, ep, cp, zero, zero_shards, schedule, virtual_stages, micro_batch, recompute,
             overlap, attention, weights_dtype, act_dtype, kv_dtype, as_json, trace,
             progress, execution=None, recipe=None, moe=None, variant=None,
             waterfall=None) -> None:
    """Run the plan for each batch of ``batches`` and print (module docstring);
    ``execution``: how each layer kind is timed (``run --execution``; None: the schedule);
    ``moe``: the MoE routing keywords of :meth:`~diptych.sim.run.Scenario.of` (and the
    stack settings', ``nvls``, ``attention_kernel``, ``tp_comm_overlap``); ``variant``
    (``--ideal``) and ``waterfall`` (None: on for one batch size) as
    :func:`~diptych.sim.cluster.run.run_cluster_step` takes them."""
    from ..sim.cluster.trace import write_perfetto_trace
    from ..sim.cluster.run import build_plan, run_cluster_step
    from ..sim.run import Scenario

    fields = {k: v for k, v in (("zero", zero), ("zero_shards", zero_shards),
                                ("schedule", schedule), ("virtual_stages", virtual_stages))
              if v is not None}
    length = seq if phase == "train" else prompt
    if phase == "train" and length is None:
        raise ValueError("train needs --seq (sequence length in tokens)")
    if phase != "train":
        for flag, v in (("--zero", zero), ("--zero-shards", zero_shards),
                        ("--schedule", schedule), ("--virtual-stages", virtual_stages),
                        ("--recompute", recompute)):
            if v is not None:
                raise ValueError(f"{flag} applies to training; {phase} runs the plan forward "
                                 f"only (micro-batches streaming through the stages, no "
                                 f"optimizer state)")
    if cluster is not None:
        from ..arch.cluster import load_cluster
        cluster = load_cluster(cluster)
        if chips is not None and chips > cluster.chips:
            raise ValueError(f"--chips ({chips}) exceeds the cluster's {cluster.chips} chips "
                             f"({cluster.name})")
    results = []
    for i, b in enumerate(batches):
        progress(i, len(batches), f"batch {b}")
        s = Scenario.of(phase=phase, batch=b, prompt=prompt, gen=gen,
                        seq=length if phase == "train" else None, chips=chips, tp=tp, dp=dp,
                        pp=pp, cp=cp, ep=ep, micro_batch=micro_batch,
                        recompute=recompute or "none", overlap=overlap,
                        weights_dtype=weights_dtype, act_dtype=act_dtype, kv_dtype=kv_dtype,
                        recipe=recipe, attention=attention, execution=execution, **(moe or {}))
        res = run_cluster_step(chip, model, s, cluster=cluster, plan=build_plan(s, **fields),
                               variant=variant,
                               waterfall=len(batches) == 1 if waterfall is None else waterfall)
        results.append(res)
    progress(len(batches), len(batches), "done")
    for r in results:
        check_result(r.to_dict(), "run --cluster")
    last = results[-1]
    if trace:
        write_perfetto_trace(last, trace)
    if as_json:
        out = (results[0].to_dict() if len(results) == 1
               else {"curve": [r.to_dict() for r in results]})
        click.echo(json.dumps(out, indent=2))
        return
    d = last.to_dict()
    con.print(f"{d['model']} {d['phase']} on {d['chips']} × {d['chip']}, batch {d['batch']}")
    con.print(totals_table(d))
    if "offload" in d["info"]:
        con.print(fmt.offload_line(d["info"]["offload"]))
    if last.waterfall:
        con.print(fmt.waterfall_line(last.waterfall))
    con.print(stages_table(d))
    if d["comm"]:
        con.print(comm_table(d))
    if len(results) > 1:
        con.print(curve_table(results))
    for r in results[:-1]:
        if not r.fits:
            con.print(f"[yellow]batch {r.batch}: does not fit: {r.memory.advice}[/yellow]")
