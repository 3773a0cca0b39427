"""``diptych compare``: training, prefill and decode of one model on several chips."""

from __future__ import annotations

import json

import click

from .errors import echo_err, friendly


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of integers, not {text!r}") from None
    return vals


def _t(v, unit="", scale=1.0, digits=3) -> str:
    if v is None:
        return "–"
    return f"{v * scale:.{digits}g}{unit}"


def render_table(cmp) -> "object":
    """The side-by-side rich Table of a Comparison."""
    from rich.table import Table

    data = cmp.to_json()["chips"]
    names = list(data)
    t = Table(title=f"{cmp.model}: {' vs '.join(names)}", caption=cmp.settings.describe())
    t.add_column("")
    for n in names:
        t.add_column(n, justify="right")

    def flags(n, runs):
        notes = []
        if any(r.get("fits") is False for r in runs):
            notes.append("[yellow]does not fit[/]")
        if any(r.get("exceeds_tdp") for r in runs):
            notes.append("[red]> TDP[/]")
        if any(r.get("error") for r in runs):
            notes.append("[red]error[/]")
        return (" " + " ".join(notes)) if notes else ""

    t.add_row("die area", *[_t(data[n]["area_mm2"], " mm²", digits=4) for n in names])
    t.add_row("tokens / J (decode ref.)", *[_t(data[n]["tokens_per_j"]) for n in names])
    t.add_section()
    t.add_row("train tokens/s per chip",
              *[_t(data[n]["train"]["tokens_per_s"]) + flags(n, [cmp.chips[n].train])
                for n in names])
    t.add_row("train MFU", *[_t(data[n]["train"]["mfu"], "", 100, 3) + ("%" if data[n]["train"]
                             ["mfu"] is not None else "") for n in names])
    t.add_row("train step", *[_t(data[n]["train"]["step_s"], " s") for n in names])
    t.add_section()
    for i, p in enumerate(cmp.settings.prompts):
        t.add_row(f"TTFT, {p} prompt", *[
            _t(data[n]["prefill"][i]["ttft_s"], " ms", 1e3) + flags(n, [cmp.chips[n].prefill[p]])
            for n in names])
    t.add_section()
    for i, d in enumerate(data[names[0]]["decode"]):
        b, c = d["batch"], d["context"]
        t.add_row(f"decode b={b} ctx={c}", *[
            f"{_t(data[n]['decode'][i]['tpot_s'], ' ms', 1e3)} · "
            f"{_t(data[n]['decode'][i]['tokens_per_s'], ' tok/s')}"
            + flags(n, [cmp.chips[n].decode[(b, c)]]) for n in names])
    t.add_section()
    for ph in ("train", "prefill", "decode"):
        t.add_row(f"bottleneck: {ph}", *[str(data[n]["bottleneck"][ph] or "–") for n in names])
    return t


@click.command("compare")
@click.argument("chips", nargs=-1, required=True)
@click.option("--model", "-m", required=True, help="Model: built-in name or config.json path.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--report", type=click.Path(file_okay=False), default=None,
              help="Write tables, plots and index.html to this directory.")
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
@click.option("--prompts", default="2048,32768", show_default=True,
              help="Prompt lengths for time to first token.")
@click.option("--batches", default="1,8,64,256", show_default=True, help="Decode batch sizes.")
@click.option("--contexts", default="2048,32768", show_default=True, help="Decode contexts.")
@click.option("--ref-batch", default=64, show_default=True, type=click.IntRange(min=1),
              help="Decode batch of the tokens/J and bottleneck reference point.")
@friendly
def compare(chips, model, as_json, report, train_tp, train_dp, train_batch, train_seq, infer_tp,
            prompts, batches, contexts, ref_batch):
    """Compare CHIPS (presets or TOML paths) on one model: training, prefill, decode.

    Example: diptych compare train-2026 infer-2026 --model llama-3-70b --report out/
    """
    from .dse.compare import CompareSettings
    from .dse.compare import compare as run_compare

    s = CompareSettings(train_tp=train_tp, train_dp=train_dp, train_batch=train_batch,
                        train_seq=train_seq, infer_tp=infer_tp,
                        prompts=_ints(prompts, "--prompts"), batches=_ints(batches, "--batches"),
                        contexts=_ints(contexts, "--contexts"), ref_batch=ref_batch)
    cmp = run_compare(list(chips), model, s, progress=None if as_json else echo_err)
    if as_json:
        click.echo(json.dumps(cmp.to_json(), indent=2))
    else:
        from rich.console import Console

        Console().print(render_table(cmp))
        hot = [r for r in cmp.rows() if r.get("exceeds_tdp")]
        for r in hot:
            click.echo(f"warning: {r['chip']} {r['phase']} (batch {r['batch']}, context "
                       f"{r['context']}) averages {r['power_w']:.0f} W, above its TDP")
        for w in cmp.run_warnings():
            click.echo(f"note: {w}")
        for r in cmp.rows():
            if r.get("error"):
                click.echo(f"note: {r['chip']} {r['phase']} (batch {r['batch']}, context "
                           f"{r['context']}): {r['error']}")
    if report:
        from .dse.report import write_report

        files = write_report(cmp, report)
        echo_err(f"wrote {len(files)} files to {report} (open {report}/index.html)")
