"""Fused attention kernels on the h100 preset against the FlashAttention-3 paper's kernel
benchmarks (issue 21 item 2: component-level); prints a Markdown table.

    python benchmarks/validate_attention.py [--out FILE] [--chip h100] [--kernel fa2] [--causal]

The published setup (Shah et al., "FlashAttention-3", arXiv 2407.08608, Figs. 5-6, H100 80GB
SXM5, BF16; the same sizes in pytorch/benchmark PR #2391): batch × sequence = 16k tokens,
hidden 2048 = 16 heads of 128, sequence 512 to 16k. FLOPs as FlashAttention's benchmark counts
them: forward 4·b·s²·h·d, halved under a causal mask; backward 2.5 × forward (the recomputed
QKᵀ included). diptych's figure: one kernel call of the benchmark's batch (:func:`kernel_tflops`),
its time at the nominal clock, those FLOPs over it (a training run at micro-batch 1 calls the
kernel once per sequence, a smaller grid: :func:`diptych_tflops`).
The published forward rows are causal (what an LLM trains with); the backward figure is the
paper's only backward panel for head dim 128, which does not say causal (non-causal, as the
paper's forward panels without "causal" in the title): diptych's backward column is that shape
without the mask as one kernel call (:func:`kernel_tflops`), its causal backward beside it.
On the h100 preset the kernel is tiled by its
``[attention]`` table (docs/workloads.md, "Fused attention"), whose fixed costs and softmax
overlap were calibrated on the cuDNN rows (the backend Transformer Engine runs in the NeMo
containers of the system checks); the FlashAttention-3 rows are a check.
docs/validation-published.md, "Attention kernels", says what they show.

``--causal`` prints the causal-against-non-causal check instead (issue 21 item 2, the causal
backward): diptych's kernels on the shapes of NVIDIA cudnn-frontend's published SDPA
benchmarks, which measured each shape with and without the causal mask (:data:`FE_2024`,
:data:`FE_2026`), and on the FlashAttention-3 paper's non-causal panels
(:data:`FWD_FULL`; its backward panel, :data:`BWD`, as non-causal). The published ratio
causal ÷ non-causal does not depend on the clock; the absolute rates are compared at the
source's clock.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dataclasses

from diptych.arch import load_chip
from diptych.sim import simulate
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.attention import fused_stats
from diptych.workloads.config import model_from_hf
from diptych.workloads.fused_attention import FusedAttention, fused_backward
from diptych.workloads.ops import Gemm
from diptych.workloads.precision import Precision
from diptych.workloads.train import backward_ops, train_forward

SRC = "Shah et al., FlashAttention-3, arXiv 2407.08608, Figs. 5-6 (H100 80GB SXM5, BF16, hdim 128)"
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
#: TFLOPS per sequence length: forward causal (FA3, cuDNN, FA2), backward (FA3, cuDNN, FA2)
FWD_CAUSAL = {"FlashAttention-3": (292, 423, 521, 579, 602, 616),
              "cuDNN": (315, 410, 484, 518, 529, 539),
              "FlashAttention-2": (191, 260, 298, 319, 333, 335)}
BWD = {"FlashAttention-3": (316, 424, 501, 542, 559, 561),
       "cuDNN": (305, 408, 465, 499, 518, 516),
       "FlashAttention-2": (214, 260, 291, 310, 318, 322)}
#: the same paper's non-causal forward panel (Fig. 5, "head dim 128", no "causal" in the title)
FWD_FULL = {"FlashAttention-3": (467, 565, 625, 638, 646, 648),
            "cuDNN": (497, 574, 617, 609, 600, 595),
            "FlashAttention-2": (309, 350, 362, 368, 370, 370)}
TOKENS = 16384
HEADS, HEAD_DIM = 16, 128

#: [S] NVIDIA/cudnn-frontend b740542 (2024-05-07) benchmark/benchmark_results.csv (moved to
#: benchmark/sdpa_benchmark/ in 7606332, removed in b8c0656): cuDNN 9.1.0 (the script prints
#: "cudnn backend version : 90100"), PyTorch 24.03 container, on an H200 with the clocks
#: locked (README: ``nvidia-smi -ac 3201,1980``, ``-pl 700``: 1,980 MHz), BF16, 16 heads of
#: 128 (MHA), FLOPs counted as FlashAttention's benchmark does (module docstring). Per
#: (batch, sequence): TFLOPS (forward, backward) of cuDNN and of PyTorch's SDPA (its
#: FlashAttention-2 backend: the script prints "Is flash sdp enabled", [assumption] that
#: flash, not the memory-efficient kernel, was picked), non-causal then causal.
FE_2024_SRC = ("NVIDIA/cudnn-frontend b740542 benchmark/benchmark_results.csv: cuDNN 9.1.0 and "
               "PyTorch SDPA (FA2), H200 locked at 1,980 MHz, BF16, 16 heads x 128")
FE_2024_CLOCK_GHZ = 1.98
FE_2024 = {  # (batch, seq): {kernel: (full fwd, full bwd, causal fwd, causal bwd)}
    (4, 4096): {"cuDNN": (704.41, 535.06, 613.49, 438.45),
                "FA2": (362.03, 290.47, 296.52, 245.18)},
    (2, 8192): {"cuDNN": (696.52, 536.95, 645.95, 461.89),
                "FA2": (364.03, 305.47, 321.94, 275.40)},
    (1, 16384): {"cuDNN": (687.97, 546.53, 649.99, 488.56),
                 "FA2": (360.50, 317.34, 327.17, 305.19)},
}
#: [S] NVIDIA/cudnn-frontend df73764 (2026-03-09) benchmark/sdpa_benchmark_training/results/
#: h200_919_only_cudnn/llama3.1_20260227_034703.csv: cuDNN 9.19.1 (backend 91901), NVIDIA
#: H200, BF16, batch 1, 64 query heads and 8 KV heads (GQA, Llama-3.1-405B's), head dim 128,
#: non-deterministic backward, masks ``no_mask`` and ``top_left`` (causal; FLOPs over the
#: lower triangle, S(S+1)/2). The clock is not stated: compared at 1.98 GHz [assumption: as
#: the 2024 run locked it].
FE_2026_SRC = ("NVIDIA/cudnn-frontend df73764 sdpa_benchmark_training/results/"
               "h200_919_only_cudnn/llama3.1_20260227_034703.csv: cuDNN 9.19.1, H200, BF16, "
               "batch 1, 64 query heads / 8 KV heads x 128")
FE_2026 = {  # (batch, seq): {kernel: (full fwd, full bwd, causal fwd, causal bwd)}
    (1, 2048): {"cuDNN": (633, 504, 484, 370)},
    (1, 4096): {"cuDNN": (671, 560, 591, 474)},
    (1, 8192): {"cuDNN": (691, 594, 644, 541)},
    (1, 16384): {"cuDNN": (702, 612, 673, 579)},
}


def attention_model(seq: int, heads: int = HEADS, kv_heads: int | None = None):
    """A one-layer Llama of ``heads`` query heads of 128 and ``kv_heads`` KV heads."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": heads * HEAD_DIM, "intermediate_size": 4 * heads * HEAD_DIM,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads or heads,
           "num_hidden_layers": 1, "vocab_size": 32000,
           "max_position_embeddings": max(seq, 4096), "hidden_act": "silu"}
    return model_from_hf(cfg, name=f"attn-bench-{heads}-{kv_heads or heads}-{seq}")


def bench_model(seq: int):
    """A one-layer Llama of the benchmark's attention shape (16 × 128, MHA)."""
    return attention_model(seq)


def unmasked(op: FusedAttention, seq: int) -> FusedAttention:
    """``op`` (a causal fused record of ``seq`` queries) without its mask: every key seen.
    The parts' GEMM dimensions that are the causal mean span become ``seq`` and the softmax
    grows by the same factor; the calls become ``full``; the DRAM traffic (Q, K, V, O, the
    statistics) does not change."""
    keys = op.gemms[0].n
    parts = []
    for p in op.parts:
        if isinstance(p, Gemm):
            p = dataclasses.replace(p, **{d: seq for d in ("m", "k", "n")
                                          if getattr(p, d) == keys})
        else:
            p = dataclasses.replace(p, elements=round(p.elements * seq / keys),
                                    read_bytes=p.read_bytes * seq / keys,
                                    write_bytes=p.write_bytes * seq / keys)
        parts.append(p)
    calls = tuple(dataclasses.replace(c, mask="full", window=0) for c in op.calls)
    return dataclasses.replace(op, parts=tuple(parts), calls=calls)


def kernel_calls(batch: int, seq: int, causal: bool = True, *, heads: int = HEADS,
                 kv_heads: int | None = None) -> tuple[FusedAttention, FusedAttention]:
    """(forward, backward) fused attention records of one kernel call of ``batch`` sequences
    of ``seq`` tokens, ``heads`` query heads (``kv_heads`` KV heads) of 128, causal or not."""
    w = train_forward(attention_model(seq, heads, kv_heads), batch, seq)
    fwd = next(o for b in w.blocks for o in b.ops if isinstance(o, FusedAttention))
    if not causal:
        fwd = unmasked(fwd, seq)
    p = Precision()
    return fwd, fused_backward(fwd, lambda o: backward_ops(o, p))


def fwd_flops(batch: int, seq: int, causal: bool, heads: int = HEADS) -> float:
    """A call's forward FLOPs as FlashAttention's benchmark counts them, ``4·b·s²·h·d``,
    halved under a causal mask (its backward counts 2.5 times as many)."""
    return 4 * batch * seq * seq * heads * HEAD_DIM / (2 if causal else 1)


def kernel_tflops(batch: int, seq: int, causal: bool, *, heads: int = HEADS,
                  kv_heads: int | None = None, chip: str = "h100", clock_ghz: float | None = None,
                  kernel: str = "default") -> tuple[float, float]:
    """(forward, backward) TFLOPS of one fused attention call of ``batch`` sequences of
    ``seq`` tokens, ``heads`` query heads (``kv_heads`` KV heads) of 128, causal or not, as
    one kernel launch (the published benchmarks' single call; no micro-batching), at
    ``clock_ghz`` (default: the chip's nominal clock); ``kernel`` ``"fa2"``: the chip's
    ``[attention_fa2]``. FLOPs as FlashAttention's benchmark counts them."""
    c = load_chip(chip)
    if kernel == "fa2":
        c = dataclasses.replace(c, attention=c.attention_fa2)
    if clock_ghz is not None:
        c = dataclasses.replace(c, clock_ghz=clock_ghz)
    fwd, bwd = kernel_calls(batch, seq, causal, heads=heads, kv_heads=kv_heads)
    flops = fwd_flops(batch, seq, causal, heads)
    return (flops / fused_stats(fwd, c, simulate).seconds / 1e12,
            2.5 * flops / fused_stats(bwd, c, simulate).seconds / 1e12)


def diptych_tflops(seq: int, chip: str = "h100", kernel: str = "default"
                   ) -> tuple[float, float]:
    """(forward, backward) TFLOPS of the fused attention of the benchmark's shape at ``seq``,
    counted as FlashAttention's benchmark counts them (module docstring), causal;
    ``kernel``: the run's attention kernel (``"fa2"``: the chip's ``[attention_fa2]``)."""
    batch = TOKENS // seq
    res = run_workload(chip, bench_model(seq),
                       Scenario.of(phase="train", batch=batch, seq=seq, power_limit=False,
                                   attention_kernel=kernel))
    fwd = sum(r["seconds"] * r.get("repeat", 1) for r in res.layers
              if r["op"] == "attention (fused)")
    bwd = sum(r["seconds"] * r.get("repeat", 1) for r in res.layers
              if r["op"] == "attention (fused).bwd")
    flops_fwd = fwd_flops(batch, seq, True)
    return flops_fwd / fwd / 1e12, 2.5 * flops_fwd / bwd / 1e12


def table(chip: str = "h100", kernel: str = "default") -> str:
    """The Markdown table: per sequence length, diptych's and the published TFLOPS (the
    forward causal and the backward without a mask, each one kernel call of the batch, as the
    paper's panels, and diptych's causal backward beside it; a training run's records, one
    sequence per call at micro-batch 1, are :func:`diptych_tflops`); with ``kernel="fa2"``
    diptych runs the chip's FlashAttention-2 table and the ratios are to the FA2 column (its
    calibration), not cuDNN's and FA3's."""
    if kernel == "fa2":
        return _fa2_table(chip)
    head = ("| seq | fwd causal: diptych | FA3 | cuDNN | FA2 | diptych ÷ cuDNN | diptych ÷ FA3 | "
            "bwd, no mask: diptych | FA3 | cuDNN | FA2 | diptych ÷ cuDNN | diptych ÷ FA3 | "
            "bwd causal: diptych |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = []
    for i, s in enumerate(SEQS):
        f, bc = kernel_tflops(TOKENS // s, s, True, chip=chip, kernel=kernel)
        _, b = kernel_tflops(TOKENS // s, s, False, chip=chip, kernel=kernel)
        ff = [FWD_CAUSAL[k][i] for k in FWD_CAUSAL]
        bb = [BWD[k][i] for k in BWD]
        body.append(f"| {s} | {f:.0f} | {ff[0]} | {ff[1]} | {ff[2]} | {f / ff[1]:.2f} | "
                    f"{f / ff[0]:.2f} | {b:.0f} | {bb[0]} | {bb[1]} | {bb[2]} | {b / bb[1]:.2f} | "
                    f"{b / bb[0]:.2f} | {bc:.0f} |\n")
    return head + "".join(body) + f"\nsource: {SRC}\n"


def _fa2_table(chip: str) -> str:
    """diptych's FlashAttention-2 kernel (``[attention_fa2]``) against the paper's FA2 rows
    (the backward without a mask, as the paper's panel; diptych's causal one beside it)."""
    head = ("| seq | fwd causal: diptych (fa2) | FA2 | ratio | bwd, no mask: diptych (fa2) | FA2 "
            "| ratio | bwd causal: diptych (fa2) |\n|---|---|---|---|---|---|---|---|\n")
    body = []
    for i, s in enumerate(SEQS):
        f, bc = kernel_tflops(TOKENS // s, s, True, chip=chip, kernel="fa2")
        _, b = kernel_tflops(TOKENS // s, s, False, chip=chip, kernel="fa2")
        ff, bb = FWD_CAUSAL["FlashAttention-2"][i], BWD["FlashAttention-2"][i]
        body.append(f"| {s} | {f:.0f} | {ff} | {f / ff:.2f} | {b:.0f} | {bb} | {b / bb:.2f} | "
                    f"{bc:.0f} |\n")
    return head + "".join(body) + f"\nsource: {SRC}\n"


def _ratio_row(label: str, pub: tuple, dip: tuple) -> str:
    """A row: published and diptych TFLOPS (full fwd, full bwd, causal fwd, causal bwd),
    diptych ÷ published for each, and causal ÷ non-causal backward (and forward) of both."""
    r = [d / p for d, p in zip(dip, pub)]
    return (f"| {label} | " + " | ".join(f"{p:.0f} / {d:.0f} ({x:.2f})"
                                          for p, d, x in zip(pub, dip, r))
            + f" | {pub[2] / pub[0]:.2f} / {dip[2] / dip[0]:.2f} | "
            f"{pub[3] / pub[1]:.2f} / {dip[3] / dip[1]:.2f} |\n")


def causal_table(chip: str = "h100") -> str:
    """The causal-against-non-causal check (module docstring): per source and shape,
    published / diptych TFLOPS (diptych ÷ published) of the non-causal and causal forward and
    backward, and the causal ÷ non-causal ratio of each (published / diptych)."""
    head = ("| shape | full fwd | full bwd | causal fwd | causal bwd | fwd causal÷full | "
            "bwd causal÷full |\n|---|---|---|---|---|---|---|\n")
    out = [f"**cuDNN**, published / diptych (diptych ÷ published), diptych at "
           f"{FE_2024_CLOCK_GHZ} GHz\n\n", head]
    for (b, s_), k in FE_2024.items():
        dip = (kernel_tflops(b, s_, False, chip=chip, clock_ghz=FE_2024_CLOCK_GHZ)
               + kernel_tflops(b, s_, True, chip=chip, clock_ghz=FE_2024_CLOCK_GHZ))
        out.append(_ratio_row(f"{b} x {s_}, 16 heads (cuDNN 9.1)", k["cuDNN"], dip))
    for (b, s_), k in FE_2026.items():
        dip = (kernel_tflops(b, s_, False, heads=64, kv_heads=8, chip=chip,
                             clock_ghz=FE_2024_CLOCK_GHZ)
               + kernel_tflops(b, s_, True, heads=64, kv_heads=8, chip=chip,
                               clock_ghz=FE_2024_CLOCK_GHZ))
        out.append(_ratio_row(f"{b} x {s_}, 64/8 heads GQA (cuDNN 9.19)", k["cuDNN"], dip))
    out.append(f"\n**FlashAttention-2** (PyTorch SDPA; diptych's `[attention_fa2]`), at "
               f"{FE_2024_CLOCK_GHZ} GHz\n\n{head}")
    for (b, s_), k in FE_2024.items():
        dip = (kernel_tflops(b, s_, False, chip=chip, clock_ghz=FE_2024_CLOCK_GHZ,
                             kernel="fa2")
               + kernel_tflops(b, s_, True, chip=chip, clock_ghz=FE_2024_CLOCK_GHZ,
                               kernel="fa2"))
        out.append(_ratio_row(f"{b} x {s_}, 16 heads", k["FA2"], dip))
    out.append("\n**FlashAttention-3 paper** (16k tokens, 16 heads; non-causal forward panel, "
               "the backward panel as non-causal; causal forward panel; no causal backward "
               "published), diptych at the chip's nominal clock\n\n"
               "| seq | kernel | full fwd | full bwd | causal fwd | fwd causal÷full |\n"
               "|---|---|---|---|---|---|\n")
    for i, s_ in enumerate(SEQS):
        for name, kern in (("cuDNN", "default"), ("FlashAttention-2", "fa2")):
            b = TOKENS // s_
            ff, fb = kernel_tflops(b, s_, False, chip=chip, kernel=kern)
            cf, _ = kernel_tflops(b, s_, True, chip=chip, kernel=kern)
            pub = (FWD_FULL[name][i], BWD[name][i], FWD_CAUSAL[name][i])
            cells = " | ".join(f"{p} / {d:.0f} ({d / p:.2f})"
                               for p, d in zip(pub, (ff, fb, cf)))
            out.append(f"| {s_} | {name} | {cells} | {pub[2] / pub[0]:.2f} / {cf / ff:.2f} |\n")
    return "".join(out) + f"\nsources: {FE_2024_SRC}; {FE_2026_SRC}; {SRC}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown table here")
    ap.add_argument("--chip", default="h100")
    ap.add_argument("--kernel", default="default", choices=("default", "fa2"),
                    help="the chip's attention kernel: its [attention] table (h100: cuDNN) "
                         "or its [attention_fa2] table against the FA2 rows")
    ap.add_argument("--causal", action="store_true",
                    help="the causal-against-non-causal check on cudnn-frontend's measurements")
    args = ap.parse_args(argv)
    text = causal_table(args.chip) if args.causal else table(args.chip, args.kernel)
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
