"""The training stack's own elementwise kernels and norms on the h100 preset against published
kernel-level measurements on an H100 SXM (issue 21 item 2: component level); prints a
Markdown table.

    python benchmarks/validate_elementwise.py [--out FILE]

Every published figure is a median of ``triton.testing.do_bench`` (L2 flushed between runs)
in Liger-Kernel's benchmark data, ``benchmark/data/all_benchmark_data.csv`` at
linkedin/Liger-Kernel@ead96b61 (rows of 2026-06-10 and 2026-07-26, "NVIDIA H100 80GB
HBM3", BF16), from its scripts ``benchmark/scripts/benchmark_megatron_swiglu.py`` and
``benchmark_megatron_rms_norm.py``:

* ``megatron_swiglu``, provider ``megatron``: Megatron-Core's ``bias_swiglu_impl(y, None)``,
  the very function the published Llama runs call after ``linear_fc1``
  (``bias_activation_fusion``): ``swiglu`` forward and ``swiglu_back`` backward under
  ``jit_fuser`` (``torch.compile``), the same source in core_r0.9.0 and at the benchmark's
  Megatron-Core (megatron/core/fusions/fused_bias_swiglu.py, megatron/core/jit.py). Input
  ``[2048, 4, 2·ffn_local]``: 8,192 tokens. Provider ``liger``: Liger's Triton kernel of the
  same sum, a check that the shape can be streamed at the copy rate.
  The "backward" row times the forward, ``out.sum()`` and the backward together (the
  script's own convention: "subtract the forward measurement"); the backward alone is that
  less the forward row less the sum's pass, taken at the vector unit's copy rate over the
  output [assumption: PyTorch's sum reduction streams at the copy rate; it is 1/5 of the
  backward's bytes]. That is a confounded reading, printed beside diptych, not a calibration
  point: the row feeds ``swiglu_back`` the stride-0 broadcast gradient of the sum (training
  passes a dense tensor), times three kernels in one row, and would make the compiled kernel
  3x slower than eager PyTorch's byte count of the same backward. The preset runs the
  backward at the forward's measured fraction [assumption] (arch/chips/h100.toml).
* ``megatron_rms_norm``, providers ``torch`` (``torch.nn.RMSNorm``; Megatron's
  ``WrappedTorchNorm`` returns it, its rows are the same) and ``liger`` (Triton): input
  ``[4096, 1, hidden]``. Not Transformer Engine's kernel (the published runs' norm, whose
  H100 bandwidth nobody publishes that we found): a check of the RMSNorm's bytes and rate
  only. Forward rows only (their backward rows also time the forward and the sum).

* ``megatron_cross_entropy`` (2026-06-15, ``benchmark/scripts/
  benchmark_megatron_cross_entropy.py``, TP 1, BF16 logits ``[2048, 4, V]``: 8,192 rows,
  V = 4,096-131,072), providers ``megatron-fused`` (Megatron-Core's
  ``fused_vocab_parallel_cross_entropy``: ``cross_entropy_loss_fusion: true``, the Llama
  runs' loss) and ``megatron-unfused`` (``vocab_parallel_cross_entropy``, eager PyTorch: the
  GPT-3 and Grok-1 runs' loss), each a fixed loop of 50 calls timed with CUDA events, median
  of five. Its "backward" row re-runs the forward before every backward (the script's own
  convention: "subtract the forward row"); the ``sum()`` before it is over the per-token loss
  (8,192 values), nothing beside the logits' passes. So the backward alone is the row less
  the forward row: no confound. Both paths' passes are diptych's loss ops
  (workloads/loss.py: 22 + 10 B per logit fused, 38 + 14 unfused, at the copy rate with
  ``elementwise_kernels`` ``default``), calibrated [C] on V ≥ 16,384 (≥ 2.9 GB a forward):
  the preset's ``cross_entropy*`` fractions.

Bytes per element (BF16, 2 B): SwiGLU forward reads gate and up, writes the product (3 per
output element); its backward reads the output gradient and the saved ``gate_up`` and writes
``d gate_up`` (5), as Megatron's ``swiglu_back`` and diptych's ``swiglu.bwd`` do. RMSNorm
forward reads x (and the weight), writes y (2). diptych's time: the op alone on the h100
preset (``simulate``), at the nominal clock, under the stack setting ``elementwise_kernels``
given (``default``: the vector unit's copy rate; ``megatron``: the preset's
``[elementwise_kernels_megatron]`` rates, the forward calibrated [C] on the rows marked
``*``, the backward at the forward's fraction [assumption]; its rows, marked ``†``, are
readings).
docs/validation-published.md, "Elementwise kernels", says what they show.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diptych.arch.loader import load_chip
from diptych.sim.api import simulate
from diptych.sim.run.stack import stack_chip
from diptych.workloads.lower import VECTOR_OPS_PER_ELEMENT
from diptych.workloads import loss
from diptych.workloads.ops import VectorOp

SRC = "linkedin/Liger-Kernel@ead96b61 benchmark/data/all_benchmark_data.csv (H100 80GB HBM3, BF16)"
A = 2   # BF16 bytes
SWIGLU_TOKENS = 2048 * 4
#: ms (median) per ffn_local: megatron forward, megatron fwd+sum+bwd, liger forward
SWIGLU = {1024: (0.0232, 0.1469, 0.0233), 2048: (0.0604, 0.3385, 0.0396),
          4096: (0.1137, 0.6569, 0.0725), 8192: (0.2202, 1.2887, 0.1371),
          16384: (0.4329, 2.5543, 0.2670), 32768: (0.8585, 5.0830, 0.5275)}
#: the points the preset's [C] rates are calibrated on (≥ 200 MB a pass: launch-free)
CALIBRATION = (4096, 8192, 16384, 32768)
RMS_TOKENS = 4096
CE_ROWS = 2048 * 4
#: ms (median) per vocabulary V: forward, forward + backward (the "backward" row), per path
CE = {"fused": {4096: (0.3122, 0.5311), 8192: (0.6359, 1.0505), 16384: (1.3467, 2.1581),
                32768: (2.8313, 4.4489), 65536: (5.7631, 8.9818), 131072: (11.8098, 18.2319)},
      "unfused": {4096: (0.5585, 0.7693), 8192: (1.0782, 1.4540), 16384: (2.0663, 2.7811),
                  32768: (4.0231, 5.4121), 65536: (7.9344, 10.6697),
                  131072: (15.8124, 21.2467)}}
#: the vocabularies the preset's [C] cross-entropy rates are calibrated on
CE_CALIBRATION = (16384, 32768, 65536, 131072)
#: ms (median) per hidden: torch.nn.RMSNorm forward, Liger forward
RMSNORM = {1024: (0.0128, 0.0122), 2048: (0.0190, 0.0176), 4096: (0.0325, 0.0292),
           8192: (0.0745, 0.0509), 16384: (0.1492, 0.0950)}


def swiglu_ops(tokens: int, width: int, kind: str = "swiglu"
               ) -> tuple[VectorOp, VectorOp, VectorOp]:
    """SwiGLU's (or another gated activation ``kind``'s: ``geglu``) forward, its backward and
    the benchmark's ``out.sum()`` pass, as diptych lowers them (workloads/lower.py
    ``_dense_mlp``, workloads/train.py ``backward_ops``)."""
    n = tokens * width
    ops = VECTOR_OPS_PER_ELEMENT[kind]
    fwd = VectorOp(name=kind, kind=kind, elements=n, ops_per_element=ops,
                   read_bytes=2 * n * A, write_bytes=n * A, dtype="bf16")
    bwd = VectorOp(name=f"{kind}.bwd", kind=kind, elements=n, ops_per_element=2 * ops,
                   read_bytes=3 * n * A, write_bytes=2 * n * A, dtype="bf16", tags=("bwd",))
    total = VectorOp(name="sum", kind="add", elements=n, ops_per_element=1.0,
                     read_bytes=n * A, write_bytes=A, dtype="bf16")
    return fwd, bwd, total


def rmsnorm_op(tokens: int, hidden: int) -> VectorOp:
    n = tokens * hidden
    return VectorOp(name="rmsnorm", kind="rmsnorm", elements=n,
                    ops_per_element=VECTOR_OPS_PER_ELEMENT["rmsnorm"],
                    read_bytes=n * A + hidden * A, write_bytes=n * A, dtype="bf16")


def ms(op: VectorOp, chip) -> float:
    return simulate(op, chip).seconds * 1e3


def swiglu_rows(chip, tuned) -> list[str]:
    rows = []
    for f, (m_fwd, m_all, l_fwd) in SWIGLU.items():
        fwd, bwd, total = swiglu_ops(SWIGLU_TOKENS, f)
        m_bwd = m_all - m_fwd - ms(total, chip)
        tb = lambda op, t: (op.read_bytes + op.write_bytes) / t / 1e9   # noqa: E731  TB/s
        mark = "*" if f in CALIBRATION else ""
        rows.append(
            f"| SwiGLU fwd, ffn {f}{mark} | {(fwd.read_bytes + fwd.write_bytes) / 1e6:.0f} | "
            f"{m_fwd:.4f} ({tb(fwd, m_fwd):.2f}) | {l_fwd:.4f} ({tb(fwd, l_fwd):.2f}) | "
            f"{ms(fwd, chip):.4f} | {ms(fwd, tuned):.4f} | {ms(fwd, tuned) / m_fwd:.2f} |")
        rows.append(
            f"| SwiGLU bwd, ffn {f}† | {(bwd.read_bytes + bwd.write_bytes) / 1e6:.0f} | "
            f"{m_bwd:.4f} ({tb(bwd, m_bwd):.2f}) | | {ms(bwd, chip):.4f} | "
            f"{ms(bwd, tuned):.4f} | {ms(bwd, tuned) / m_bwd:.2f} |")
    return rows


def rmsnorm_rows(chip) -> list[str]:
    rows = []
    for h, (t_fwd, l_fwd) in RMSNORM.items():
        op = rmsnorm_op(RMS_TOKENS, h)
        b = op.read_bytes + op.write_bytes
        d = ms(op, chip)
        rows.append(f"| RMSNorm fwd, hidden {h} | {b / 1e6:.0f} | {t_fwd:.4f} "
                    f"({b / t_fwd / 1e9:.2f}) | {l_fwd:.4f} ({b / l_fwd / 1e9:.2f}) | "
                    f"{d:.4f} | {d:.4f} | {d / t_fwd:.2f} |")
    return rows


def ce_ops(impl: str, vocab: int, rows: int = CE_ROWS):
    """The loss's forward passes and backward kernels of ``impl`` over ``rows × vocab`` BF16
    logits, as diptych lowers them (workloads/loss.py)."""
    fw = loss.forward_ops(rows, vocab, A, impl)
    return fw, loss.backward_ops(fw[-1])


def ce_ms(impl: str, vocab: int, chip) -> tuple[float, float]:
    """diptych's forward and backward ms of the loss (each pass alone, summed)."""
    fw, bw = ce_ops(impl, vocab)
    return sum(ms(o, chip) for o in fw), sum(ms(o, chip) for o in bw)


def ce_rows(chip, tuned) -> list[str]:
    rows = []
    for impl, table in CE.items():
        for v, (m_fwd, m_all) in table.items():
            fw, bw = ce_ops(impl, v)
            mark = "*" if v in CE_CALIBRATION else ""
            d, t = ce_ms(impl, v, chip), ce_ms(impl, v, tuned)
            for part, ops, m, i in (("fwd", fw, m_fwd, 0), ("bwd", bw, m_all - m_fwd, 1)):
                d_part, t_part = d[i], t[i]
                b = sum(o.read_bytes + o.write_bytes for o in ops)
                rows.append(f"| CE {impl} {part}, V {v}{mark} | {b / 1e6:.0f} | {m:.4f} "
                            f"({b / m / 1e9:.2f}) | | {d_part:.4f} | {t_part:.4f} | "
                            f"{t_part / m:.2f} |")
    return rows


def ce_fractions(chip, impl: str) -> tuple[float, float]:
    """The copy-rate time over the published time of ``impl``'s forward and backward, mean
    over :data:`CE_CALIBRATION`: what the preset's ``cross_entropy*`` are set from."""
    fw, bw = [], []
    for v in CE_CALIBRATION:
        m_fwd, m_all = CE[impl][v]
        d_fwd, d_bwd = ce_ms(impl, v, chip)
        fw.append(d_fwd / m_fwd)
        bw.append(d_bwd / (m_all - m_fwd))
    return sum(fw) / len(fw), sum(bw) / len(bw)


def calibrated_fractions(chip) -> tuple[float, float]:
    """The copy-rate time over the published time, mean over :data:`CALIBRATION`, of
    Megatron's SwiGLU: the forward (what the preset's ``swiglu`` is set from) and the
    benchmark's confounded backward reading (module docstring; not what ``swiglu_bwd`` is set
    from: that is the forward's fraction [assumption])."""
    fw, bw = [], []
    for f in CALIBRATION:
        m_fwd, m_all, _ = SWIGLU[f]
        fwd, bwd, total = swiglu_ops(SWIGLU_TOKENS, f)
        fw.append(ms(fwd, chip) / m_fwd)
        bw.append(ms(bwd, chip) / (m_all - m_fwd - ms(total, chip)))
    return sum(fw) / len(fw), sum(bw) / len(bw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the Markdown table here too")
    args = ap.parse_args(argv)
    chip = load_chip("h100")
    tuned = stack_chip(chip, elementwise_kernels="megatron")
    head = ["| kernel (8,192 tokens or rows; RMSNorm 4,096) | MB moved | Megatron / torch ms "
            "(TB/s) | Liger ms (TB/s) | diptych default ms | diptych megatron ms | megatron / "
            "published |", "|---|---:|---:|---:|---:|---:|---:|"]
    fw, bw = calibrated_fractions(chip)
    rates = tuned.elementwise_kernels
    ce = {impl: ce_fractions(chip, impl) for impl in CE}
    lines = [f"Source: {SRC}.", ""] + head + swiglu_rows(chip, tuned) + rmsnorm_rows(chip) + \
        ce_rows(chip, tuned) + [
        "", "† the benchmark's backward row less its forward row and the sum's pass: a "
        "confounded reading (swiglu_back fed the stride-0 gradient of out.sum()), printed "
        "beside diptych, not a calibration point.",
        f"Copy-rate time / published time over the rows marked *: forward {fw:.3f}, "
        f"calibrated (the preset's swiglu = {rates.swiglu:g}); the backward reading "
        f"{bw:.3f}, not a calibration (the preset's swiglu_bwd = {rates.swiglu_bwd:g}, the "
        f"forward's fraction [assumption]).",
        "GeGLU (Megatron-Core's bias_geglu_impl, Grok-1's and Gemma's activation): no "
        "published H100 measurement of that kernel; the preset's geglu = "
        f"{rates.geglu:g}, geglu_bwd = {rates.geglu_bwd:g}, its compiled twin's (SwiGLU) "
        "rates [assumption: same bytes, same torch.compile pattern; arch/chips/h100.toml].",
        "Cross-entropy (Megatron-Core's, rows marked * calibrate): copy-rate time / published "
        f"time, fused forward {ce['fused'][0]:.3f}, backward {ce['fused'][1]:.3f} (the "
        f"preset's cross_entropy = {rates.cross_entropy:g}, cross_entropy_bwd = "
        f"{rates.cross_entropy_bwd:g}); unfused forward {ce['unfused'][0]:.3f}, backward "
        f"{ce['unfused'][1]:.3f} (cross_entropy_unfused = {rates.cross_entropy_unfused:g}, "
        f"cross_entropy_unfused_bwd = {rates.cross_entropy_unfused_bwd:g})."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
