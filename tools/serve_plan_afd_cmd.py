"""``diptych serve-plan-afd``: the attention:FFN ratio search — attention and FFN pool sizes,
micro-batches and attention layout, for both role assignments of two designs, under SLOs at a
target load (the library: :mod:`diptych.sim.serving.afd_search`; docs/serving.md,
"Attention–FFN disaggregation")."""

from __future__ import annotations

import sys

import click

from ..arch.dtypes import DTYPES
from .recipe_option import inference_recipe_option
from .errors import friendly
from .jsonout import dumps
from .plan_cmd import IntList
from .serve_plan_cmd import _fmt, _table


class LayoutList(click.ParamType):
    """``tp``, ``dp`` or ``tp,dp``: the attention pool layouts to try."""

    name = "LIST"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = tuple(dict.fromkeys(p.strip() for p in str(value).split(",")))
        if not out or any(p not in ("tp", "dp") for p in out):
            self.fail(f"expected tp, dp or both (comma-separated), not {value!r}", param, ctx)
        return out


def assignment_table(res: dict):
    """The best plan per role assignment (:func:`~diptych.sim.serving.afd_search.afd_search`'s
    ``per_assignment``): by $/Mtok and by goodput per chip, and what binds it."""
    from rich.markup import escape
    from rich.table import Table

    slo = res["slo"]
    t = Table("assignment", "best n:m, k ($/Mtok)", "$/Mtok", "goodput/chip (req/s)",
              "best n:m, k (goodput/chip)", "goodput/chip (req/s) ", "binding",
              title=f"{res['model']}: the best attention:FFN plan per assignment (p99 TTFT <= "
                    f"{slo['ttft_s']:g} s, TPOT <= {slo['tpot_s']:g} s, up to "
                    f"{res['space']['chips']} chips; {res['candidates']} plans)")

    def short(r):
        return f"{r['ratio']} ({r['attention_layout']}), k={r['microbatches']}"

    for name, d in res["per_assignment"].items():
        b, g = d["best"], d["best_goodput"]
        if b is None:
            t.add_row(escape(name), "[red]none meets the SLOs[/red]", "", "", "", "",
                      escape(d["binding"]))
            continue
        t.add_row(escape(name), short(b), _fmt(b["usd_per_mtok"], ".3f"),
                  _fmt(b["goodput_rps_per_chip"], ".3g"), short(g),
                  _fmt(g["goodput_rps_per_chip"], ".3g"), escape(d["binding"]))
    return t


@click.command("serve-plan-afd")
@click.option("--model", required=True, help="Built-in model name or path to a HF config.json.")
@click.option("--chip", "chips_", multiple=True, required=True,
              help="A chip design (preset or TOML path); give two to search both assignments "
                   "(X attention + Y FFN, and the reverse), one to put it in both roles.")
@click.option("--chips", type=int, required=True,
              help="The most chips a plan may use, attention and FFN pools together.")
@click.option("--qps", type=float, required=True, help="Target arrival rate (requests/s).")
@click.option("--prompt", default="1024", show_default=True,
              help="Prompt lengths: N, or lognormal:mean=M,sigma=S, uniform:LO:HI (as serve).")
@click.option("--gen", default="128", show_default=True, help="Output lengths (as --prompt).")
@click.option("--requests", type=int, default=200, show_default=True,
              help="Requests per plan (the same stream for every plan).")
@click.option("--slo-ttft", type=float, default=2.0, show_default=True,
              help="p99 time-to-first-token SLO (s).")
@click.option("--slo-tpot", type=float, default=0.2, show_default=True,
              help="p99 time-per-output-token SLO (s).")
@click.option("--attention-chips", type=IntList(), help="Attention pool sizes to try (default: "
              "every size the model splits over, below --chips).")
@click.option("--ffn-chips", type=IntList(), help="FFN pool sizes to try (default: every size "
              "below --chips that divides a MoE model's experts, or splits a dense model).")
@click.option("--afd-microbatches", type=IntList(), default="1,2,4", show_default=True,
              help="Micro-batch counts to try.")
@click.option("--afd-attention", type=LayoutList(), default="tp", show_default=True,
              help="Attention pool layouts to try: tp, dp or tp,dp.")
@click.option("--weights-dtype", type=click.Choice(DTYPES), help="Weight precision.")
@click.option("--act-dtype", type=click.Choice(DTYPES), help="Activation precision.")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache precision.")
@inference_recipe_option
@click.option("--runtime", help="Serving runtime's host costs for every plan (as `diptych "
              "serve --runtime`; default: the first --chip's, so that the assignments differ "
              "only in the hardware).")
@click.option("--kv-admission", type=click.Choice(["on-demand", "reserve"]), default=None,
              help="How requests enter the KV cache (as `diptych serve --kv-admission`). "
                   "Default: as the runtime's engine does (trtllm-*: reserve), else on demand.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--top", type=int, default=10, show_default=True,
              help="Rows of the Pareto front to print.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (every plan).")
@friendly
def serve_plan_afd(model, chips_, chips, qps, prompt, gen, requests, slo_ttft, slo_tpot,
                   attention_chips, ffn_chips, afd_microbatches, afd_attention, weights_dtype,
                   act_dtype, kv_dtype, recipe, runtime, kv_admission, seed, top, as_json):
    """Search the attention:FFN ratio: the attention pool's size and layout (tp or dp), the FFN
    pool's size and the micro-batches, for both assignments of two designs to the roles;
    serve the same request stream on every plan at --qps; rank the plans that meet the p99
    SLOs by $ per million output tokens (then goodput per chip) and print the Pareto front
    and the best plan per assignment. No plan meeting the SLOs exits 2 naming what binds.

    \b
    diptych serve-plan-afd --model qwen3-30b-a3b --chip h100 --chip infer-2026 --chips 6 --qps 8
    diptych serve-plan-afd --model deepseek-v3 --chip h100 --chips 40 --ffn-chips 32 --json
    """
    from ..arch.runtime import load_runtime
    from ..sim.serving.afd_search import AfdSearchSpace, afd_search
    from ..sim.serving.config import ServeConfig
    from ..sim.serving.requests import Load, parse_length

    if top < 1:
        raise ValueError(f"--top must be a positive integer, not {top}")
    load = Load(qps=qps, prompt=parse_length(prompt, "prompt"), gen=parse_length(gen, "gen"),
                requests=requests)
    cfg = ServeConfig(slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, seed=seed,
                      kv_admission=kv_admission,
                      runtime=load_runtime(runtime) if runtime else None)
    prec = tuple((k, v) for k, v in (("weights_dtype", weights_dtype),
                                     ("act_dtype", act_dtype), ("kv_dtype", kv_dtype),
                                     ("recipe", recipe)) if v)
    space = AfdSearchSpace(designs=tuple(dict.fromkeys(chips_)), chips=chips,
                           attention_chips=attention_chips, ffn_chips=ffn_chips,
                           microbatches=afd_microbatches, attention_layouts=afd_attention,
                           precision=prec)
    show = not as_json and sys.stderr.isatty()

    def tick(i, n, row):
        if show:
            click.echo(f"\r[{i}/{n}] {row['plan'][:90]:<90}", nl=i == n, err=True)

    res = afd_search(model, space, load, cfg, progress=tick)
    if as_json:
        click.echo(dumps(res))
        return
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=200)
    click.echo(f"{res['model']} at {qps:g} req/s on up to {chips} chips ({res['runtime']} "
               f"runtime): {res['candidates']} AFD plans, {res['meeting_slo']} meet p99 TTFT "
               f"<= {slo_ttft:g} s and TPOT <= {slo_tpot:g} s")
    con.print(_table(res["pareto"][:top], "Pareto front ($/Mtok, tokens/J, goodput per chip)"))
    con.print(assignment_table(res))
    b = res["best"]
    click.echo(f"best: {b['plan']} ({_fmt(b['usd_per_mtok'], '.3f')} $/Mtok, "
               f"{b['goodput_rps_per_chip']:.3g} req/s per chip)")
