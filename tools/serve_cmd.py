"""``diptych serve``: a stream of requests served by a chip (or two pools of chips)."""

from __future__ import annotations

import dataclasses

import json
import sys
import time

import click

from ..arch.dtypes import DTYPES
from . import serve_report as report
from .recipe_option import inference_recipe_option
from .errors import friendly
from .jsonout import dumps
from .serve_afd import afd_from_flags, afd_options, afd_requested
from .result_check import check_result
from .moe_skew import MOE_SKEW


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


def _pool(chip, model, tp, replicas, chips, precision, attention, execution, cfg, what,
          ep=None):
    """A pool of ``replicas`` replicas, or of ``chips`` chips (``--{what}-chips``, a multiple
    of the replica's chips) when given; ``execution``: ``make_replica``'s execution and
    fusion; ``ep``: an expert-parallel layout (:class:`~diptych.sim.serving.ep.EpSpec`) or
    None."""
    from ..sim.limits import MAX_REPLICAS
    from ..sim.run import Scenario
    from ..sim.serving.ep import ep_replica
    from ..sim.serving.step_time import make_replica
    from ..sim.serving.serve import Pool, fit_tp
    from ..workloads import load_model

    if chips is None and not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"--replicas must be a positive integer of at most {MAX_REPLICAS:,} "
                         f"(sim/limits.py), not {replicas}")
    if ep is not None:
        ep.check(load_model(model), tp if ep.ep > 1 else None)
    if ep is not None and ep.ep > 1:
        flag = "--ep" if what == "chip" else f"--{what}-ep"
        if chips is not None and chips % ep.ep:
            raise ValueError(f"the {what} pool's expert-parallel degree {ep.ep} (--ep / "
                             f"{flag}) must divide --{what}-chips ({chips}): the pool is "
                             f"made of expert-parallel groups of {ep.ep} chips"
                             + (" (EP larger than the pool)" if ep.ep > chips else ""))
        replicas = replicas if chips is None else chips // ep.ep
        if replicas > MAX_REPLICAS:
            raise ValueError(f"--{what}-chips {chips:,} is {replicas:,} replicas, more than "
                             f"the {MAX_REPLICAS:,} a pool may have (sim/limits.py)")
        base = make_replica(chip, model, Scenario.of(phase="decode", tp=ep.tp,
                                                     attention=attention, **execution,
                                                     **precision))
        return Pool(ep_replica(base, ep), replicas)
    if tp is None:       # a prefill pool runs no draft (an MTP draft's weights: decode only)
        fit = dataclasses.replace(cfg, speculative=None) if what == "prefill" else cfg
        tp = fit_tp(chip, model, fit, precision=precision, attention=attention)
    if chips is not None:
        if chips % tp:
            raise ValueError(f"--{what}-chips ({chips}) must be a multiple of the tensor-"
                             f"parallel degree ({tp})")
        replicas = chips // tp
        if replicas > MAX_REPLICAS:
            raise ValueError(f"--{what}-chips {chips:,} is {replicas:,} replicas of TP {tp}, "
                             f"more than the {MAX_REPLICAS:,} a pool may have (sim/limits.py: "
                             f"the event loop visits every replica per arrival)")
    return Pool(make_replica(chip, model,
                             Scenario.of(phase="decode", tp=tp, attention=attention, **execution,
                                         **precision)), replicas)


def _pools(chips, chip, model, tp, replicas, prefill_chips, decode_chips, precision,
           attention, execution, cfg, layouts):
    """The colocated or prefill/decode deployment the flags ask for."""
    from ..sim.serving.serve import Deployment

    if chips is not None:
        return Deployment(prefill=_pool(chips[0], model, tp, 1, prefill_chips, precision,
                                        attention, execution, cfg, "prefill", layouts[0]),
                          decode=_pool(chips[1], model, tp, 1, decode_chips, precision,
                                       attention, execution, cfg, "decode", layouts[1]))
    if chip is None:
        raise ValueError("--chip is required (or the --prefill-*/--decode-* pools, or the "
                         "--attention-*/--ffn-* pools)")
    return Deployment(pool=_pool(chip, model, tp, replicas, None, precision, attention,
                                 execution, cfg, "chip", layouts[0]))


def _pool_chips(chip, prefill_chip, decode_chip, prefill_chips, decode_chips, replicas):
    """``(prefill chip, decode chip)`` when any ``--prefill-*``/``--decode-*`` flag makes the
    deployment disaggregated (a pool whose chip is not named runs on ``--chip``), else None.
    Pool sizes are checked here, before anything is built."""
    if all(v is None for v in (prefill_chip, decode_chip, prefill_chips, decode_chips)):
        return None
    if replicas != 1:
        raise ValueError(f"--replicas {replicas} sizes a colocated deployment; size the "
                         f"disaggregated pools with --prefill-chips and --decode-chips")
    if chip is not None and prefill_chip is not None and decode_chip is not None:
        raise ValueError(f"--chip {chip} names no pool: --prefill-chip and --decode-chip are "
                         f"both given; drop --chip")
    for n, v in (("--prefill-chips", prefill_chips), ("--decode-chips", decode_chips)):
        if v is not None and v < 1:
            raise ValueError(f"{n} must be a positive integer, not {v}")
    pc, dc = prefill_chip or chip, decode_chip or chip
    if pc is None or dc is None:
        missing = "--prefill-chip" if pc is None else "--decode-chip"
        raise ValueError(f"disaggregated serving needs a chip for each pool: give {missing} "
                         f"(or --chip, the chip of a pool not named)")
    return pc, dc


def _ep_layouts(ep, attention, redundant, skew, prefill_ep, decode_ep, disaggregated):
    """The expert-parallel layouts of the pools (``[colocated]`` or ``[prefill, decode]``;
    None: tensor-parallel only). ``--redundant-experts`` and ``--moe-skew`` need an ``--ep``."""
    from ..sim.serving.ep import EpSpec

    if not disaggregated:
        for n, v in (("--prefill-ep", prefill_ep), ("--decode-ep", decode_ep)):
            if v is not None:
                raise ValueError(f"{n} {v} sizes a disaggregated pool; use --ep for a "
                                 f"colocated deployment")
    degrees = [ep] if not disaggregated else [prefill_ep or ep, decode_ep or ep]
    if all(d is None for d in degrees):
        if redundant or skew:
            flag = "--redundant-experts" if redundant else "--moe-skew"
            raise ValueError(f"{flag} {redundant or skew} applies to expert parallelism; "
                             f"give --ep")
        return [None, None]
    out = [None if d is None else EpSpec(d, attention, redundant, skew) for d in degrees]
    return out + [None] * (2 - len(out))


@click.command("serve")
@click.option("--chip", help="Chip preset name or TOML path (colocated serving; "
              "disaggregated: the chip of a pool whose --prefill-chip/--decode-chip is not "
              "given).")
@click.option("--model", required=True, help="Built-in model name or path to a HF config.json.")
@click.option("--tp", type=int, help="Tensor-parallel chips per replica (default: the fewest "
              "whose memory holds the weights and a step's worth of KV cache).")
@click.option("--replicas", type=int, default=1, show_default=True,
              help="Independent replicas (at most 4096); requests go to the one with the "
                   "fewest outstanding.")
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
@click.option("--split-prompts/--no-split-prompts", default=None,
              help="With chunked prefill: split a prompt to fill a step's budget, or let it "
                   "join a decode step only whole (it waits when it does not fit: "
                   "TensorRT-LLM's in-flight batching without context chunking). Default: as "
                   "the runtime's engine does (trtllm-triton: whole), else split.")
@click.option("--kv-admission", type=click.Choice(["on-demand", "reserve"]), default=None,
              help="How requests enter the KV cache: on-demand (blocks allocated as tokens "
                   "are written, a shortage preempts: vLLM) or reserve (admitted only when "
                   "the whole prompt + output fits beside the running requests' "
                   "reservations, never preempted: TensorRT-LLM's GUARANTEED_NO_EVICT). "
                   "Default: as the runtime's engine does (trtllm-*: reserve), else on demand.")
@click.option("--kv-block", type=int, default=16, show_default=True,
              help="Tokens per KV-cache block.")
@click.option("--preemption", type=click.Choice(["recompute", "swap"]), default="recompute",
              show_default=True, help="What happens to a sequence evicted for KV space.")
@click.option("--kv-offload", type=click.Choice(["auto", "none", "swap", "tier"]),
              default="auto", show_default=True,
              help="The chip's slower memory tiers ([dram2], [dram3]) and the KV cache: tier "
                   "(the cache spans the tiers, each tier's blocks read at its rate), swap "
                   "(preempted sequences swapped to tier 2, then tier 3), none; auto: tier "
                   "when the chip has a second tier.")
@click.option("--kv-prefetch/--no-kv-prefetch", default=False, show_default=True,
              help="Fetch a step's KV copies from the slower tier (swap-ins, a pooled tier's "
                   "placement copies) during the previous step; only what it cannot hide "
                   "stays on the step's chain.")
@click.option("--slo-ttft", type=float, default=2.0, show_default=True,
              help="TTFT objective (s).")
@click.option("--slo-tpot", type=float, default=0.2, show_default=True,
              help="TPOT objective (s).")
@click.option("--weights-dtype", type=click.Choice(DTYPES), help="Weight precision.")
@click.option("--act-dtype", type=click.Choice(DTYPES), help="Activation precision.")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache precision.")
@inference_recipe_option
@click.option("--attention", type=click.Choice(["fused", "unfused"]), default="fused",
              show_default=True, help="Fused (FlashAttention-style) or unfused attention.")
@click.option("--prefill-chip", help="Disaggregated: chip of the prefill pool (default "
              "--chip).")
@click.option("--prefill-chips", type=int, help="Disaggregated: chips in the prefill pool, a "
              "multiple of the TP degree (default one replica: --tp chips, or the fewest that "
              "hold the model).")
@click.option("--decode-chip", help="Disaggregated: chip of the decode pool (default --chip).")
@click.option("--decode-chips", type=int, help="Disaggregated: chips in the decode pool (as "
              "--prefill-chips).")
@click.option("--ep", type=int, help="Expert parallelism: experts split over this many chips "
              "per replica (a MoE model; docs/serving.md \"Expert parallelism\").")
@click.option("--ep-attention", type=click.Choice(["dp", "tp"]), default="dp",
              show_default=True, help="With --ep: attention data-parallel (each chip its own "
              "requests and KV, DeepSeek-style) or tensor-parallel over the ep chips.")
@click.option("--redundant-experts", type=int, default=0, show_default=True,
              help="With --ep: extra expert slots holding copies of the hottest experts (EPLB).")
@click.option("--moe-skew", type=MOE_SKEW, default=0.0, show_default=True,
              help="With --ep: the experts' popularity coefficient of variation (0: balanced), "
              "or aux-loss (0.31: an auxiliary-loss-balanced router as measured; "
              "docs/workloads.md, \"Mixture of experts\").")
@click.option("--prefill-ep", type=int, help="Disaggregated: the prefill pool's --ep "
              "(default --ep).")
@click.option("--decode-ep", type=int, help="Disaggregated: the decode pool's --ep "
              "(default --ep).")
@click.option("--speculative", help="draft=MODEL,k=K,accept=P (draft=none: free proposals; "
              "draft=mtp: the model's own MTP module, accept 0.85 by default; accept=P1/P2/...: "
              "one rate per draft position).")
@click.option("--prefix-share", type=float, default=0.0, show_default=True,
              help="Fraction of each prompt that is a cached prefix shared by all requests.")
@click.option("--prefixes", type=int, default=0, show_default=True,
              help="N >= 1: each request carries one of N prefixes (uniform) of --prefix-share "
                   "x the mean prompt, cached LRU across the memory tiers; 0: one pinned prefix.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--runtime",
              help="Serving runtime's host costs and its engine's tensor-parallel "
                   "all-reduce (vllm, trtllm custom kernels or nccl): a profile name (ideal, "
                   "vllm-v1, trtllm-triton, trtllm-bench, vllm-v0) or a TOML path; "
                   "docs/serving.md, \"Runtime host costs\". Default: the chip's ([overheads] "
                   "serving_runtime: h100 vllm-v1; ideal, the chip alone, for the others).")
@click.option("--sweep-qps", help="LO:HI:N: a throughput-latency curve over N arrival rates, "
              "and the highest meeting the SLOs with goodput within 10 % of it (≥ HI when the "
              "top still does).")
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
@click.option("--ideal", is_flag=True,
              help="The deployment's bound: every overhead left out (recipe and format ops, "
                   "kernel launches and step syncs, the collective library's losses, the "
                   "power limit and the runtime's host costs); the work itself stays "
                   "(docs/serving.md, \"Serving waterfall\").")
@afd_options
@friendly
def serve(chip, model, tp, replicas, qps, burstiness, concurrency, trace_file, prompt, gen,
          requests, duration, scheduler, max_batch, max_batched_tokens, chunked_prefill,
          split_prompts, kv_admission, kv_block, preemption, kv_offload, kv_prefetch, slo_ttft,
          slo_tpot, weights_dtype, act_dtype, kv_dtype, recipe,
          attention, prefill_chip, prefill_chips, decode_chip, decode_chips, ep, ep_attention,
          redundant_experts, moe_skew, prefill_ep, decode_ep, speculative,
          prefix_share, prefixes, seed, runtime, sweep_qps, plot, export_profile, oracle,
          execution, fusion, as_json, trace_out, waterfall, ideal, **afd):
    """Simulate an LLM serving engine: arrivals, continuous batching, chunked prefill, paged
    KV cache, preemption; TTFT, TPOT, throughput, goodput under SLOs, tokens per joule.

    \b
    diptych serve --chip h100 --model llama-3-70b --tp 2 --qps 4
    diptych serve --chip infer-2026 --model llama-3-70b --concurrency 64 --json
    diptych serve --chip h100 --model llama-3-8b --sweep-qps 5:60:10 --plot curve.png
    diptych serve --prefill-chip train-2026 --decode-chip infer-2026 --model llama-3-70b \\
        --qps 2
    diptych serve --chip h100 --decode-chip infer-2026 --model llama-3-8b --qps 4
    diptych serve --attention-chip h100 --ffn-chip infer-2026 --ffn-chips 4 \\
        --model qwen3-30b-a3b --concurrency 32 --afd-microbatches 2
    """
    from ..sim.serving.config import ServeConfig, parse_speculative
    from ..arch.runtime import load_runtime
    from ..sim.serving.serve import StepTimerCache
    from ..sim.serving.serve import serve as run_serve

    cfg = ServeConfig(scheduler=scheduler, max_batch=max_batch,
                      max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill,
                      split_prompts=split_prompts, kv_admission=kv_admission,
                      kv_block_tokens=kv_block,
                      preemption=preemption, kv_offload=kv_offload, kv_prefetch=kv_prefetch,
                      prefix_share=prefix_share, prefixes=prefixes, slo_ttft_s=slo_ttft,
                      slo_tpot_s=slo_tpot,
                      speculative=parse_speculative(speculative) if speculative else None,
                      seed=seed, runtime=load_runtime(runtime) if runtime else None)
    if cfg.speculative is not None and cfg.speculative.mtp:   # the model must ship one
        from ..workloads import load_model
        from ..workloads.mtp import check_mtp
        check_mtp(load_model(model))
    precision = {"weights_dtype": weights_dtype, "act_dtype": act_dtype, "kv_dtype": kv_dtype,
                 **({"recipe": recipe} if recipe else {})}
    execution = {"execution": execution, "fusion": fusion}
    # the load first: its bounds (--requests, rates, lengths) are refused before any chip is
    # loaded or a replica sized
    has_load = any(v is not None for v in (qps, concurrency, trace_file)) or sweep_qps
    load = sweep = None
    if has_load or not export_profile:
        load, sweep = _load(sweep_qps, qps, concurrency, trace_file, prompt, gen, requests,
                            duration, burstiness)
    if sweep_qps and waterfall:
        raise ValueError("--waterfall explains one run; drop it with --sweep-qps")
    if ideal and export_profile:
        raise ValueError("--export-profile writes the replica's step-time tables as its engine "
                         "times them, overheads included; --ideal's bound is not exported: "
                         "give one of them")
    if plot and not sweep_qps:
        raise ValueError("--plot draws a --sweep-qps curve; add --sweep-qps LO:HI:N")
    if afd_requested(afd):
        dep = afd_from_flags(afd, chip=chip, model=model, tp=tp, replicas=replicas, ep=ep,
                             redundant_experts=redundant_experts, moe_skew=moe_skew,
                             attention=attention, execution=execution, precision=precision,
                             speculative=speculative, export_profile=export_profile,
                             waterfall=waterfall,
                             pd_flags={"prefill_chip": prefill_chip,
                                       "prefill_chips": prefill_chips,
                                       "decode_chip": decode_chip, "decode_chips": decode_chips,
                                       "prefill_ep": prefill_ep, "decode_ep": decode_ep})
    else:
        chips = _pool_chips(chip, prefill_chip, decode_chip, prefill_chips, decode_chips,
                            replicas)
        layouts = _ep_layouts(ep, ep_attention, redundant_experts, moe_skew, prefill_ep,
                              decode_ep, chips is not None)
        dep = _pools(chips, chip, model, tp, replicas, prefill_chips, decode_chips, precision,
                     attention, execution, cfg, layouts)
    if ideal:
        from ..sim.serving.ideal import ideal as ideal_of
        dep, cfg = ideal_of(dep, cfg)
    show = not as_json and sys.stderr.isatty()
    bar = _LazyProgress(show)
    oracles = StepTimerCache(oracle, progress=bar.grid)
    try:
        if export_profile:
            from ..sim.serving.profile import export_profile as do_export
            if any(p.replica.experts.ep > 1 for p in dep.pools):
                raise ValueError("--export-profile writes tensor-parallel replicas' tables; "
                                 "it does not export an expert-parallel one (drop --ep)")
            for pool in dep.pools:
                sub = export_profile if len(dep.pools) == 1 else \
                    f"{export_profile}/{pool.replica.chip.name}"
                files = do_export(pool.replica, sub, max_tokens=max_batched_tokens,
                                  max_batch=min(max_batch, 256), block_tokens=kv_block,
                                  progress=lambda d, t: bar.update(d, t, "profile points"))
                if not as_json:
                    bar.stop()
                    click.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
            if load is None:
                return
        if sweep is not None:
            _run_sweep(dep, cfg, load, sweep, oracles, bar, as_json, plot, trace_out)
            return
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
    con.print(report.summary_table(d))
    con.print(report.stats_table(d))
    if d.get("waterfall"):
        con.print(report.waterfall_table(d["waterfall"]))
    for w in res.warnings:
        click.echo(f"warning: {w}", err=True)
    if d["info"].get("clipped_to_context"):
        click.echo(f"note: {d['info']['clipped_to_context']} requests' lengths were clipped to "
                   f"the model's context", err=True)


def _load(sweep_qps, qps, concurrency, trace_file, prompt, gen, requests, duration,
          burstiness):
    """``(Load, (lo, hi, n) or None)``: the request stream the flags describe (a sweep's at
    its lowest rate)."""
    from ..sim.serving.requests import Load, parse_length
    from ..sim.serving.sweep import parse_sweep

    lengths = {"prompt": parse_length(prompt, "--prompt"), "gen": parse_length(gen, "--gen"),
               "requests": requests, "duration_s": duration, "burstiness": burstiness}
    if not sweep_qps:
        return Load(qps=qps, concurrency=concurrency, trace=trace_file, **lengths), None
    if concurrency is not None or trace_file is not None or qps is not None:
        raise ValueError("--sweep-qps sets the arrival rate itself; drop --qps, --concurrency "
                         "and --trace")
    lo, hi, n = parse_sweep(sweep_qps)
    return Load(qps=lo, **lengths), (lo, hi, n)


def _run_sweep(dep, cfg, load, sweep, oracles, bar, as_json, plot, trace_out):
    from ..sim.serving.sweep import max_qps_text, plot_sweep, qps_sweep

    sw = qps_sweep(dep, load, *sweep, cfg, oracles=oracles,
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
           "info": sw["info"], "points": sw["points"],
           **{k: sw[k] for k in ("max_qps_meeting_slo", "max_qps_is_lower_bound",
                                 "goodput_tolerance", "warnings")},
           "chips": dep.chips}
    if as_json:
        click.echo(dumps(out))
        return
    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=160)
    con.print(report.sweep_table(sw, slo))
    click.echo(report.setup_line(sw["info"]))
    click.echo(f"{dep.describe()}: highest load meeting the SLOs (p99 TTFT ≤ "
               f"{slo['ttft_s']:g} s, p99 TPOT ≤ {slo['tpot_s']:g} s, goodput within "
               f"{100 * sw['goodput_tolerance']:.0f} % of the load): {max_qps_text(sw)}")
    for w in sw["warnings"]:
        click.echo(f"warning: {w}", err=True)
    if plot:
        click.echo(f"wrote {plot}", err=True)


def _write_trace(path: str, res) -> None:
    from ..sim.serving.trace import serving_trace

    from ..arch.atomic import atomic_text
    atomic_text(path, json.dumps(serving_trace(res)))
