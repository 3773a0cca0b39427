"""The training stack's own elementwise kernels and norms on the h100 preset against
kernel-level measurements (issue 21 item 2: component level); prints Markdown tables.

    python benchmarks/validate_elementwise.py [--out FILE]

**Calibration: Megatron-Core's fusions measured on a GH100** (``GH100_RESULTS``,
benchmarks/gpu/measure_megatron_kernels.py on an H200 SXM, PyTorch 2.11): SwiGLU, GeGLU, GeLU
with its bias and the bias-dropout-add at p 0.1, forward and backward, each restated from
Megatron-Core core_v0.10.0 and compiled by ``torch.compile`` (Megatron's ``jit_fuser``) for the
one shape a rank of the system rows runs, at those shapes. The preset's
``[elementwise_kernels_megatron]`` rates are each kernel's bytes (diptych's count of the op)
over its measured time, over the GH100's copy rate, the mean over a field's shapes
(:func:`measured_fractions`), carried over to the h100 as a fraction of its own copy rate
[assumption: the same SMs and clock over HBM3; arch/chips/h100.toml]. The table prints the
GH100 time carried over that way beside diptych's.

**Checks: Liger-Kernel's H100 rows** (median of ``triton.testing.do_bench``, L2 flushed
between runs, ``benchmark/data/all_benchmark_data.csv`` at linkedin/Liger-Kernel@ead96b61,
rows of 2026-06-10 and 2026-07-26, "NVIDIA H100 80GB HBM3", BF16; scripts
``benchmark/scripts/benchmark_megatron_swiglu.py``, ``benchmark_megatron_rms_norm.py``,
``benchmark_megatron_cross_entropy.py``):

* ``megatron_swiglu``, provider ``megatron``: Megatron-Core's ``bias_swiglu_impl(y, None)``
  over ``[2048, 4, 2·ffn_local]`` (8,192 tokens). The benchmark runs every ``ffn_local``
  through that one compiled function in one process (its ``utils.run_benchmarks`` loops
  modes, then providers, then the x values innermost), so ``torch.compile`` recompiles the
  second and later shapes with dynamic shapes: those rows time a kernel no training rank runs
  (a rank's shape never changes). Its first, static point (ffn_local 1,024: 50 MB) streams
  2.17 TB/s, every later one 1.67-1.88. The preset had been calibrated on the rows marked
  ``*`` (0.61 of the copy rate) until the GH100 measurement (2026-12-04); they are now
  checks that diptych's static kernel is faster. The "backward" row times the forward,
  ``out.sum()`` and the backward together, feeding ``swiglu_back`` the stride-0 gradient of
  the sum: confounded (†). Provider ``liger``: Liger's Triton kernel of the same sum.
* ``megatron_rms_norm``, providers ``torch`` (``torch.nn.RMSNorm``) and ``liger`` (Triton):
  input ``[4096, 1, hidden]``; not Transformer Engine's kernel (the published runs' norm): a
  check of the RMSNorm's bytes and rate only. Forward rows only.
* ``megatron_cross_entropy`` (2026-06-15, TP 1, BF16 logits ``[2048, 4, V]``: 8,192 rows,
  V = 4,096-131,072), providers ``megatron-fused`` (``fused_vocab_parallel_cross_entropy``:
  the Llama runs' loss) and ``megatron-unfused`` (``vocab_parallel_cross_entropy``, eager:
  the GPT-3 and Grok-1 runs' loss), each 50 calls timed with CUDA events, median of five; the
  backward alone is the "backward" row less the forward row. diptych's passes
  (workloads/loss.py: 22 + 10 B per logit fused, 38 + 14 unfused) are calibrated [C] on
  V ≥ 16,384 (rows ``*``): the preset's ``cross_entropy*`` fractions. The fused path's
  helpers are ``jit_fuser`` functions too, so its rows after the first vocabulary may also
  time dynamic-shape kernels [assumption: not measured on the GH100; the eager path's are
  not compiled].

Bytes per element (BF16, 2 B): SwiGLU and GeGLU forward read gate and up, write the product
(3 per output element), backward read the output gradient and ``gate_up`` and write
``d gate_up`` (5); GeLU reads x and writes y (2), backward 3; the bias-dropout-add reads x
and the residual and writes the sum and its bool mask (7 B), the dropout's backward reads the
gradient and the mask and writes the gradient (5 B). RMSNorm forward reads x (and the
weight), writes y (2). diptych's time: the op alone on the h100 preset (``simulate``), at the
nominal clock, under the stack setting ``elementwise_kernels`` given (``default``: the
vector unit's copy rate; ``megatron``: the preset's ``[elementwise_kernels_megatron]``).
docs/validation-published.md, "Elementwise kernels", says what they show.
"""

from __future__ import annotations

import argparse
import json
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
#: the points the preset's SwiGLU rates were calibrated on until 2026-12-04 (≥ 200 MB a
#: pass): the dynamic-shape kernel (module docstring), now checks
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


#: GH100 measurements of Megatron-Core's own fusions, each compiled for its one shape
#: (benchmarks/gpu/measure_megatron_kernels.py): the preset's [C] rates
GH100_RESULTS = Path(__file__).resolve().parent / "gpu" / "h200-2026-12-04" / \
    "megatron_kernels.json"


def _gelu_ops(tokens: int, width: int) -> tuple[VectorOp, VectorOp]:
    """GeLU with its bias, forward (reads x, writes y) and backward (reads dy and x, writes
    dx), as diptych lowers GPT-3's (the bias's bytes left out)."""
    n = tokens * width
    ops = VECTOR_OPS_PER_ELEMENT["gelu"]
    return (VectorOp(name="gelu", kind="gelu", elements=n, ops_per_element=ops,
                     read_bytes=n * A, write_bytes=n * A, dtype="bf16"),
            VectorOp(name="gelu.bwd", kind="gelu", elements=n, ops_per_element=2 * ops,
                     read_bytes=2 * n * A, write_bytes=n * A, dtype="bf16", tags=("bwd",)))


def _dropout_add_ops(tokens: int, width: int) -> tuple[VectorOp, VectorOp]:
    """A residual add that drops (reads x and the residual, writes the sum and the bool
    mask) and the dropout's backward kernel (reads dy and the mask, writes dx), as diptych
    lowers GPT-3's bias-dropout-add (workloads/dropout.py)."""
    n = tokens * width
    return (VectorOp(name="bda", kind="add", elements=n, ops_per_element=3.0,
                     read_bytes=2 * n * A, write_bytes=n * A + n, dtype="bf16",
                     tags=("residual_add", "dropout")),
            VectorOp(name="bda.dropout_bwd", kind="elementwise", elements=n,
                     ops_per_element=2.0, read_bytes=n * A + n, write_bytes=n * A,
                     dtype="bf16", tags=("dropout", "bwd")))


def gh100_kernels(path: Path = GH100_RESULTS) -> tuple[float, list[tuple[str, str, VectorOp,
                                                                           float]]]:
    """(the GH100's copy rate in B/s, [(measured case, the preset's field, diptych's op of
    that shape, measured seconds), ...]) from the measurement's JSON; the dropout's backward
    alone is the 2,048-token forward-and-backward less the forward."""
    d = json.loads(path.read_text())
    t = {r["name"]: r["seconds"] for r in d["kernels"]}
    out = []
    for label, tokens, width in (("llama-3.1-8b CP2 (4096 x 14336)", 4096, 14336),
                                 ("llama-3.1-70b TP4 CP2 (4096 x 7168)", 4096, 7168),
                                 ("Liger's shape (8192 x 14336)", 8192, 14336)):
        fwd, bwd, _ = swiglu_ops(tokens, width)
        out += [(f"swiglu {label} fwd", "swiglu", fwd, t[f"swiglu {label} fwd"]),
                (f"swiglu {label} bwd", "swiglu_bwd", bwd, t[f"swiglu {label} bwd"])]
    fwd, bwd, _ = swiglu_ops(8192, 8192, kind="geglu")
    g = "geglu grok-1 expert (8192 x 8192)"
    out += [(f"{g} fwd", "geglu", fwd, t[f"{g} fwd"]), (f"{g} bwd", "geglu_bwd", bwd,
                                                       t[f"{g} bwd"])]
    fwd, bwd = _gelu_ops(2048, 12288)
    g = "bias_gelu gpt3-175b TP4 (2048 x 12288)"
    out += [(f"{g} fwd", "gelu", fwd, t[f"{g} fwd"]), (f"{g} bwd", "gelu_bwd", bwd,
                                                      t[f"{g} bwd"])]
    g = "bias_dropout_add gpt3-175b ({} x 12288, p 0.1)"
    fwd = _dropout_add_ops(512, 12288)[0]
    out.append((g.format(512) + " fwd", "dropout_add", fwd, t[g.format(512) + " fwd"]))
    bwd = _dropout_add_ops(2048, 12288)[1]
    out.append((g.format(2048) + " bwd (fwd+bwd less fwd)", "dropout_add_bwd", bwd,
                t[g.format(2048) + " fwd+bwd"] - t[g.format(2048) + " fwd"]))
    return d["copy_Bps"], out


#: Megatron-Core's fused cross-entropy on the GH100, compiled for the rows' shapes
#: (benchmarks/gpu/measure_cross_entropy.py): a check of the preset's Liger-calibrated rates
GH100_CE = GH100_RESULTS.with_name("cross_entropy.json")


def gh100_ce_fractions(path: Path = GH100_CE) -> list[tuple[str, float, float]]:
    """[(case, forward, backward fraction of the GH100's copy rate at diptych's bytes of the
    fused loss, 22 and 10 B per logit), ...]."""
    d = json.loads(path.read_text())
    out = []
    for r in d["cross_entropy"]:
        n = r["rows"] * r["vocab"]
        out.append((r["name"], n * 22 / r["forward_s"] / d["copy_Bps"],
                    n * 10 / r["backward_s"] / d["copy_Bps"]))
    return out


def measured_fractions(path: Path = GH100_RESULTS) -> dict[str, float]:
    """Each rated field's measured fraction of the GH100's copy rate (diptych's bytes of the
    op over the measured time, over the copy rate), the mean over its shapes: what the
    preset's ``[elementwise_kernels_megatron]`` fields are set from (rounded to 0.01, at most
    1: the field's bound)."""
    copy, rows = gh100_kernels(path)
    acc: dict[str, list[float]] = {}
    for _, field, op, sec in rows:
        acc.setdefault(field, []).append((op.read_bytes + op.write_bytes) / sec / copy)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def gh100_rows(chip, tuned) -> list[str]:
    copy, rows = gh100_kernels()
    out = []
    for name, field, op, sec in rows:
        b = op.read_bytes + op.write_bytes
        frac = b / sec / copy
        # the GH100's time at the h100's copy rate: the fraction carried over [assumption]
        at_h100 = sec * copy / copy_rate(chip) * 1e3
        out.append(f"| {name} | {b / 1e6:.0f} | {sec * 1e3:.4f} ({b / sec / 1e12:.2f}) | "
                   f"{frac:.3f} | {getattr(tuned.elementwise_kernels, field):g} | "
                   f"{ms(op, chip):.4f} | {ms(op, tuned):.4f} | {ms(op, tuned) / at_h100:.2f} |")
    return out


def copy_rate(chip) -> float:
    """The chip's copy rate, B/s (read + written): a 1 GiB copy's bytes over its time."""
    n = 1 << 29
    op = VectorOp(name="copy", kind="copy", elements=n, ops_per_element=0.0,
                  read_bytes=n * A, write_bytes=n * A, dtype="bf16")
    return 2 * n * A / simulate(op, chip).seconds


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
        mark = "*" if f in CALIBRATION else ""   # was the calibration, now a check
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the Markdown table here too")
    args = ap.parse_args(argv)
    chip = load_chip("h100")
    tuned = stack_chip(chip, elementwise_kernels="megatron")
    gh_head = ["| Megatron-Core kernel on the GH100 (calibration) | MB moved | GH100 ms "
               "(TB/s) | fraction of its copy rate | preset | diptych default ms | diptych "
               "megatron ms | megatron / GH100 carried over |",
               "|---|---:|---:|---:|---:|---:|---:|---:|"]
    head = ["| kernel (8,192 tokens or rows; RMSNorm 4,096; check) | MB moved | Megatron / "
            "torch ms (TB/s) | Liger ms (TB/s) | diptych default ms | diptych megatron ms | "
            "megatron / published |", "|---|---:|---:|---:|---:|---:|---:|"]
    rates = tuned.elementwise_kernels
    fr = measured_fractions()
    ce = {impl: ce_fractions(chip, impl) for impl in CE}
    lines = [f"Calibration: {GH100_RESULTS.relative_to(Path(__file__).resolve().parent)} "
             f"(GH100, Megatron-Core's functions compiled for the rows' shapes).", ""] + \
        gh_head + gh100_rows(chip, tuned) + [
        "", "Measured fraction of the copy rate, mean over each field's shapes (the preset, "
        "rounded, at most 1): " + ", ".join(
            f"{k} {v:.3f} ({getattr(rates, k):g})" for k, v in fr.items()) + ".",
        "", "Megatron-Core's fused cross-entropy on the GH100, compiled for one shape (check of "
        "the rates set from Liger's rows below): " + "; ".join(
            f"{n} forward {f:.2f}, backward {b:.2f}" for n, f, b in gh100_ce_fractions()) +
        f" of the copy rate (the preset's cross_entropy {rates.cross_entropy:g}, "
        f"cross_entropy_bwd {rates.cross_entropy_bwd:g}).",
        "", f"Checks: {SRC}.", ""] + head + swiglu_rows(chip, tuned) + rmsnorm_rows(chip) + \
        ce_rows(chip, tuned) + [
        "", "* Liger's SwiGLU rows after its first point time the dynamic-shape kernel "
        "(module docstring), slower than the static one a training rank runs; CE rows marked "
        "* calibrate the preset's cross-entropy rates. † the benchmark's backward row less "
        "its forward row and the sum's pass: a confounded reading.",
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
