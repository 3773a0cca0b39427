"""``diptych compare``: training, prefill and decode of one model on several chips."""

from __future__ import annotations

import click

from .errors import echo_err, friendly
from .jsonout import dumps


def _ints(text: str | None, name: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of integers, "
                         f"not {text!r}") from None
    return vals


_NOTE_STYLE = {"does not fit": "yellow", "> TDP": "red", "error": "red", "unsupported": "red",
               "power-limited": "magenta", "cannot be built": "red"}


def _cell(text: str, notes) -> str:
    from rich.markup import escape

    if "unsupported" in notes:
        return "[red]unsupported[/]"
    flags = " ".join(f"[{_NOTE_STYLE[n]}]{n}[/]" for n in notes)
    return escape(text) + (f" {flags}" if flags else "")


def render_table(cmp) -> "object":
    """The side-by-side rich Table of a Comparison: one column per chip, then the ratio of
    every other chip to the first."""
    from rich.markup import escape
    from rich.table import Table

    from .dse.compare_table import metrics, ratio_caption

    from .dse.physical import provenance

    names = list(cmp.chips)
    caption = cmp.settings.describe()
    if len(names) > 1:
        caption += "\n" + ratio_caption(cmp)
    prov = provenance()
    caption += f"\n{prov['made_by']}, {prov['date_utc']}"
    t = Table(title=f"{cmp.model}: {' vs '.join(names)}", caption=escape(caption))
    t.add_column("")
    for n in names:
        t.add_column(escape(n), justify="right")
    for n in names[1:]:
        t.add_column(escape(f"{n} / {names[0]}"), justify="right", style="cyan")
    section = None
    for m in metrics(cmp):
        if section is not None and m.section != section:
            t.add_section()
        section = m.section
        ratios = list(m.ratios) or [""] * (len(names) - 1)
        t.add_row(escape(m.label), *[_cell(c, n) for c, n in zip(m.cells, m.notes)],
                  *[escape(r) for r in ratios])
    return t


@click.command("compare")
@click.argument("chips", nargs=-1, required=True)
@click.option("--model", "-m", required=True, help="Model: built-in name or config.json path.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--report", type=click.Path(file_okay=False), default=None,
              help="Write tables, plots and index.html to this directory.")
@click.option("--precision", "precision", multiple=True, metavar="SPEC",
              help="Pin the precision on every chip: a dtype (bf16), per tensor "
                   "(w=fp8,a=fp8,kv=fp8) or per phase (train:bf16, infer:fp8; repeat the "
                   "option). Default: each chip's own (inference: its default dtype; "
                   "training: bf16).")
@click.option("--train-tp", default=8, show_default=True, type=click.IntRange(min=1),
              help="Tensor-parallel chips for training.")
@click.option("--train-dp", default=1, show_default=True, type=click.IntRange(min=1),
              help="Data-parallel replicas for training.")
@click.option("--train-batch", default=16, show_default=True, type=click.IntRange(min=1),
              help="Sequences per data-parallel replica per optimizer step (run as "
                   "micro-batches of ~8k tokens, gradients accumulated).")
@click.option("--train-seq", default=4096, show_default=True, type=click.IntRange(min=1),
              help="Training sequence length.")
@click.option("--tp", "infer_tp", default=1, show_default=True, type=click.IntRange(min=1),
              help="Tensor-parallel chips for prefill and decode.")
@click.option("--context", "context", default=None, metavar="LIST",
              help="Prompt lengths and decode contexts at once, e.g. 2048,8192 "
                   "(--prompts/--contexts override either).")
@click.option("--prompts", default=None, metavar="LIST",
              help="Prompt lengths for time to first token. Default: a short and a long one "
                   "within the model's max_position_embeddings (2048 and min(32768, window)).")
@click.option("--batches", default="1,8,64,256", show_default=True, help="Decode batch sizes.")
@click.option("--contexts", default=None, metavar="LIST",
              help="Decode contexts (tokens before the generated one). Default: as --prompts, "
                   "the long one a token shorter so that it stays within the window.")
@click.option("--ref-batch", default=64, show_default=True, type=click.IntRange(min=1),
              help="Decode batch of the tokens/J and bottleneck reference point.")
@click.option("--cluster-chips", type=click.IntRange(min=1), default=None, metavar="N",
              help="Train on N chips of a cluster instead of one node: the best parallel "
                   "plan (tp, pp, dp, cp, ep, ZeRO, schedule, micro-batch, recomputation) "
                   "found by the plan search (`diptych plan`), stated in the table.")
@click.option("--cluster", default=None, metavar="PRESET|PATH",
              help="Cluster of --cluster-chips. Default: dgx-h100 (NVSwitch domains of 8, "
                   "each chip on its own links; 400 Gb/s per chip between domains).")
@click.option("--cluster-batch", type=click.IntRange(min=1), default=None, metavar="G",
              help="Global batch (sequences per optimizer step) of --cluster-chips. Default: "
                   "--train-batch x N / --train-tp, the one-node run's sequences per chip.")
@click.option("--serving", is_flag=True,
              help="Add the serving comparison: each chip deployed at its best by the "
                   "deployment search (`diptych serve-plan`) at --serving-qps on up to "
                   "--serving-chips chips: pool sizes and the prefill:decode split, TP (and "
                   "EP on a MoE model) per pool, batch-token limits 2048 and 8192 (= the "
                   "prefill chunk), prompts chunked or apart; ranked by $/Mtok; states each "
                   "chip's plan and why it won (docs/serving.md, \"compare --serving\").")
@click.option("--no-search", "no_search", is_flag=True,
              help="With --serving: the fixed deployments instead of the search, i.e. this "
                   "deployment per chip (the fewest TP chips that hold the model, replicas "
                   "filling --serving-chips, default 2; one prefill chip with one decode "
                   "chip per pair) and its highest QPS under the SLOs.")
@click.option("--serving-search", is_flag=True,
              help="Deprecated: --serving now searches; an alias of it (its JSON is also "
                   "under `serving_search`).")
@click.option("--serving-chips", type=click.IntRange(min=1), default=None,
              help="--serving: the most chips a searched deployment may use (default 4; "
                   "within the cluster preset, --cluster or dgx-h100); with --no-search each "
                   "fixed deployment's chips (default 2); --serving-afd: the most chips "
                   "(default 4).")
@click.option("--serving-qps", type=click.FloatRange(min=0, min_open=True), default=2.0,
              show_default=True, help="--serving: the target arrival rate (req/s).")
@click.option("--serving-requests", type=click.IntRange(min=1), default=200,
              show_default=True, help="--serving: requests per searched plan.")
@click.option("--serving-jobs", type=click.IntRange(min=1), default=None,
              help="--serving: local worker processes for the searched plans (as serve-plan "
                   "-j; default 1).")
@click.option("--serving-afd", is_flag=True,
              help="Put the first two chips in the roles of attention-FFN disaggregation both "
                   "ways, each at its best attention:FFN ratio and micro-batches (up to "
                   "--serving-chips chips, 32 clients), and say which die should hold "
                   "attention and which the experts, at which ratio, and why (docs/serving.md, "
                   "\"Attention-FFN disaggregation\").")
@click.option("--execution", type=click.Choice(["sum", "schedule"]), default=None,
              help="How every single-node run is timed (as `diptych run --execution`). "
                   "Default: schedule.")
@click.option("--fusion/--no-fusion", default=True, show_default=True,
              help="Scheduled runs: fuse norms and elementwise ops into GEMMs.")
@click.option("--waterfall", is_flag=True,
              help="Add each chip's efficiency waterfall (peak to MFU by mechanism) for "
                   "training, the first prompt and the reference decode point (re-runs "
                   "those four or five times; docs/workloads.md, \"Efficiency waterfall\").")
@click.option("--ideal", is_flag=True,
              help="Every run's bound: every overhead left out (recipe and format ops, kernel "
                   "launches and step syncs, the collective library's losses, the power "
                   "limit), as `diptych run --ideal`; not with the serving comparisons "
                   "(`diptych serve --ideal` bounds one deployment).")
@friendly
def compare(chips, model, as_json, report, precision, train_tp, train_dp, train_batch,
            train_seq, infer_tp, context, prompts, batches, contexts, ref_batch, cluster_chips,
            cluster, cluster_batch, serving, no_search, serving_search, serving_chips,
            serving_qps, serving_requests, serving_jobs, serving_afd, execution, fusion,
            waterfall, ideal):
    """Compare CHIPS (presets or TOML paths) on one model: training, prefill, decode.

    States the precision each chip runs in per phase, the parallel plan of training, and
    the ratio of every chip to the first. Example: diptych compare train-2026 infer-2026
    --model llama-3-70b --report out/ (add --cluster-chips 1024 to train at cluster scale).
    """
    from .gc_pause import imports

    with imports():       # the engine's modules, without the collector (tools/gc_pause.py)
        from ..sim import run as _sim_run  # noqa: F401 - every compare runs it
        from .dse.compare import DEFAULT_CLUSTER, CompareSettings
        from .dse.compare import compare as run_compare
    from .precision_spec import parse_precision
    from .progress import progress_display

    both = _ints(context, "--context")
    s = CompareSettings(train_tp=train_tp, train_dp=train_dp, train_batch=train_batch,
                        train_seq=train_seq, infer_tp=infer_tp,
                        prompts=_ints(prompts, "--prompts") or both,
                        batches=_ints(batches, "--batches"),
                        contexts=_ints(contexts, "--contexts") or both, ref_batch=ref_batch,
                        precision=parse_precision(precision), cluster_chips=cluster_chips,
                        cluster=cluster, cluster_batch=cluster_batch, execution=execution,
                        fusion=fusion, waterfall=waterfall, ideal=ideal)
    if serving_search:
        echo_err("note: --serving-search is deprecated: --serving now deploys each chip at "
                 "its best (the deployment search); use --serving")
        if no_search:
            raise ValueError("--serving-search and --no-search contradict; give one")
        serving = True
    if no_search and not serving:
        raise ValueError("--no-search chooses the fixed deployments of --serving; add "
                         "--serving")
    given = [f for f, v in (("--serving-search", serving_search), ("--serving", serving),
                            ("--serving-afd", serving_afd)) if v]
    if ideal and given:
        raise ValueError(f"--ideal bounds the training, prefill and decode runs; {given[0]} "
                         f"deploys each chip with its overheads (`diptych serve --ideal` gives "
                         f"one deployment's bound): give one of them")
    afd_chips = serving_chips or 4
    if serving_afd and len(chips) < 2:
        raise ValueError("--serving-afd puts two chips in the attention and FFN roles; give "
                         "two CHIPS")
    if serving_afd and afd_chips < 2:
        raise ValueError(f"--serving-chips {afd_chips} with --serving-afd: an attention "
                         f"pool and an FFN pool need at least 2 chips")
    best = None
    if serving:
        from ..sim.serving.best_deploy import BestDeploySettings, check_cluster
    if serving and no_search:
        check_cluster(serving_chips or 2, cluster or DEFAULT_CLUSTER)
    elif serving:
        best = BestDeploySettings(chips=serving_chips or 4, qps=serving_qps,
                                  requests=serving_requests, cluster=cluster or DEFAULT_CLUSTER)
    plans = None
    if best is not None:            # first: a space without a feasible plan exits at once
        from .serve_plan_cmd import deploy_designs
        plans = deploy_designs(list(chips), model, best, jobs=serving_jobs,
                               progress=not as_json)
    with progress_display("compare", enabled=not as_json) as progress:
        cmp = run_compare(list(chips), model, s, progress=progress)
    roles = None
    if serving_afd:
        from ..sim.serving.afd_roles import AfdRoleSettings, afd_roles
        roles = afd_roles(chips[0], chips[1], model, AfdRoleSettings(chips=afd_chips))
    study = None
    if serving and no_search:
        from ..sim.serving.study import ServingSettings, serving_study
        study = serving_study(list(chips), model, ServingSettings(chips=serving_chips or 2),
                              progress=None if as_json else (lambda m: click.echo(m, err=True)))
    if as_json:
        click.echo(dumps({**cmp.to_json(), **({"serving": study} if study else {}),
                          **({"serving": plans} if plans else {}),
                          **({"serving_search": plans} if plans and serving_search else {}),
                          **({"serving_afd": roles} if roles else {})}))
    else:
        from .run_cmd import _console

        _console().print(render_table(cmp))
        from .fmt import energy_line
        for name in cmp.chips:
            for phase, parts in cmp.summary(name)["energy_breakdown_j"].items():
                if parts:
                    click.echo(f"{name} {phase}: {energy_line(parts)}")
        if waterfall:
            from .fmt import waterfall_line
            for name in cmp.chips:
                for phase, wf in cmp.summary(name).get("waterfall", {}).items():
                    if wf:
                        click.echo(f"{name} {phase}: {waterfall_line(wf)}")
        for v in cmp.verdicts().values():
            click.echo(f"verdict: {v['text']}")
        for w in cmp.warnings():
            click.echo(f"warning: {w}")
        if study:
            from ..sim.serving.study import deployments, render_serving_table
            _console().print(render_serving_table(study))
            from .serve_report import setup_line
            for name, d in deployments(study):
                if d.get("setup"):
                    click.echo(f"serving {name}: {setup_line(d['setup'])}")
                for w in d.get("warnings") or ():
                    click.echo(f"warning: serving {name}: {w}")
                if d.get("energy_breakdown_j_per_token"):
                    click.echo(f"serving {name}: {energy_line(d['energy_breakdown_j_per_token'])}"
                               f" per output token")
        if plans:
            from .serve_plan_cmd import design_table, echo_setups, echo_why
            _console().print(design_table(plans))
            echo_setups(plans)
            echo_why(plans)
        if roles:
            from .serve_afd import afd_roles_table
            _console().print(afd_roles_table(roles))
            click.echo(f"verdict: {roles['verdict']}")
    if report:
        from .dse.report import write_report

        files = write_report(cmp, report, serving=study or plans)
        echo_err(f"wrote {len(files)} files to {report} (open {report}/index.html)")
