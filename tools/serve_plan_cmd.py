"""``diptych serve-plan``: each chip design deployed at its best under SLOs at a target load
(the library: :mod:`diptych.sim.serving.search`; docs/serving.md, "Deployment search")."""

from __future__ import annotations

import sys

import click

from ..arch.dtypes import DTYPES
from .dse.pool_map import scheduler_option
from .recipe_option import inference_recipe_option
from .errors import echo_err, friendly
from .jsonout import dumps
from .plan_cmd import IntList
from .moe_skew import MOE_SKEW


class BoolList(click.ParamType):
    """``chunked``, ``whole`` or ``chunked,whole``: the prompt policies to try."""

    name = "LIST"
    WORDS = {"chunked": True, "whole": False}

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = []
        for part in str(value).split(","):
            v = self.WORDS.get(part.strip())
            if v is None:
                self.fail(f"expected chunked, whole or both (comma-separated), not {value!r}",
                          param, ctx)
            out.append(v)
        return tuple(dict.fromkeys(out))


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _table(rows: list[dict], title: str):
    from rich.table import Table

    t = Table("plan", "chips", "goodput/chip (req/s)", "tokens/s/chip", "tokens/J", "$/Mtok",
              "TTFT p99", "TPOT p99", title=title)
    for r in rows:
        t.add_row(r["plan"], str(r["chips"]), _fmt(r["goodput_rps_per_chip"], ".3g"),
                  _fmt(r["tokens_per_s_per_chip"], ",.0f"), _fmt(r["tokens_per_j"], ".3g"),
                  _fmt(r["usd_per_mtok"], ".3f"),
                  _fmt(r["ttft_p99_s"] and r["ttft_p99_s"] * 1e3, ".0f") + " ms",
                  _fmt(r["tpot_p99_s"] and r["tpot_p99_s"] * 1e3, ".1f") + " ms")
    return t


def run_search(model, space, load, cfg, *, jobs: int | None = None,
               scheduler: str | None = None, progress: bool = True,
               require_slo: bool = True, prune: bool = True) -> dict:
    """:func:`~diptych.sim.serving.search.search` on ``jobs`` local workers or the Dask
    ``scheduler`` (one task per plan shape; here, serially, for one job), a ``[i/n] plan``
    line on stderr as plans finish when ``progress`` and stderr is a terminal."""
    from ..sim.serving.search import candidates, search
    from .dse.pool_map import pool_mapper

    show = progress and sys.stderr.isatty()

    def tick(i, n, row):
        if show:
            click.echo(f"\r[{i}/{n}] {row['plan'][:90]:<90}", nl=i == n, err=True)

    shapes = len({p.roles for p in candidates(model, space, cfg)})     # one task each
    with pool_mapper(jobs, scheduler, shapes, log=echo_err) as mapper:
        return search(model, space, load, cfg, progress=tick, mapper=mapper,
                      require_slo=require_slo, prune=prune)


def deploy_designs(designs: list[str], model, settings, *, jobs: int | None = None,
                   progress: bool = True) -> dict:
    """``diptych compare --serving``: every design deployed at its best
    (:func:`~diptych.sim.serving.best_deploy.best_deployments` over ``settings``, a
    :class:`~diptych.sim.serving.best_deploy.BestDeploySettings`) on ``jobs`` local workers,
    a ``[i/n] plan`` line on stderr as plans finish when ``progress`` and stderr is a
    terminal; a design with no plan meeting the SLOs is kept, with what binds
    (``per_design``)."""
    from ..sim.serving.best_deploy import best_deployments
    from ..sim.serving.search import candidates
    from .dse.pool_map import pool_mapper

    show = progress and sys.stderr.isatty()

    def tick(i, n, row):
        if show:
            click.echo(f"\r[{i}/{n}] {row['plan'][:90]:<90}", nl=i == n, err=True)

    space = settings.space(designs)
    shapes = len({p.roles for p in candidates(model, space, settings.config())})
    with pool_mapper(jobs, None, shapes, log=echo_err) as mapper:
        return best_deployments(designs, model, settings, mapper=mapper, progress=tick)


def design_table(res: dict):
    """The best plan per design of a search (``per_design``) with what binds it: the SLO
    it is closest to, or why no plan of the design meets them."""
    from rich.markup import escape
    from rich.table import Table

    slo = res["slo"]
    t = Table("design", "best plan", "chips", "$/Mtok", "tokens/J", "goodput/chip (req/s)",
              "TTFT p99", "TPOT p99", "binding",
              title=f"{res['model']}: each design at its best at {res['load']['qps']:g} req/s "
                    f"(p99 TTFT <= {slo['ttft_s']:g} s, TPOT <= {slo['tpot_s']:g} s, up to "
                    f"{res['space']['chips']} chips; {res['candidates']} plans searched)")
    for name, d in res["per_design"].items():
        r = d["best"]
        if r is None:
            t.add_row(escape(name), "[red]none meets the SLOs[/red]", "", "", "", "", "", "",
                      escape(d["binding"]))
            continue
        t.add_row(escape(name), escape(r["plan"]), str(r["chips"]),
                  _fmt(r["usd_per_mtok"], ".3f"), _fmt(r["tokens_per_j"], ".3g"),
                  _fmt(r["goodput_rps_per_chip"], ".3g"),
                  _fmt(r["ttft_p99_s"] and r["ttft_p99_s"] * 1e3, ".0f") + " ms",
                  _fmt(r["tpot_p99_s"] and r["tpot_p99_s"] * 1e3, ".1f") + " ms",
                  escape(d["binding"]))
    return t


def echo_setups(res: dict) -> None:
    """A line per design under :func:`design_table`: its best plan's setup (scheduler,
    runtime, parallelism and precision per pool), as every serving result states it."""
    from .serve_report import setup_line

    for name, d in res["per_design"].items():
        if d["best"] is not None:
            click.echo(f"{name}'s best plan: {setup_line(d['best']['setup'])}")


def echo_why(res: dict) -> None:
    """A line per design: why its plan won (``per_design[name]["why"]``,
    :func:`~diptych.sim.serving.best_deploy.why`), when the result states it."""
    for name, d in res["per_design"].items():
        if d.get("why") and d["best"] is not None:
            click.echo(f"{name}: {d['why']}")


@click.command("serve-plan")
@click.option("--model", required=True, help="Built-in model name or path to a HF config.json.")
@click.option("--chip", "chips_", multiple=True, required=True,
              help="A chip design (preset or TOML path); repeat to compare designs.")
@click.option("--chips", type=int, required=True,
              help="The most chips a deployment may use (pool sizes are searched up to it).")
@click.option("--qps", type=float, required=True, help="Target arrival rate (requests/s).")
@click.option("--prompt", default="1024", show_default=True,
              help="Prompt lengths: N, or lognormal:mean=M,sigma=S, uniform:LO:HI (as serve).")
@click.option("--gen", default="128", show_default=True, help="Output lengths (as --prompt).")
@click.option("--requests", type=int, default=500, show_default=True,
              help="Requests per plan (the same stream for every plan).")
@click.option("--slo-ttft", type=float, default=2.0, show_default=True,
              help="p99 time-to-first-token SLO (s).")
@click.option("--slo-tpot", type=float, default=0.2, show_default=True,
              help="p99 time-per-output-token SLO (s).")
@click.option("--tp", type=IntList(), help="Tensor-parallel degrees to try (default: every "
              "degree that holds the model and fits --chips).")
@click.option("--max-batched-tokens", type=IntList(), default="2048,8192", show_default=True,
              help="Token limits per step to try.")
@click.option("--prompts", "policies", type=BoolList(), default="chunked,whole",
              show_default=True, help="Prompt policies to try: chunked into decode steps, "
                                      "or whole prefill steps.")
@click.option("--split-prompts/--no-split-prompts", default=None,
              help="The chunked plans: split a prompt to fill a step's budget, or let it join "
                   "a decode step only whole (as `diptych serve --split-prompts`). Default: "
                   "as the runtime's engine does (trtllm-triton: whole), else split.")
@click.option("--kv-admission", type=click.Choice(["on-demand", "reserve"]), default=None,
              help="How requests enter the KV cache (as `diptych serve --kv-admission`). "
                   "Default: as the runtime's engine does (trtllm-*: reserve), else on demand.")
@click.option("--no-disagg", is_flag=True, help="Colocated plans only.")
@click.option("--ep", type=IntList(), help="Expert-parallel degrees to try on a mixture-of-"
              "experts model (default: every degree up to --chips that divides its experts).")
@click.option("--no-ep", is_flag=True, help="Tensor-parallel plans only (no expert "
              "parallelism).")
@click.option("--ep-attention", default="dp,tp", show_default=True,
              help="Attention layouts to try beside expert parallelism: dp (each chip its own "
                   "requests and KV), tp (split over the ep chips), or both.")
@click.option("--moe-skew", type=MOE_SKEW, default=0.0, show_default=True,
              help="Expert-parallel plans: the experts' popularity coefficient of variation, "
                   "or aux-loss (as `diptych serve --moe-skew`).")
@click.option("--redundant-experts", type=IntList(zero_ok=True), default="0", show_default=True,
              help="Redundant expert slots to try on every expert-parallel layout (EPLB's "
                   "copies of the hottest experts, as `diptych serve --redundant-experts`), "
                   "e.g. 0,32; each with the EP degrees that divide the experts plus it.")
@click.option("--weights-dtype", type=click.Choice(DTYPES), help="Weight precision.")
@click.option("--act-dtype", type=click.Choice(DTYPES), help="Activation precision.")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache precision.")
@inference_recipe_option
@click.option("--runtime", help="Serving runtime's host costs for every plan (as `diptych "
              "serve --runtime`). Default: each chip's own; a prefill/decode pair of chips "
              "that name different runtimes cannot be built without it.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--top", type=int, default=10, show_default=True,
              help="Rows of the Pareto front to print.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (every plan).")
@click.option("--exhaustive", is_flag=True,
              help="Run every plan (the complete Pareto front). Default: skip a plan whose "
                   "chips' cost alone prices it above its design's best plan found so far "
                   "(it cannot be a best plan; docs/serving.md).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Local worker processes evaluating the plans (default 1: here, one after "
                   "another; capped at the CPU count). The same plans and numbers either way.")
@scheduler_option("the plans")
@friendly
def serve_plan(model, chips_, chips, qps, prompt, gen, requests, slo_ttft, slo_tpot, tp,
               max_batched_tokens, policies, split_prompts, kv_admission, no_disagg, ep, no_ep,
               ep_attention, moe_skew, redundant_experts, weights_dtype, act_dtype, kv_dtype,
               recipe, runtime, seed, top, as_json, exhaustive, jobs, scheduler):
    """Deploy each chip design at its best: search pool sizes and the prefill:decode split,
    tensor parallelism per pool (and, for a mixture-of-experts model, expert parallelism with
    data- or tensor-parallel attention and redundant hot experts), batch-token limits and
    the prompt policy; serve the same request stream on every plan at --qps; rank the plans
    that meet the p99 SLOs by $ per million output tokens (then goodput per chip) and print
    the Pareto front ($/Mtok, tokens/J, goodput per chip) and the best plan per design.

    \b
    diptych serve-plan --model llama-3-8b --chip h100 --chip infer-2026 --chips 4 --qps 8
    diptych serve-plan --model llama-3-70b --chip h100 --chips 8 --qps 4 --tp 2,4 --json
    diptych serve-plan --model llama-3-70b --chip h100 --chip infer-2026 --chips 6 --qps 2 -j 2
    diptych serve-plan --model qwen3-30b-a3b --chip h100 --chips 4 --qps 4 --ep 2,4 --no-disagg
    diptych serve-plan --model qwen3-30b-a3b --chip h100 --chips 4 --qps 4 --ep 4 \
        --redundant-experts 0,4 --moe-skew 0.3 --no-disagg
    """
    from ..arch.runtime import load_runtime
    from ..sim.serving.config import ServeConfig
    from ..sim.serving.requests import Load, parse_length
    from ..sim.serving.search import SearchSpace

    if top < 1:
        raise ValueError(f"--top must be a positive integer, not {top}")
    if ep and no_ep:
        raise ValueError(f"--ep {','.join(map(str, ep))} and --no-ep contradict; give one")
    atts = tuple(dict.fromkeys(a.strip() for a in ep_attention.split(",")))
    if any(a not in ("dp", "tp") for a in atts):
        raise ValueError(f"--ep-attention must be dp, tp or dp,tp, not {ep_attention!r}")
    load = Load(qps=qps, prompt=parse_length(prompt, "prompt"), gen=parse_length(gen, "gen"),
                requests=requests)
    cfg = ServeConfig(slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, seed=seed,
                      split_prompts=split_prompts, kv_admission=kv_admission,
                      runtime=load_runtime(runtime) if runtime else None)
    prec = tuple((k, v) for k, v in (("weights_dtype", weights_dtype),
                                     ("act_dtype", act_dtype), ("kv_dtype", kv_dtype),
                                     ("recipe", recipe)) if v)
    space = SearchSpace(designs=tuple(dict.fromkeys(chips_)), chips=chips, tp=tp,
                        max_batched_tokens=max_batched_tokens, chunked_prefill=policies,
                        disaggregated=not no_disagg, precision=prec,
                        ep=() if no_ep else ep, ep_attention=atts, moe_skew=moe_skew,
                        redundant_experts=redundant_experts)
    res = run_search(model, space, load, cfg, jobs=jobs, scheduler=scheduler,
                     progress=not as_json, prune=not exhaustive)
    if as_json:
        click.echo(dumps(res))
        return
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=200)
    skipped = (f" ({res['run']} run, {res['pruned']} skipped: their chips' cost alone "
               f"exceeds their design's best)" if res["pruned"] else "")
    click.echo(f"{res['model']} at {qps:g} req/s on up to {chips} chips: "
               f"{res['candidates']} plans{skipped}, {res['meeting_slo']} meet p99 TTFT <= "
               f"{slo_ttft:g} s and TPOT <= {slo_tpot:g} s")
    over = "plans run; --exhaustive: every plan" if res["pruned"] else "every plan"
    con.print(_table(res["pareto"][:top],
                     f"Pareto front ($/Mtok, tokens/J, goodput per chip; {over})"))
    con.print(design_table(res))
    echo_setups(res)
    b = res["best"]
    click.echo(f"best: {b['plan']} ({_fmt(b['usd_per_mtok'], '.3f')} $/Mtok, "
               f"{b['goodput_rps_per_chip']:.3g} req/s per chip)")
