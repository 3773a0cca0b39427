"""System checks (issue 21): whole H100 training steps, BF16 and FP8, against NVIDIA's
published step times; prints a Markdown table.

    python benchmarks/validate_system.py [--out FILE] [--only TEXT ...]

Every row is a published, measured step time (NVIDIA/dgxc-benchmarking v24.11, NeMo 24.05
(GPT-3), 24.09 / 24.11 and dev containers, "last step" times of the weak-scaling tables; FP8
is Transformer Engine's delayed scaling, NeMo's default then) beside what ``diptych run
--cluster dgx-h100`` predicts with the published parallel layout and the runs' software
settings (:data:`STACKS`: NVLS off, the attention kernel, TE's userbuffers or not, dropout;
``--stack-defaults`` leaves them out). These rows are **checks only**: no constant anywhere
is set from them (the mechanisms are calibrated on component measurements, each cited where
its number lives). Ratio = diptych ÷ published step time: < 1 means diptych is too fast.
docs/validation-published.md, "System checks", holds the table and how each mechanism moved
it. ~1 min on 2 busy cores with warm caches, 2-3 min with ``--waterfall`` (more cold).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from diptych.sim.cluster.run import build_plan, run_cluster_step
from diptych.sim.run import Scenario

SRC = ("NVIDIA/dgxc-benchmarking commit 35a9aec (v24.11.1), llama3.1/README_{8b,70b}.md, "
       "nemo_megatron/README_175b.md; commit 143b90d, grok1/README_314b.md: seconds per step "
       "(last step), H100 SXM, DGX Cloud")
#: Grok-1's shapes as a config.json (benchmarks/models/grok-1.json says where each comes from)
GROK1 = str(Path(__file__).parent / "models" / "grok-1.json")


@dataclass(frozen=True)
class Row:
    name: str
    model: str
    published_s: float
    chips: int
    batch: int
    seq: int
    degrees: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    fp8: bool = False
    stack: dict = field(default_factory=dict)
    routing: dict = field(default_factory=dict)


#: The software settings of the published runs (sim/run/stack.py), read at the commits cited:
#: ``NCCL_NVLS_ENABLE=0`` in every run (NVIDIA/dgxc-benchmarking 35a9aec llama3.1/configure.sh
#: and nemo_megatron/launch.sh; 143b90d grok1/configure.sh), so every all-reduce is NCCL's
#: ring. Attention: Llama 3.1 runs cuDNN (configure.sh ``NVTE_FUSED_ATTN=1``,
#: ``NVTE_FLASH_ATTN=0``); GPT-3 (launch.sh, ``FW_VERSION=24.05``) and Grok-1 (configure.sh)
#: set ``NVTE_FUSED_ATTN=0``, so Transformer Engine runs flash-attn: FlashAttention-2 (NeMo
#: 24.05 has no FlashAttention-3 path; Grok's ``nemo:dev`` image, sha256:9c876dce…, is
#: imported as is by grok1/setup.sh with no flash-attn-3 install, and NeMo 24.09-era images
#: need ``flashattn-hopper`` installed by hand for TE to pick FA3 [assumption: not there]).
#: TP overlap: every run uses TE userbuffers: ``ub_tp_comm_overlap: true`` in llama3.1_70b.yaml
#: and gpt3_175b_hydra.yaml; Grok-1's grok1_314b.yaml says ``false`` but 143b90d
#: grok1/configure.sh overrides it on the command line (``model.ub_tp_comm_overlap=true``,
#: ``model.sequence_parallel=true``), with ``ub_tp_comm_overlap_cfg: null``, i.e. TE's default
#: userbuffers settings (TE v1.11 module/base.py ``get_default_config``: pipeline and bulk
#: overlaps on 16 SMs, no SM margin), which the h100 ``[tp_overlap]`` table (the 70B's
#: settings) does not spell out [assumption: the chip's table stands in, as for GPT-3].
#: TE's userbuffers settings (``tp_overlap_config``, sim/run/stack.py) where the run's
#: ``ub_tp_comm_overlap_cfg`` differs from the h100 ``[tp_overlap]`` table (the 70B's,
#: 35a9aec llama3.1/llama3.1_70b.yaml L178-230): GPT-3 175B, 35a9aec
#: nemo_megatron/gpt3_175b_hydra.yaml L182-186 ``qkv_wgrad: method: bulk, num_sm: 8``,
#: L206-208 ``fc2_dgrad: method: ring_exchange, aggregate: 1``, L215-220 ``fc2_fprop: method:
#: pipeline, num_sm: 20, num_splits: 4, set_sm_margin: 1`` (the rest, L177-214, as the
#: table). Llama-3.1-8B runs TP1 (``ub_tp_comm_overlap: false``, llama3.1_8b.yaml L127), so has
#: none; Grok-1's ``ub_tp_comm_overlap_cfg: null`` (TE's defaults) is left to the table, above.
GPT3_UB = "qkv_wgrad_cores=8,fc2_fprop_cores=20,fc2_dgrad_aggregate=1"
#: The loss (workloads/loss.py): llama3.1_8b.yaml and llama3.1_70b.yaml set
#: ``cross_entropy_loss_fusion: true``; gpt3_175b_hydra.yaml (35a9aec) and grok1_314b.yaml
#: (143b90d) do not set it, so NeMo's ``build_transformer_config`` leaves Megatron-Core's
#: default, ``False`` (core_r0.9.0 megatron/core/model_parallel_config.py; GPT-3's NeMo 24.05
#: image, Megatron-Core 0.7, has no fused path at all): the unfused cross-entropy.
#: SwiGLU: the Llama runs call Megatron-Core's own ``bias_swiglu_impl`` (35a9aec
#: llama3.1_8b.yaml and llama3.1_70b.yaml: ``activation: fast-swiglu``,
#: ``bias_activation_fusion: true``), timed at the rates the h100 preset measured for it
#: (``[elementwise_kernels_megatron]``). Grok-1's experts call Megatron-Core's own GeGLU
#: (143b90d grok1_314b.yaml: ``activation: fast-geglu``, ``openai_gelu: false``,
#: ``bias_activation_fusion: true``; NeMo's ``activation_to_func`` makes it a gated
#: ``F.gelu``, which Megatron-Core's ``MLP.forward`` runs as ``bias_geglu_impl``, the experts'
#: SequentialMLP too): its own kind, ``geglu`` (benchmarks/models/grok-1.json), which the table
#: times at Megatron's SwiGLU rate [assumption: its compiled twin; h100.toml says why].
#: GPT-3's GeLU has no published measurement of Megatron's kernel: the copy rate. Every run
#: computes its loss with Megatron-Core's cross-entropy, fused or eager (``cross_entropy``
#: below), whose kernels the same table times at their measured rates: GPT-3 and Grok-1 set
#: ``elementwise_kernels="megatron"`` too (GPT-3's GeLU has no entry: only its loss moves).
#: The MoE routing of the published runs (the model's recipe, not the chip's stack, so
#: ``--stack-defaults`` keeps it; workloads/moe.py ``Routing``). Grok-1, NVIDIA/dgxc-benchmarking
#: 143b90d grok1/grok1_314b.yaml [S]: ``moe_expert_capacity_factor: 1.0``,
#: ``moe_pad_expert_input_to_capacity: true`` (Megatron-Core's drop-and-pad path: every expert
#: runs ``capacity = ceil(T·k/E × 1.0)`` rows per source rank whatever the routing, the
#: overflow dropped; core_r0.9.0-0.11.0 token_dispatcher.py ``preprocess``: ``num_out_tokens =
#: capacity × num_experts``, ``capacity × tp × ep`` rows per local expert), so the busiest
#: rank runs exactly its share and no popularity skew can lengthen the step;
#: ``moe_token_dispatcher_type: alltoall`` (diptych's dispatch/combine all-to-alls, the
#: capacity-padded rows: ``C·T·k`` = ``T·k`` at C = 1, and at TP4 under sequence parallelism the
#: dispatcher's own tensor-parallel all-gather and reduce-scatter of the rows the expert runs:
#: workloads/lower.py ``alltoall_tp``); ``moe_grouped_gemm: false``
#: (SequentialMLP: one GEMM pair per local expert; at EP 8 of 8 experts each rank holds one,
#: the same single GEMM a grouped GEMM would run); ``moe_aux_loss_coeff: 0.01`` with
#: Megatron-Core's default ``moe_router_load_balancing_type: aux_loss``; the router a plain
#: BF16 linear (``params_dtype``), as diptych runs it. Megatron-Core's router and dispatcher
#: run as its PyTorch code (``moe_dispatcher="megatron"``: their small kernels, the two
#: ``masked_select`` host synchronisations a layer, the unfused unpermute;
#: workloads/moe.py ``MEGATRON_DISPATCH``, measured at this row's shard); the aux loss's
#: all-reduce of E counts over TP × CP is not modelled (an 8-rank NVLink call of 32 bytes,
#: ~10-20 us a layer by nccl-tests' small sizes [assumption]).
ROUTING = {"grok": dict(moe_capacity_factor=1.0, moe_pad=True, moe_dispatcher="megatron")}
#: Kernel order: every run is a PyTorch eager step of Megatron-Core with Transformer Engine,
#: which issues each rank's compute kernels on the current CUDA stream, where they execute
#: in issue order (CUDA C++ Programming Guide, "Streams"); only NCCL (its own streams), TE's
#: userbuffers and CP P2P streams run beside them: ``kernel_order="issue"``. The Llama 3.1
#: and GPT-3 runs also set ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (143b90d llama3.1/configure.sh,
#: ``PRE_CMD``; 35a9aec nemo_megatron/launch.sh, on the python command), one hardware queue
#: for every stream: ``"one_queue"``. Grok-1's configure.sh (143b90d) does not set it (CUDA's
#: default, 8 connections): ``"issue"``.
#: Dropout (workloads/dropout.py): 35a9aec nemo_megatron/gpt3_175b_hydra.yaml sets
#: ``hidden_dropout: 0.1`` and ``attention_dropout: 0.1`` (L66-67, the same at 143b90d and
#: 8f5cbb3; ``bias_dropout_add_fusion: true``, L79; ``bias`` is not set, so NeMo's default);
#: llama3.1_8b.yaml, llama3.1_70b.yaml (35a9aec) and grok1_314b.yaml (143b90d) set
#: ``hidden_dropout: 0.0``, ``attention_dropout: 0.0``, ``ffn_dropout: 0.0`` (Grok ``0``) and
#: ``bias: false``: no dropout (the defaults, 0).
STACKS = {"llama": dict(nvls=False, cross_entropy="fused", elementwise_kernels="megatron",
                        kernel_order="one_queue"),
          "gpt3": dict(nvls=False, attention_kernel="fa2", cross_entropy="unfused",
                       elementwise_kernels="megatron", kernel_order="one_queue",
                       hidden_dropout=0.1, attention_dropout=0.1, tp_overlap_config=GPT3_UB),
          "grok": dict(nvls=False, attention_kernel="fa2", tp_comm_overlap=True,
                       cross_entropy="unfused", elementwise_kernels="megatron",
                       kernel_order="issue")}


def _rows() -> list[Row]:
    l70 = dict(degrees=dict(tp=4, pp=4, cp=2),
               plan=dict(zero=1, schedule="interleaved", virtual_stages=5),
               stack=STACKS["llama"])
    l8 = dict(degrees=dict(tp=1, cp=2), plan=dict(zero=1), stack=STACKS["llama"])
    g175 = dict(degrees=dict(tp=4, pp=8),
                plan=dict(zero=1, schedule="interleaved", virtual_stages=12),
                stack=STACKS["gpt3"])
    # the 64-layer rows (512+ GPUs; smaller ones are proxies with fewer layers); the table's
    # "DP" is the data parallelism beside EP: dense dp = GPUs / (tp·pp·cp) = 8 × it; the
    # optimizer is Megatron-Core's distributed optimizer (143b90d grok1_314b.yaml ``optim.name:
    # mcore_distributed_optim``, ``overlap_grad_sync``/``overlap_param_sync: true``): ZeRO-1
    grok = dict(degrees=dict(tp=4, pp=8, cp=2, ep=8),
                plan=dict(zero=1, schedule="interleaved", virtual_stages=8), stack=STACKS["grok"],
                routing=ROUTING["grok"])
    return [
        Row("Llama-3.1-70B, 64 GPUs, TP4 PP4 CP2 VP5, BF16", "llama-3-70b", 14.72, 64, 128,
            8192, **l70),
        Row("Llama-3.1-70B, 64 GPUs, TP4 PP4 CP2 VP5, FP8", "llama-3-70b", 11.01, 64, 128,
            8192, fp8=True, **l70),
        Row("Llama-3.1-8B, 8 GPUs, CP2, BF16", "llama-3-8b", 12.91, 8, 128, 8192, **l8),
        Row("Llama-3.1-8B, 8 GPUs, CP2, FP8", "llama-3-8b", 9.67, 8, 128, 8192, fp8=True, **l8),
        Row("GPT-3 175B, 128 GPUs, TP4 PP8 VP12, BF16", "gpt3-175b", 8.91, 128, 256, 2048,
            **g175),
        Row("GPT-3 175B, 128 GPUs, TP4 PP8 VP12, FP8", "gpt3-175b", 5.92, 128, 256, 2048,
            fp8=True, **g175),
        Row("Grok-1 314B MoE, 512 GPUs, TP4 PP8 CP2 EP8 VP8, BF16", GROK1, 20.83, 512, 1024,
            8192, **grok),
        Row("Grok-1 314B MoE, 512 GPUs, TP4 PP8 CP2 EP8 VP8, FP8", GROK1, 16.69, 512, 1024,
            8192, fp8=True, **grok),
        Row("Grok-1 314B MoE, 2048 GPUs, TP4 PP8 CP2 EP8 VP8, BF16", GROK1, 21.09, 2048, 4096,
            8192, **grok),
        Row("Grok-1 314B MoE, 2048 GPUs, TP4 PP8 CP2 EP8 VP8, FP8", GROK1, 17.04, 2048, 4096,
            8192, fp8=True, **grok),
    ]


def run_row(r: Row, waterfall: bool = False, published: bool = True):
    """The cluster step of row ``r`` (micro-batch 1, no recomputation, as published), with
    its efficiency waterfall when asked; ``published``: with the run's software settings
    (:data:`STACKS`), else the chip's defaults (NVLS, its own attention kernel, TE's
    userbuffers)."""
    s = scenario(r, published)
    return run_cluster_step("h100", r.model, s, cluster="dgx-h100",
                            plan=build_plan(s, **r.plan), waterfall=waterfall)


def scenario(r: Row, published: bool = True) -> Scenario:
    """Row ``r``'s scenario (micro-batch 1, its recipe, degrees and routing; ``published``:
    with the run's software settings, :data:`STACKS`)."""
    return Scenario.of(phase="train", batch=r.batch, seq=r.seq, chips=r.chips, micro_batch=1,
                       recipe="fp8-delayed" if r.fp8 else None, **r.degrees, **r.routing,
                       **(r.stack if published else {}))


#: The waterfall table's columns: the mechanisms, in their order.
MECHANISMS = ("recomputation", "gemm", "pipeline_bubble", "non_gemm", "recipe", "launches",
              "communication", "power")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    ap.add_argument("--only", nargs="*", default=(), help="rows whose name holds TEXT")
    ap.add_argument("--waterfall", action="store_true",
                    help="also print each row's efficiency waterfall (4-5x the time)")
    ap.add_argument("--stack-defaults", action="store_true",
                    help="run the chip's default stack (NVLS on, its own attention kernel, "
                         "TE userbuffers) instead of each published run's settings")
    args = ap.parse_args(argv)
    lines = ["| case | published step | diptych step | ratio (diptych ÷ published) | MFU | "
             "plan |", "|---|---|---|---|---|---|"]
    t0 = time.time()
    falls = ["| case | " + " | ".join(MECHANISMS) + " | MFU |",
             "|---|" + "---|" * (len(MECHANISMS) + 1)]
    for r in _rows():
        if args.only and not any(o in r.name for o in args.only):
            continue
        res = run_row(r, args.waterfall, not args.stack_defaults)
        if res.waterfall:
            share = {x["mechanism"]: x["share"] for x in res.waterfall["steps"]}
            falls.append(f"| {r.name} | " + " | ".join(f"{share.get(k, 0.0):.3f}"
                                                       for k in MECHANISMS)
                         + f" | {res.mfu:.3f} |")
        line = (f"| {r.name} | {r.published_s:.2f} s | {res.seconds:.2f} s | "
                f"{res.seconds / r.published_s:.2f} | {res.mfu:.3f} | "
                f"{res.plan.describe(True)} |")
        lines.append(line)
        print(line, flush=True)
    if args.waterfall:
        print("\nShares of the peak each mechanism takes (docs/workloads.md, \"Efficiency "
              "waterfall\"):\n" + "\n".join(falls))
        lines += ["", *falls]
    print(f"\nsource: {SRC}\n({time.time() - t0:.0f} s)")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
