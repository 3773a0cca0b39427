"""``diptych run``: one model phase (or a topology CSV) on a chip: per-layer table and totals."""

from __future__ import annotations

import warnings

import click

from ..arch.chip import KERNEL_ORDERS
from ..arch.dtypes import DTYPES
from ..workloads.loss import IMPLEMENTATIONS as LOSS_IMPLEMENTATIONS
from ..workloads.precision import INFERENCE_RECIPES, RECIPES
from . import fmt
from .errors import echo_err, friendly
from .jsonout import dumps
from .result_check import check_result
from .precision_spec import describe
from ..workloads.moe import DISPATCHERS
from .moe_skew import MOE_SKEW


def _console():
    """A rich console; when output is not a terminal (pipes, files, tests) tables are laid
    out 160 columns wide instead of wrapping at 80."""
    import sys

    from rich.console import Console
    return Console() if sys.stdout.isatty() else Console(width=160)


class _LazyConsole:
    """:func:`_console`, built on first use: ``run --json`` never prints through it and need
    not import rich (~20-30 ms of start-up, issue 27)."""

    def __init__(self):
        self._con = None

    def __getattr__(self, name):
        if self._con is None:
            self._con = _console()
        return getattr(self._con, name)


def parse_batches(text: str) -> list[int]:
    """``"1,8,32"`` → ``[1, 8, 32]``; each must be a positive integer."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise ValueError(f"batch must be a positive integer or a comma-separated list of "
                             f"them, not {part!r}") from None
        if v < 1:
            raise ValueError(f"batch must be a positive integer, not {v}")
        out.append(v)
    return out


_WHERE = {"scratchpad": "SP", "shared_buffer": "SB", "dram": "DRAM", "dram2": "DRAM2",
          "dram3": "DRAM3"}


def _residency(rec: dict) -> str:
    """Where an op's operands live: ``SB: h_attn→qkv · DRAM: w_qkv`` (reads → writes)."""
    by: dict[str, tuple[list, list]] = {}
    for a in rec.get("residency", ()):
        r, w = by.setdefault(_WHERE[a["location"]], ([], []))
        (r if a["mode"] == "read" else w).append(a["tensor"].rsplit("].", 1)[-1])
    return " · ".join(f"{loc}: {','.join(r)}" + (f"→{','.join(w)}" if w else "")
                      for loc, (r, w) in by.items())


def _regime_text(d: dict) -> str:
    """The run's roofline regime and the share of its time in each (sim/regime.py)."""
    parts = (("compute-bound ops", d["compute_seconds"]),
             ("memory-bound ops", d["memory_bound_seconds"]),
             ("latency-bound ops (near neither roof)", d.get("latency_bound_seconds", 0.0)),
             ("exposed communication", d["communication_seconds"]))
    total = sum(v for _, v in parts)
    if not total:
        return d["bound"]
    return f"{d['bound']} (share of the ops' time: " + ", ".join(
        f"{k} {fmt.pct(v / total)}" for k, v in parts if v > 0) + ")"


def _layer_table(layers: list[dict], total: float, title: str):
    from rich.table import Table

    scheduled = any("start_s" in r for r in layers)
    cols = ["block", "op", "shape", "×", "time", "total", "share", "bound", "MAC util"]
    if scheduled:
        cols += ["exposed", "residency"]
    t = Table(*cols, title=title)
    for r in layers:
        row = [r["block"], r["op"], r["shape"], str(r["repeat"]), fmt.seconds(r["seconds"]),
               fmt.seconds(r["total_seconds"]),
               fmt.pct(r["total_seconds"] / total if total else None), r["bound"],
               fmt.pct(r["utilization"])]
        if scheduled:
            row += [fmt.seconds(r["exposed_s"]), _residency(r)]
        t.add_row(*row)
    return t


def _totals_table(d: dict):
    from rich.table import Table

    t = Table("quantity", "value", show_header=False, title="totals")
    ph = d["phase"]
    if ph == "prefill":
        t.add_row("time to first token", fmt.seconds(d["ttft_s"]))
    elif ph == "decode":
        t.add_row("time per output token", fmt.seconds(d["tpot_s"]) +
                  f" (at context {d['info']['context_len']})")
        t.add_row("tokens/s per user", fmt.number(d["tokens_per_s_per_user"]))
    else:
        t.add_row("step time", fmt.seconds(d["seconds"]))
        t.add_row("HFU", fmt.pct(d["hfu"]))
    t.add_row("tokens/s", f"{fmt.number(d['tokens_per_s'])} "
                          f"({fmt.number(d['tokens_per_s_per_chip'])} per chip)")
    t.add_row("MFU", f"{fmt.pct(d['mfu'])} of the chip's {d['info']['compute_dtype']} peak")
    t.add_row("FLOPs (model)", fmt.si(d["flops"], "FLOP"))
    t.add_row("DRAM traffic", fmt.si(d["dram_bytes"], "B"))
    t.add_row("DRAM bandwidth utilisation", fmt.pct(d["dram_bw_utilization"]))
    t.add_row("bound (roofline regime)", _regime_text(d))
    ej = d["energy_j_per_token"]
    t.add_row("energy per token", fmt.si(ej, "J") if ej >= 1 else f"{ej * 1e3:.3f} mJ")
    t.add_row("energy by component", fmt.energy_shares(d.get("energy_breakdown_j")))
    info = d.get("info", {})
    grid = (f", 2-D layout X {info['tp_x']} × YZ {info['tp_yz']} of {info['tp_slice']}"
            if info.get("tp_layout") == "2d" else "")
    t.add_row("chips", f"{d['chips']} (tp {d['tp']}, dp {d['dp']}{grid})")
    t.add_row("precision", describe(d["precision"]))
    stack = fmt.stack_text(d.get("info", {}))
    if stack:
        t.add_row("software stack", stack)
    if d.get("execution") == "schedule":
        sch = d["schedule"]
        t.add_row("execution", "schedule" + (", ops fused into GEMMs" if sch.get("fused")
                                             else ", no fusion"))
        t.add_row("fixed costs", f"{fmt.seconds(d['fixed_costs_s'])} (launches "
                  f"{fmt.seconds(sch['launch_s'])}, step sync {fmt.seconds(sch['step_sync_s'])}"
                  f"; overlapped where the schedule allows)")
        t.add_row("exposed communication", fmt.seconds(d["communication_seconds"]))
        busy = d.get("busiest_unit") or {}
        t.add_row("unit occupancy (busy time)",
                  (f"busiest {busy['unit']} {fmt.pct(busy['occupancy'])} · "
                   if busy.get("unit") else "")
                  + ", ".join(f"{k} {fmt.pct(v)}" for k, v in d["utilization"].items()))
    mem = d["memory"]
    bd = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in mem["breakdown"].items())
    held = (f"{mem['memory_bytes'] / 2**30:.1f} of {mem['capacity_bytes'] / 2**30:.1f} GiB"
            if "tier2_parts" not in mem else
            f"tier 1 {mem['tier1_bytes'] / 2**30:.1f} of {mem['capacity_bytes'] / 2**30:.1f} "
            f"GiB, tier 2 ({', '.join(mem['tier2_parts'])}) {mem['tier2_bytes'] / 2**30:.1f} of "
            f"{mem['tier2_capacity_bytes'] / 2**30:.1f} GiB")
    t.add_row("memory per chip", f"{held} ({bd} GiB): "
              + ("fits" if mem["fits"] else "[red]does not fit[/red]"))
    tiers = d.get("info", {}).get("memory_tiers")
    if tiers:       # a chip with [dram2] whose state spilled into it
        b = tiers["bytes"]
        t.add_row("memory tiers", f"DRAM {b['dram'] / 2**30:.1f} GiB, tier 2 "
                  f"{b['dram2'] / 2**30:.1f} GiB of state; tier 2 moved "
                  f"{tiers['dram2_bytes_moved'] / 2**30:.1f} GiB this run "
                  f"(docs/chips.md, 'Memory tiers')")
        for i, (name, tr) in enumerate(tiers.get("tiers", {}).items(), 2):
            kinds = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in tiers["kinds"][name].items())
            t.add_row(f"tier {i} ({tr['kind']}, {tr['attach']})",
                      f"holds {b[name] / 2**30:.1f} GiB ({kinds or 'nothing'}); moved "
                      f"{tr['bytes_moved'] / 2**30:.1f} GiB: +{tr['added_s']:.3g} s over "
                      f"the first tier (stream {tr['stream_s']:.3g} s), {tr['energy_j']:.3g} J")
    off = d.get("info", {}).get("offload")
    if off:         # a training step with state offloaded to the second tier
        t.add_row("offload", fmt.offload_line(off))
    return t


def _curve_table(curve: dict):
    from rich.table import Table

    phase = curve["results"][0].phase
    label = {"prefill": "TTFT", "decode": "TPOT", "train": "step"}[phase]
    t = Table("batch", label, "tokens/s per user", "tokens/s per chip", "MFU", "DRAM BW",
              "bound", "fits", "energy by component", title="batching curve")
    for r in curve["results"]:
        mark = " ◀ compute-bound from here" if r.batch == curve["compute_bound_batch"] else ""
        t.add_row(str(r.batch), fmt.seconds(r.seconds),
                  f"{r.tokens_per_s_per_user:.1f}" if r.tokens_per_s_per_user else "-",
                  f"{r.tokens_per_s / r.chips:.1f}", fmt.pct(r.mfu),
                  fmt.pct(r.dram_bw_utilization),
                  r.bound + mark, "yes" if r.fits else "no",
                  fmt.energy_shares(r.energy_breakdown_j, compact=True))
    return t


@click.command("run")
@click.option("--chip", required=True, help="Chip preset name or TOML path.")
@click.option("--model", help="Built-in model name or path to a HF config.json.")
@click.option("--phase", type=click.Choice(["prefill", "decode", "train"]), default="decode",
              show_default=True)
@click.option("--batch", default="1", show_default=True,
              help="Sequences per batch, or a comma list (1,8,32) for a batching curve.")
@click.option("--prompt", type=int, help="Prompt length (prefill) / context before decode.")
@click.option("--gen", type=int, help="Generated tokens (decode; default 1).")
@click.option("--seq", type=int, help="Training sequence length.")
@click.option("--chips", type=int,
              help="Total chips (tp × dp; on a cluster tp × pp × dp × cp).")
@click.option("--tp", type=int, help="Tensor-parallel degree.")
@click.option("--dp", type=int, help="Data-parallel degree (training; on a cluster also "
                                     "inference replicas).")
@click.option("--cluster", "cluster", metavar="PRESET|PATH",
              help="Run a parallel plan's step on a cluster (dgx-h100, tpu-v4-pod or a TOML "
                   "file; docs/cluster.md). The plan flags below without --cluster run on "
                   "one switch domain of --chips chips on the chip's own links.")
@click.option("--pp", type=int, help="Pipeline-parallel stages (plan).")
@click.option("--ep", type=int, help="Expert-parallel degree, carved out of dp × cp (plan; "
                                     "MoE models).")
@click.option("--cp", type=int, help="Context-parallel degree: each sequence split over cp "
                                     "ranks, ring attention (plan; train, prefill).")
@click.option("--zero", type=int, help="ZeRO stage 0-3 (3 = FSDP) over the dp × cp ranks "
                                       "(plan; default 0).")
@click.option("--zero-shards", type=int,
              help="Shard the ZeRO state within groups of this many ranks, replicate across "
                   "them (hybrid sharding; plan).")
@click.option("--schedule", type=click.Choice(["1f1b", "interleaved", "gpipe"]),
              help="Pipeline schedule (plan; default 1f1b).")
@click.option("--virtual-stages", type=int,
              help="Model chunks per pipeline stage of the interleaved schedule (plan).")
@click.option("--precision", "precision", metavar="SPEC",
              help="Weights, activations and KV cache at once: a dtype (bf16) or per tensor "
                   "(w=fp8,a=fp8,kv=fp8), as in `diptych compare --precision`. Default: "
                   "inference in the chip's default dtype, training in bf16.")
@click.option("--weights-dtype", type=click.Choice(DTYPES), help="Weight precision.")
@click.option("--act-dtype", type=click.Choice(DTYPES), help="Activation precision.")
@click.option("--kv-dtype", type=click.Choice(DTYPES), help="KV-cache precision.")
@click.option("--recipe", type=click.Choice(RECIPES + INFERENCE_RECIPES),
              help="Precision recipe (docs/precision.md). Training: fp8-delayed (the default "
                   "for FP8 weights and activations), fp8-current or mxfp8. Prefill and "
                   "decode: fp8-static or fp8-dynamic (FP8 linear layers over 16-bit "
                   "activations, embedding and LM head).")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Overlap collectives with compute.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), is_flag=False,
              flag_value="full", default=None,
              help="Activation recomputation (training): none (default), selective (norms "
                   "and activation functions; plan) or full; --recompute alone is full.")
@click.option("--attention", type=click.Choice(["fused", "unfused"]), default="fused",
              show_default=True,
              help="Fused (FlashAttention-style, scores stay on chip) or unfused attention.")
@click.option("--attention-kernel", type=click.Choice(["default", "fa2"]), default="default",
              show_default=True,
              help="Fused-attention kernel: the chip's own ([attention]; h100: cuDNN) or "
                   "FlashAttention-2 ([attention_fa2]; Transformer Engine with "
                   "NVTE_FUSED_ATTN=0). docs/workloads.md, \"Fused attention\".")
@click.option("--elementwise-kernels", type=click.Choice(["default", "megatron"]),
              default="default", show_default=True,
              help="Elementwise kernels: the chip's own ([elementwise_kernels]; absent: the "
                   "vector unit's copy rate) or Megatron-Core's kernels at their measured "
                   "rates ([elementwise_kernels_megatron]; h100: SwiGLU and GeGLU "
                   "(bias_activation_fusion) and the fused and eager cross-entropy). "
                   "docs/validation-published.md, \"Elementwise kernels\".")
@click.option("--kernel-order", type=click.Choice(["default", *KERNEL_ORDERS]),
              default="default", show_default=True,
              help="Scheduled runs: the compute kernels' order, the chip's own ([overheads] "
                   "kernel_order; absent: dataflow), dataflow (independent kernels overlap) or "
                   "issue (one in-order CUDA stream, as PyTorch/Megatron-Core run them: "
                   "GEMMs, attention and vector ops one at a time, collectives beside them) or "
                   "one_queue (issue, and every kernel, collectives too, dispatched in issue "
                   "order: CUDA_DEVICE_MAX_CONNECTIONS=1). docs/program.md, \"Kernel order\".")
@click.option("--cross-entropy", type=click.Choice(list(LOSS_IMPLEMENTATIONS)), default=None,
              help="Training: the loss's implementation, Megatron-Core's fused FP32 "
                   "cross-entropy (cross_entropy_loss_fusion: true; the default) or the "
                   "unfused one, a PyTorch kernel per operation (docs/workloads.md, \"The "
                   "loss, the embedding gradient and the optimizer\").")
@click.option("--hidden-dropout", type=float, default=None, metavar="P",
              help="Training: the bias-dropout-adds' dropout probability (NeMo's "
                   "hidden_dropout; default 0): each writes a bool mask its backward reads "
                   "(docs/workloads.md, \"Dropout\").")
@click.option("--attention-dropout", type=float, default=None, metavar="P",
              help="Training: the fused attention kernel's dropout probability (NeMo's "
                   "attention_dropout; default 0): the mask drawn inside the kernel at the "
                   "attention table's measured dropout_cost.")
@click.option("--nvls/--no-nvls", default=True, show_default=True,
              help="All-reduces through the switch's in-network reduction where the chip has "
                   "one (NVLink SHARP); --no-nvls is NCCL_NVLS_ENABLE=0: the ring.")
@click.option("--collective-algorithms", metavar="LIST",
              help="NCCL_ALGO: a comma list of the algorithms the chip's collective library "
                   "may use (ring, tree, nvls, hierarchical; those its [collectives] table "
                   "lists). Default: all of them, the fastest by message size.")
@click.option("--tp-overlap-config", metavar="LIST",
              help="The run's own Transformer Engine userbuffers settings over the chip's "
                   "[tp_overlap] table: a comma list of key=value (splits, *_cores, the "
                   "ring exchanges' *_aggregate 0/1; e.g. fc2_fprop_cores=20,"
                   "fc2_dgrad_aggregate=1). Default: the chip's table.")
@click.option("--tp-layout", type=click.Choice(["1d", "2d"]), default="1d", show_default=True,
              help="Inference on a torus chip: Megatron's 1-D tensor-parallel split or Pope "
                   "et al.'s 2-D weight-stationary FFN (d_model over X, d_ff over YZ of the "
                   "torus slice; docs/cluster.md, \"2-D weight-stationary layout\").")
@click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=True, show_default=True,
              help="Training: the chip's [tp_overlap] stack (Transformer Engine userbuffers); "
                   "--no-tp-comm-overlap is Megatron's NCCL sequence-parallel path "
                   "(docs/cluster.md, \"Tensor-parallel overlap\").")
@click.option("--sequence-parallel/--no-sequence-parallel", "sequence_parallel", default=None,
              help="Training at --tp > 1: Megatron-Core's sequence parallelism (norms and "
                   "residual adds on the sequence shard, reduce-scatters and all-gathers for "
                   "the all-reduces; docs/workloads.md). Default: on at --tp > 1, as "
                   "Megatron-Core runs it with Transformer Engine; one node and --cluster "
                   "alike.")
@click.option("--moe-skew", type=MOE_SKEW,
              help="MoE: the experts' popularity skew, the coefficient of variation of their "
                   "expected tokens, or aux-loss (0.31: an auxiliary-loss-balanced router as "
                   "measured; default 0: a balanced router; docs/workloads.md, \"Mixture of "
                   "experts\").")
@click.option("--moe-capacity-factor", type=float,
              help="MoE: each expert takes at most this × its mean tokens and drops the "
                   "rest (default: dropless).")
@click.option("--moe-pad", is_flag=True, default=None,
              help="MoE: pad every expert to its capacity (needs --moe-capacity-factor).")
@click.option("--moe-dispatcher", type=click.Choice(list(DISPATCHERS)), default=None,
              help="MoE: how the router and the token permutation run: fused (default: one "
                   "top-k, one gather each way) or megatron (Megatron-Core's PyTorch code: "
                   "its small kernels and two host synchronisations a layer; "
                   "docs/workloads.md, \"Mixture of experts\").")
@click.option("--offload", type=click.Choice(["none", "optimizer", "params"]),
              default="none", show_default=True,
              help="Training on a chip with a second memory tier ([dram2]): none, optimizer "
                   "(FP32 master weights and Adam moments in the tier) or params (those and "
                   "the weights), ZeRO-Offload-style; the update runs on the chip, reading "
                   "and writing the tier (docs/chips.md, \"Training state in the second "
                   "tier\").")
@click.option("--micro-batch", type=int,
              help="Sequences per training micro-batch (default: ~8k tokens per micro-batch).")
@click.option("--execution", type=click.Choice(["sum", "schedule"]), default=None,
              help="schedule: a list schedule of the program on the chip's arrays, vector "
                   "unit, DRAM and links, with the residency plan and fixed costs "
                   "(docs/program.md); sum: every op timed alone from DRAM and added (the "
                   "model before issue 9, kept for comparison). Default: schedule. With "
                   "--cluster or a plan flag: how each layer kind of the step is timed.")
@click.option("--fusion/--no-fusion", default=True, show_default=True,
              help="Scheduled runs: fuse norms and elementwise ops into GEMMs "
                   "where the chip's vector unit sits on the arrays' path.")
@click.option("--topology", type=click.Path(dir_okay=False),
              help="SCALE-Sim topology CSV or GEMM list to run instead of a model.")
@click.option("--ideal", is_flag=True,
              help="Leave every overhead out: recipe and format ops, kernel launches and "
                   "step syncs, the collective library's losses (links at line rate), the "
                   "power limit; the work itself stays (docs/workloads.md, \"Efficiency "
                   "waterfall\").")
@click.option("--waterfall/--no-waterfall", default=None,
              help="The efficiency waterfall, peak to MFU by mechanism (re-runs the phase "
                   "four or five times). Default: on for one batch size, off for a curve.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--trace", type=click.Path(dir_okay=False),
              help="Write a Chrome/Perfetto trace of the (last) run.")
@friendly
def run(chip, model, phase, batch, prompt, gen, seq, chips, tp, dp, cluster, pp, ep, cp, zero,
        zero_shards, schedule, virtual_stages, precision, weights_dtype, act_dtype, kv_dtype,
        recipe, overlap, recompute, attention, attention_kernel, elementwise_kernels,
        kernel_order, cross_entropy, hidden_dropout, attention_dropout, nvls,
        collective_algorithms, tp_overlap_config, tp_layout,
        tp_comm_overlap, sequence_parallel, moe_skew, moe_capacity_factor, moe_pad,
        moe_dispatcher, offload,
        micro_batch, execution, fusion, topology, ideal, waterfall, as_json, trace):
    """Simulate a model phase (prefill, decode, train) or a topology file on a chip.

    Prints a per-layer table (op, shape, time, compute- or memory-bound, utilisation) and
    totals; identical layers are simulated once and scaled. A comma list of batch sizes on
    decode gives the latency/throughput curve, marking where decode turns compute-bound.

    With --cluster (or any of --pp, --ep, --cp, --zero, --zero-shards, --schedule,
    --virtual-stages, --recompute selective) it simulates a parallel plan's step: pipeline,
    ZeRO, expert and context parallelism over the cluster's topology (docs/cluster.md).
    """

    from .gc_pause import imports

    with imports():       # the engine's modules, without the collector (tools/gc_pause.py)
        from ..sim.run import Scenario, run_curve
        from ..sim.run.variant import IDEAL
    from .precision_spec import run_dtypes
    from .progress import progress_display
    from .run_cluster import plan_flags_given, run_plan

    con = _LazyConsole()
    moe = dict(moe_skew=moe_skew, moe_capacity_factor=moe_capacity_factor, moe_pad=moe_pad,
               moe_dispatcher=moe_dispatcher)
    stack = dict(attention_kernel=attention_kernel, nvls=nvls, tp_comm_overlap=tp_comm_overlap,
                 offload=offload, collective_algorithms=collective_algorithms,
                 elementwise_kernels=elementwise_kernels, kernel_order=kernel_order,
                 tp_overlap_config=tp_overlap_config)
    if cross_entropy is not None:
        if phase != "train" or topology:
            raise ValueError(f"--cross-entropy {cross_entropy} is a training loss's "
                             f"implementation; {'a --topology file' if topology else phase} "
                             f"has no loss")
        stack["cross_entropy"] = cross_entropy
    for name, value in (("hidden_dropout", hidden_dropout),
                        ("attention_dropout", attention_dropout)):
        if value is None:
            continue
        if topology:
            raise ValueError(f"--{name.replace('_', '-')} {value} applies to a model's "
                             f"training step; a --topology file lowers no dropout")
        stack[name] = value
    if sequence_parallel is not None:
        flag = "--sequence-parallel" if sequence_parallel else "--no-sequence-parallel"
        if phase != "train" or topology:
            raise ValueError(f"{flag} applies to a model's training step; "
                             f"{'a --topology file' if topology else phase} lowers no "
                             f"sequence parallelism")
        if sequence_parallel and (tp or 1) < 2:
            raise ValueError(f"--sequence-parallel needs tensor parallelism (--tp > 1), not "
                             f"--tp {tp or 1}: Megatron-Core splits the sequence over the "
                             f"tensor-parallel ranks")
        stack["sequence_parallel"] = sequence_parallel
    weights_dtype, act_dtype, kv_dtype, recipe = run_dtypes(precision, phase, weights_dtype,
                                                             act_dtype, kv_dtype, recipe)
    if tp_layout != "1d" and (topology or cluster or plan_flags_given(dict(
            pp=pp, ep=ep, cp=cp, zero=zero, zero_shards=zero_shards, schedule=schedule,
            virtual_stages=virtual_stages, recompute=recompute))):
        raise ValueError(f"--tp-layout {tp_layout} applies to a model on one chip type "
                         f"(diptych run --model ... --tp N), not to a --topology file or a "
                         f"parallel plan (--cluster, --pp, --ep, --cp, ...)")
    if topology:
        if model:
            raise ValueError("give either --model or --topology, not both")
        given = [f"--{k.replace('_', '-')}" for k, v in moe.items() if v is not None]
        if given:
            raise ValueError(f"{given[0]} routes a mixture-of-experts model; a --topology "
                             f"file has no router")
        given = [f for f, v in (("--ideal", ideal), ("--waterfall", waterfall)) if v]
        if given:
            raise ValueError(f"{given[0]} explains a model's run (its overheads, the "
                             f"waterfall's mechanisms); a --topology file runs its GEMMs only")
        if offload != "none":
            raise ValueError(f"--offload {offload} places a model's training state; a "
                             f"--topology file has none")
        odd = [f for f, v in (("--attention-kernel", attention_kernel != "default"),
                              ("--elementwise-kernels", elementwise_kernels != "default"),
                              ("--kernel-order", kernel_order != "default"),
                              ("--no-nvls", not nvls),
                              ("--collective-algorithms", collective_algorithms is not None),
                              ("--no-tp-comm-overlap", not tp_comm_overlap),
                              ("--tp-overlap-config", tp_overlap_config is not None)) if v]
        if odd:
            raise ValueError(f"{odd[0]} sets a model's attention, kernels or collectives; a "
                             f"--topology file runs GEMMs only")
        if recipe:
            raise ValueError(f"--recipe {recipe} quantises a model's layers; a --topology file "
                             f"runs its GEMMs in one dtype (--act-dtype)")
        _run_topology(con, chip, topology, weights_dtype, act_dtype, kv_dtype, execution,
                      fusion, as_json, trace)
        return
    plan_flags = plan_flags_given(dict(pp=pp, ep=ep, cp=cp, zero=zero, zero_shards=zero_shards,
                                       schedule=schedule, virtual_stages=virtual_stages,
                                       recompute=recompute))
    if topology and (cluster or plan_flags):
        raise ValueError(f"{'--cluster' if cluster else plan_flags[0]} applies to a model "
                         f"(--model), not to a --topology file")
    if not model:
        raise ValueError("--model is required (or --topology FILE.csv)")
    batches = parse_batches(batch)
    if ideal and recipe:
        raise ValueError(f"--ideal leaves every precision recipe's overheads out; --recipe "
                         f"{recipe} names one's: give one of them")
    if cluster or plan_flags:
        with warnings.catch_warnings(record=True) as caught, \
                progress_display(f"{model} {phase} on {chip}", enabled=not as_json) as progress:
            warnings.simplefilter("always")
            run_plan(con, chip=chip, model=model, phase=phase, batches=batches, cluster=cluster,
                     prompt=prompt, gen=gen, seq=seq, chips=chips, tp=tp, dp=dp, pp=pp, ep=ep,
                     cp=cp, zero=zero, zero_shards=zero_shards, schedule=schedule,
                     virtual_stages=virtual_stages, micro_batch=micro_batch,
                     recompute=recompute, overlap=overlap, attention=attention,
                     weights_dtype=weights_dtype, act_dtype=act_dtype, kv_dtype=kv_dtype,
                     recipe=recipe, as_json=as_json, trace=trace, progress=progress,
                     execution=execution, moe={**moe, **stack},
                     variant=IDEAL if ideal else None, waterfall=waterfall)
        for msg in dict.fromkeys(str(w.message) for w in caught):
            echo_err(f"Warning: {msg}")
        return
    with warnings.catch_warnings(record=True) as caught, \
            progress_display(f"{model} {phase} on {chip}", enabled=not as_json) as progress:
        warnings.simplefilter("always")
        curve = run_curve(chip, model,
                          Scenario.of(phase=phase, prompt=prompt, gen=gen, seq=seq, chips=chips,
                                      tp=tp, dp=dp, weights_dtype=weights_dtype,
                                      act_dtype=act_dtype, kv_dtype=kv_dtype, recipe=recipe,
                                      overlap=overlap,
                                      recompute=recompute == "full", micro_batch=micro_batch,
                                      attention=attention, execution=execution, fusion=fusion,
                                      tp_layout=tp_layout, **moe, **stack),
                          batches=batches, progress=progress,
                          variant=IDEAL if ideal else None,
                          waterfall=len(batches) == 1 if waterfall is None else waterfall)
    for msg in dict.fromkeys(str(w.message) for w in caught):
        echo_err(f"Warning: {msg}")
    _show_curve(con, curve, chip, overlap, as_json, trace)

def _run_topology(con, chip, topology, weights_dtype, act_dtype, kv_dtype, execution, fusion,
                  as_json, trace) -> None:
    """``run --topology``: the file's GEMMs on the chip, printed or as JSON."""
    from ..sim.run import run_topology
    from ..sim.run.trace import chrome_trace
    from .progress import progress_display

    if weights_dtype not in (None, act_dtype) or kv_dtype not in (None, act_dtype):
        raise ValueError("a topology runs every GEMM in one dtype: give --act-dtype or "
                         "--precision DTYPE")
    with progress_display("run", enabled=not as_json) as progress:
        progress(0, 1, f"{topology} on {chip}")
        res = run_topology(chip, topology, dtype=act_dtype,
                           execution=execution, fusion=fusion)
        progress(1, 1, "done")
    d = check_result(res.to_dict(), "run")
    if trace:
        _write_trace(trace, chrome_trace(res.layers, name=f"{res.chip}: {topology}"))
    if as_json:
        click.echo(dumps(d))
        return
    for r in res.layers:
        r.setdefault("total_seconds", r["seconds"])
    con.print(_layer_table(res.layers, res.seconds, f"{topology} on {res.chip}"))
    con.print(f"total {fmt.seconds(res.seconds)}, {fmt.si(res.flops, 'FLOP')}, "
              f"MFU {fmt.pct(res.mfu)}, DRAM {fmt.si(res.dram_bytes, 'B')} "
              f"({fmt.pct(res.dram_bw_utilization)} of peak "
              f"bandwidth), {res.bound}-bound, energy {res.energy_j:.4g} J")
    con.print(fmt.energy_line(res.energy_breakdown_j))


def _show_curve(con, curve: dict, chip, overlap: bool, as_json: bool, trace) -> None:
    """A run's batching curve: the trace of its last run, then JSON or the tables."""
    from ..sim.run.trace import chrome_trace, schedule_trace

    results = curve["results"]
    for r in results:
        check_result(r.to_dict(), "run")
    last = results[-1]
    if trace:
        label = f"{last.model} {last.phase} on {last.chip}"
        _write_trace(trace, schedule_trace(last.timeline, last.schedule, name=label)
                     if last.execution == "schedule" else
                     chrome_trace(last.layers, overlap=overlap, name=label))
    if as_json:
        if len(results) == 1:
            out = results[0].to_dict()
        else:
            out = {"curve": [r.to_dict() for r in results],
                   "compute_bound_batch": curve["compute_bound_batch"]}
        click.echo(dumps(out))
        return
    from ..arch import load_chip
    from .dse.physical import geometry_warnings
    the_chip = load_chip(chip)
    for w in geometry_warnings(the_chip):
        echo_err(f"Warning: cannot be built as described: {w}")
    d = last.to_dict()
    how = ("scheduled; time, exposed: one representative repeat; residency: SP scratchpad, "
           "SB shared buffer" if last.execution == "schedule" else "")
    con.print(_layer_table(last.layers, last.seconds,
                           f"{last.model} {last.phase} on {last.chip}, batch {last.batch} "
                           f"(identical layers simulated once, × = repeats"
                           + (f"; {how})" if how else ")")))
    con.print(_totals_table(d))
    if last.waterfall:
        con.print(fmt.waterfall_line(last.waterfall))
    if last.info.get("variant"):
        con.print(f"ideal: {fmt.left_out(last.info['variant'])} left out (--ideal)")
    if d["usd_per_mtok"] is not None:
        c = the_chip.cost
        con.print(f"cost: {fmt.money(d['cost_usd'])} per chip (manufacturing); "
                  f"{fmt.money(d['usd_per_mtok'])} per million tokens ({fmt.cost_basis(c)}); "
                  f"{fmt.number(d['tokens_per_s_per_usd'])} tokens/s per $ of chip")
    if len(results) > 1:
        con.print(_curve_table(curve))
        cb = curve["compute_bound_batch"]
        con.print(f"{last.phase} turns compute-bound at batch {cb}" if cb is not None
                  else "no batch in the list is compute-bound")
    for r in results:
        if not r.fits:
            con.print(f"[yellow]batch {r.batch}: does not fit: {r.memory['advice']}[/yellow]")


def _write_trace(path: str, data: dict) -> None:
    from pathlib import Path

    from ..arch.atomic import atomic_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_text(path, dumps(data, indent=None))
