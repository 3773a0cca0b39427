"""``diptych serve``: a stream of requests served by a chip (or two pools of chips)."""

from __future__ import annotations

import json
import sys
import time

import click

from ..arch.dtypes import DTYPES
from . import fmt
from .errors import friendly
from .jsonout import dumps
from .result_check import check_result


class _LazyProgress:
    """A rich progress bar that appears only once work has taken ``after_s`` seconds, and
    never when ``enabled`` is false (--json, or output not a terminal)."""

    def __init__(self, enabled: bool, after_s: float = 2.0):
        self.enabled = enabled
        self.after = after_s
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None
        self.sims = 0

    def _start(self, total: int | None):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), transient=True,
                            console=None)
        self.bar.start()
        self.task = self.bar.add_task("serving", total=total)

    def update(self, done: int, total: int | None, what: str = "requests") -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.after:
                return
            self._start(total)
        self.bar.update(self.task, completed=done, total=total,
                        description=f"{what} (step grid: {self.sims} simulations)")

    def grid(self, sims: int) -> None:
        self.sims = sims
        if self.bar is not None:
            self.bar.update(self.task, description=f"building the step grid: {sims} "
                                                   f"simulations")
        elif self.enabled and time.perf_counter() - self.t0 >= self.after:
            self._start(None)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _ms(x) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.2f} s")


def _stats_table(d: dict):
    from rich.table import Table

    t = Table("latency", "mean", "p50", "p90", "p99", title="latencies")
    for key, name in (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                      ("itl_s", "inter-token gap"), ("e2e_s", "end to end")):
        s = d[key]
        t.add_row(name, *[_ms(s[k]) for k in ("mean", "p50", "p90", "p99")])
    return t


def _summary_table(d: dict):
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
                   f"per replica ({k['kv_bytes'] / 2**30:.1f} GiB per chip)" for k in d["kv"])
    t.add_row("KV cache", kv)
    t.add_row("KV occupancy", f"peak {100 * d['kv_peak_fraction']:.1f} %, mean "
              f"{100 * d['kv_mean_fraction']:.1f} %")
    t.add_row("preemptions", f"{d['preemptions']}" + (f" ({d['swap_bytes'] / 2**30:.1f} GiB "
                                                       f"swapped)" if d["swap_bytes"] else ""))
    q = d["queue"]
    if q["waiting"]:
        t.add_row("queue", f"waiting max {max(q['waiting']):.0f}, running max "
                  f"{max(q['running']):.0f}; mean in system {d['mean_in_system']:.1f}")
    info = d["info"]
    t.add_row("steps", f"{info['steps']:,} (timed as {info['execution']}; {info['oracle']} "
              f"step oracle, {info['oracle_simulations']} simulations)")
    t.add_row("runtime", info.get("runtime", "ideal"))
    t.add_row("scheduling", info.get("scheduling", ""))
    return t


def _sweep_table(sw: dict, slo: dict):
    from rich.table import Table

    t = Table("QPS", "tokens/s", "goodput", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
              "KV peak", "SLOs", "energy by component, per output token",
              title="throughput–latency curve")
    for p in sw["points"]:
        t.add_row(f"{p['qps']:g}", f"{p['tokens_per_s']:.0f}", f"{p['goodput_rps']:.2f}",
                  _ms(p["ttft_s"]["p50"]), _ms(p["ttft_s"]["p99"]), _ms(p["tpot_s"]["p50"]),
                  _ms(p["tpot_s"]["p99"]), f"{100 * p['kv_peak_fraction']:.0f} %",
                  "[green]met[/green]" if p["meets_slo"] else "[red]missed[/red]",
                  fmt.energy_shares(p.get("energy_breakdown_j_per_token"), compact=True))
    return t


def _pool(chip, model, tp, replicas, chips, precision, attention, execution, cfg, what):
    """A pool of replicas; ``execution``: ``make_replica``'s execution and fusion."""
    from ..sim.run import Scenario
    from ..sim.serving.step_time import make_replica
    from ..sim.serving.serve import Pool, fit_tp

    if tp is None:
        tp = fit_tp(chip, model, cfg, precision=precision, attention=attention)
    if chips is not None:
        if chips % tp:
            raise ValueError(f"--{what}-chips ({chips}) must be a multiple of the tensor-"
                             f"parallel degree ({tp})")
        replicas = chips // tp
    return Pool(make_replica(chip, model,
                             Scenario.of(phase="decode", tp=tp, attention=attention, **execution,
                                         **precision)), replicas)


@click.command("serve")
@click.option("--chip", help="Chip preset name or TOML path (colocated serving).")
@click.option("--model", required=True, help="Built-in model name or path to a HF config.json.")
@click.option("--tp", type=int, help="Tensor-parallel chips per replica (default: the fewest "
              "whose memory holds the weights and a step's worth of KV cache).")
@click.option("--replicas", type=int, default=1, show_default=True,
              help="Independent replicas; requests go to the one with the fewest outstanding.")
@click.option("--qps", type=float, help="Open-loop arrival rate (requests/s).")
@click.option("--burstiness", type=float, default=1.0, show_default=True,
              help="Gamma arrivals' shape (1 = Poisson, < 1 burstier), as vLLM's benchmark.")
@click.option("--concurrency", type=int, help="Closed loop: this many clients, each sending "
              "its next request when the previous one completes.")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False),
              help="CSV of arrival_s,prompt_tokens,output_tokens.")
@click.option("--prompt", default="1024", show_default=True,
              help="Prompt lengths: N, uniform:lo=,hi=, normal:mean=,std=, "
                   "lognormal:mean=,sigma=.")
@click.option("--gen", default="128", show_default=True, help="Output lengths (as --prompt).")
@click.option("--requests", type=int, help="Requests to send (default 1000, or the trace).")
@click.option("--duration", type=float, help="Send requests for this many seconds.")
@click.option("--scheduler", type=click.Choice(["continuous", "static"]), default="continuous",
              show_default=True, help="Iteration-level batching, or `run`'s fixed batches.")
@click.option("--max-batch", type=int, default=1024, show_default=True,
              help="Most sequences in a batch.")
@click.option("--max-batched-tokens", type=int, default=8192, show_default=True,
              help="Token budget of one step.")
@click.option("--chunked-prefill/--no-chunked-prefill", default=None,
              help="Split prompts to fill each step's budget beside the decodes, or run whole "
                   "prompts in steps of their own (prefill first). Default: as the runtime's "
                   "engine does (vllm-v1: chunked), else chunked.")
@click.option("--kv-block", type=int, default=16, show_default=True,
              help="Tokens per KV-cache block.")
@click.option("--preemption", type=click.Choice(["recompute", "swap"]), default="recompute",
              show_default=True, help="What happens to a sequence evicted for KV space.")
@click.option("--slo-ttft", type=float, default=2.0, show_default=True,
              help="TTFT objective (s).")
@click.option("--slo-tpot", type=float, default=0.2, show_default=True,
              help="TPOT objective (s).")
@click.option("--weights-dtype", type=click.Choice(DTYPES), help="Weight precision.")
@click.option("--act-dtype", type=click.Choice(DTYPES), help="Activation precision.")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache precision.")
@click.option("--attention", type=click.Choice(["fused", "unfused"]), default="fused",
              show_default=True, help="Fused (FlashAttention-style) or unfused attention.")
@click.option("--prefill-chip", help="Disaggregated: chip of the prefill pool.")
@click.option("--prefill-chips", type=int, help="Disaggregated: chips in the prefill pool.")
@click.option("--decode-chip", help="Disaggregated: chip of the decode pool.")
@click.option("--decode-chips", type=int, help="Disaggregated: chips in the decode pool.")
@click.option("--speculative", help="draft=MODEL,k=K,accept=P (draft=none: free proposals).")
@click.option("--prefix-share", type=float, default=0.0, show_default=True,
              help="Fraction of each prompt that is a cached prefix shared by all requests.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--runtime",
              help="Serving runtime's host costs: a profile name (ideal, vllm-v1, "
                   "trtllm-triton, trtllm-bench, vllm-v0) or a TOML path; docs/serving.md, "
                   "\"Runtime host costs\". Default: the chip's ([overheads] "
                   "serving_runtime: h100 vllm-v1; ideal, the chip alone, for the others).")
@click.option("--sweep-qps", help="LO:HI:N: a throughput-latency curve over N arrival rates.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="With --sweep-qps: write the curve (PNG/SVG/PDF by extension).")
@click.option("--export-profile", type=click.Path(file_okay=False),
              help="Write the step-latency tables in Vidur's profile layout to this directory.")
@click.option("--oracle", type=click.Choice(["grid", "direct"]), default="grid",
              show_default=True, help="Step times interpolated on a grid, or every step "
                                      "simulated (exact, slow).")
@click.option("--execution", type=click.Choice(["sum", "schedule"]), default=None,
              help="Time a step as the sum of its ops, or as a list schedule of its program "
                   "(default: as `diptych run`).")
@click.option("--fusion/--no-fusion", default=True, show_default=True,
              help="With --execution schedule: fuse norms and elementwise ops into GEMMs "
                   "where the chip allows it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--trace-out", type=click.Path(dir_okay=False),
              help="Write a Perfetto/Chrome trace of requests and steps.")
@click.option("--waterfall", is_flag=True,
              help="Where the device time and latency go, mechanism by mechanism (the load "
                   "served six more times; docs/serving.md, \"Serving waterfall\").")
@friendly
def serve(chip, model, tp, replicas, qps, burstiness, concurrency, trace_file, prompt, gen,
          requests, duration, scheduler, max_batch, max_batched_tokens, chunked_prefill,
          kv_block, preemption, slo_ttft, slo_tpot, weights_dtype, act_dtype, kv_dtype,
          attention, prefill_chip, prefill_chips, decode_chip, decode_chips, speculative,
          prefix_share, seed, runtime, sweep_qps, plot, export_profile, oracle, execution, fusion,
          as_json, trace_out, waterfall):
    """Simulate an LLM serving engine: arrivals, continuous batching, chunked prefill, paged
    KV cache, preemption; TTFT, TPOT, throughput, goodput under SLOs, tokens per joule.

    \b
    diptych serve --chip h100 --model llama-3-70b --tp 2 --qps 4
    diptych serve --chip infer-2026 --model llama-3-70b --concurrency 64 --json
    diptych serve --chip h100 --model llama-3-8b --sweep-qps 5:60:10 --plot curve.png
    diptych serve --prefill-chip train-2026 --prefill-chips 1 --decode-chip infer-2026 \\
        --decode-chips 1 --model llama-3-70b --qps 2
    """
    from ..sim.serving.config import ServeConfig, parse_speculative
    from ..sim.serving.requests import parse_length
    from ..arch.runtime import load_runtime
    from ..sim.serving.serve import Deployment, Load, StepTimerCache
    from ..sim.serving.serve import serve as run_serve

    cfg = ServeConfig(scheduler=scheduler, max_batch=max_batch,
                      max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill,
                      kv_block_tokens=kv_block, preemption=preemption,
                      prefix_share=prefix_share, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot,
                      speculative=parse_speculative(speculative) if speculative else None,
                      seed=seed, runtime=load_runtime(runtime) if runtime else None)
    precision = {"weights_dtype": weights_dtype, "act_dtype": act_dtype, "kv_dtype": kv_dtype}
    execution = {"execution": execution, "fusion": fusion}
    disagg = [prefill_chip, prefill_chips, decode_chip, decode_chips]
    if any(v is not None for v in disagg):
        if any(v is None for v in disagg):
            raise ValueError("disaggregated serving needs all of --prefill-chip, "
                             "--prefill-chips, --decode-chip and --decode-chips")
        if chip is not None or replicas != 1:
            raise ValueError("give either --chip/--replicas (colocated) or the --prefill-*/"
                             "--decode-* pools (disaggregated), not both")
        for n, v in (("--prefill-chips", prefill_chips), ("--decode-chips", decode_chips)):
            if v < 1:
                raise ValueError(f"{n} must be a positive integer, not {v}")
        dep = Deployment(prefill=_pool(prefill_chip, model, tp, 1, prefill_chips, precision,
                                       attention, execution, cfg, "prefill"),
                         decode=_pool(decode_chip, model, tp, 1, decode_chips, precision,
                                      attention, execution, cfg, "decode"))
    else:
        if chip is None:
            raise ValueError("--chip is required (or the --prefill-*/--decode-* pools)")
        dep = Deployment(pool=_pool(chip, model, tp, replicas, None, precision, attention,
                                    execution, cfg, "chip"))
    show = not as_json and sys.stderr.isatty()
    bar = _LazyProgress(show)
    oracles = StepTimerCache(oracle, progress=bar.grid)
    has_load = any(v is not None for v in (qps, concurrency, trace_file)) or sweep_qps
    try:
        if export_profile:
            from ..sim.serving.profile import export_profile as do_export
            for pool in dep.pools:
                sub = export_profile if len(dep.pools) == 1 else \
                    f"{export_profile}/{pool.replica.chip.name}"
                files = do_export(pool.replica, sub, max_tokens=max_batched_tokens,
                                  max_batch=min(max_batch, 256), block_tokens=kv_block,
                                  progress=lambda d, t: bar.update(d, t, "profile points"))
                if not as_json:
                    bar.stop()
                    click.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
            if not has_load:
                return
        if sweep_qps and waterfall:
            raise ValueError("--waterfall explains one run; drop it with --sweep-qps")
        if sweep_qps:
            _run_sweep(dep, cfg, sweep_qps, prompt, gen, requests, duration, burstiness, qps,
                       concurrency, trace_file, oracles, bar, as_json, plot, trace_out)
            return
        if plot:
            raise ValueError("--plot draws a --sweep-qps curve; add --sweep-qps LO:HI:N")
        load = Load(qps=qps, concurrency=concurrency, trace=trace_file,
                    prompt=parse_length(prompt, "--prompt"), gen=parse_length(gen, "--gen"),
                    requests=requests, duration_s=duration, burstiness=burstiness)
        res = run_serve(dep, load, cfg, oracles=oracles,
                        progress=lambda d, t: bar.update(d, t), waterfall=waterfall)
    finally:
        bar.stop()
    if trace_out:
        _write_trace(trace_out, res)
    d = check_result(res.to_dict(), "serve")
    if as_json:
        click.echo(dumps(d))
        return
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=160)
    con.print(_summary_table(d))
    con.print(_stats_table(d))
    if d.get("waterfall"):
        con.print(_waterfall_table(d["waterfall"]))
    for w in res.warnings:
        click.echo(f"warning: {w}", err=True)
    if d["info"].get("clipped_to_context"):
        click.echo(f"note: {d['info']['clipped_to_context']} requests' lengths were clipped to "
                   f"the model's context", err=True)


def _run_sweep(dep, cfg, spec, prompt, gen, requests, duration, burstiness, qps, concurrency,
               trace_file, oracles, bar, as_json, plot, trace_out):
    from ..sim.serving.requests import parse_length
    from ..sim.serving.serve import Load
    from ..sim.serving.sweep import parse_sweep, plot_sweep, qps_sweep

    if concurrency is not None or trace_file is not None or qps is not None:
        raise ValueError("--sweep-qps sets the arrival rate itself; drop --qps, --concurrency "
                         "and --trace")
    lo, hi, n = parse_sweep(spec)
    load = Load(qps=lo, prompt=parse_length(prompt, "--prompt"), gen=parse_length(gen, "--gen"),
                requests=requests, duration_s=duration, burstiness=burstiness)
    sw = qps_sweep(dep, load, lo, hi, n, cfg, oracles=oracles,
                   progress=lambda k, t, q: bar.update(k, t, f"load points (now {q:g} req/s)"))
    bar.stop()
    slo = {"ttft_s": cfg.slo_ttft_s, "tpot_s": cfg.slo_tpot_s}
    if plot:
        plot_sweep(sw, plot, dep.describe(), slo)
    if trace_out:
        _write_trace(trace_out, sw["results"][-1])
    for r in sw["results"]:
        check_result(r.to_dict(), "serve --sweep-qps")
    out = {"deployment": dep.describe(), "load": load.describe(), "slo": slo,
           "points": sw["points"], "max_qps_meeting_slo": sw["max_qps_meeting_slo"],
           "chips": dep.chips}
    if as_json:
        click.echo(dumps(out))
        return
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=160)
    con.print(_sweep_table(sw, slo))
    best = sw["max_qps_meeting_slo"]
    con.print(f"{dep.describe()}: highest load meeting the SLOs (p99 TTFT ≤ {slo['ttft_s']:g} "
              f"s, p99 TPOT ≤ {slo['tpot_s']:g} s): "
              + (f"{best:g} req/s" if best is not None else "none of the points"))
    if plot:
        click.echo(f"wrote {plot}", err=True)


def _write_trace(path: str, res) -> None:
    from ..sim.serving.trace import serving_trace

    from ..arch.atomic import atomic_text
    atomic_text(path, json.dumps(serving_trace(res)))


def _waterfall_table(wf: dict):
    """The serving waterfall (sim/serving/waterfall.py) as a table."""
    from rich.table import Table

    from . import fmt

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
