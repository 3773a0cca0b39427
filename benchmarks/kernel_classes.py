"""Per-kernel-class time of the H100 system checks (issue 21): where diptych spends one
micro-batch of each row of ``benchmarks/validate_system.py`` on one rank, by kernel class,
to set beside published per-kernel breakdowns of comparable steps; prints Markdown.

    python benchmarks/kernel_classes.py [--only TEXT ...] [--steps] [--out FILE]

Each row's ops are the cluster step's own (:func:`~diptych.sim.cluster.layers.layer_ops`
with the row's degrees, stack settings and recipe, one micro-batch, sequence parallelism at
TP > 1), every op timed alone as the ``"sum"`` execution times it
(:func:`~diptych.sim.run.summed.simulate_workload` over the op and the precision ops the chip
runs beside it). A class is the sum over its ops, forward and backward: the GEMMs (the
linear layers, the LM head, MoE experts and router), fused attention (the ring-attention
calls of a CP rank), the activation (SwiGLU, GeLU, GeGLU), norms, RoPE, the residual adds,
TE's ring-attention bookkeeping (``cp_merge``), FP8 casts and transposes, the split
accumulator's exposed promotions in the FP8 dgrad and wgrad GEMMs (``<gemm>.promote``), MoE
permute and combine, the loss and the embedding (the gather, its gradient's zeroing and
accumulation).
Collectives are not ops of a layer (the cluster step times them on the topology).

``--steps`` also runs each row's cluster step (:func:`validate_system.run_row`, ~20 s a row)
and prints the published step beside diptych's, the missing seconds per layer and
micro-batch of a pipeline stage and the pipeline boundaries each layer's chunk crosses.
docs/validation-published.md, "Kernel classes against published breakdowns", holds the
tables and what they say. ~5 s a row without ``--steps``.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from diptych.arch import load_chip
from diptych.sim.cluster.layers import layer_ops, layer_order
from diptych.sim.run.node import scenario_precision
from diptych.sim.run.precision_ops import with_precision_ops
from diptych.sim.run.stack import scenario_chip
from diptych.sim.run.summed import simulate_workload
from diptych.workloads.graph import Workload
from diptych.workloads.program import Block
from diptych.workloads.registry import load_model

sys.path.insert(0, str(Path(__file__).parent))
import validate_system as vs  # noqa: E402

#: The classes, in the order the tables print them.
CLASSES = ("gemm", "attention", "activation", "norms", "rope", "residual adds",
           "cp bookkeeping", "fp8 casts", "split accumulator", "moe routing", "loss",
           "embedding")
_ACTIVATIONS = ("swiglu", "geglu", "gelu", "silu")
_MOE = ("experts_permute", "experts_combine", "topk")
_CASTS = ("cast", "transpose", "amax", "fp8")


def op_class(name: str, kind: str) -> str:
    """The class of an op record (``name``: the record's op, ``kind``: its kind), one of
    :data:`CLASSES`; ValueError naming the op for one no class covers (a new op: name its
    class here)."""
    base = name.lower().split(".")[0]
    if name.endswith(".promote"):
        return "split accumulator"
    if "cp_merge" in name:
        return "cp bookkeeping"
    if kind == "attention" or base.startswith("attention (fused)"):
        return "attention"
    if kind == "gemm":
        return "gemm"
    if base.startswith("cross_entropy") or base.startswith("softmax"):
        return "loss"
    if base.startswith("embed"):
        return "embedding"
    if base.startswith(_MOE):
        return "moe routing"
    if "norm" in base:
        return "norms"
    if base.startswith("rope"):
        return "rope"
    if any(a in base for a in _ACTIVATIONS):
        return "activation"
    if "residual" in base:
        return "residual adds"
    if any(c in name.lower() for c in _CASTS):
        return "fp8 casts"
    raise ValueError(f"op {name!r} ({kind}) has no kernel class: add it to op_class")


def class_seconds(r: vs.Row) -> dict[str, dict[str, float]]:
    """Seconds of each class (:data:`CLASSES`) in one micro-batch on one rank of row ``r``,
    by layer kind (the lowering's block names, ``head``, ``embedding``); each op timed
    alone, forward and backward."""
    s = vs.scenario(r)
    chip = scenario_chip(load_chip("h100"), s)
    model = load_model(r.model)
    p = scenario_precision(chip, s)
    tp, cp, ep = (r.degrees.get(k, 1) for k in ("tp", "cp", "ep"))
    ops = layer_ops(model, p, phase="train", tp=tp, cp=cp, ep=ep, micro_batch=1, seq=r.seq,
                    sequence_parallel=tp > 1, routing=s.routing)
    out: dict[str, dict[str, float]] = {}
    for kind, lo in ops.items():
        c: dict[str, float] = collections.defaultdict(float)
        for part in (lo.forward, lo.backward):
            if not part:
                continue
            w = with_precision_ops(Workload("train", (Block.of_ops(kind, 1, tuple(part)),),
                                            tokens=1, batch=1), chip)
            for rec in simulate_workload(w, chip)["layers"]:
                c[op_class(rec["op"], rec["kind"])] += rec["seconds"] * rec["repeat"]
        out[kind] = dict(c)
    return out


def stage_layout(r: vs.Row) -> dict:
    """Layers per pipeline stage, micro-batches per step and rank, and the pipeline
    boundaries a layer's chunk sends across per micro-batch (forward and backward: 2 per
    chunk on an inner stage, 0 without pipelining), from the row's degrees and plan."""
    model = load_model(r.model)
    d = r.degrees
    tp, pp, cp = d.get("tp", 1), d.get("pp", 1), d.get("cp", 1)
    dp = r.chips // (tp * pp * cp)
    vstages = r.plan.get("virtual_stages", 1)
    per_stage = model.layers // pp
    per_chunk = per_stage // vstages
    return dict(layers_per_stage=per_stage, micro_batches=r.batch // dp,
                boundaries_per_layer=(2 / per_chunk) if pp > 1 else 0.0)


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def layer_table(rows, data) -> list[str]:
    """One line per row: its layer kinds' classes (ms per micro-batch and layer, the share
    of the layer's summed op time), weighted by how many layers of each kind it has."""
    out = ["| case | layer (ms, summed ops) | " + " | ".join(CLASSES[:-2]) + " |",
           "|---|---|" + "---|" * (len(CLASSES) - 2)]
    for r, cs in zip(rows, data):
        model = load_model(r.model)
        kinds = collections.Counter(layer_order(model, {k: None for k in cs}))
        n = sum(kinds.values())
        layer = {c: sum(cs[k].get(c, 0.0) * cnt for k, cnt in kinds.items()) / n
                 for c in CLASSES[:-2]}
        tot = sum(layer.values())
        out.append(f"| {r.name} | {_ms(tot)} | " + " | ".join(
            f"{_ms(layer[c])} ({layer[c] / tot:.0%})" if layer[c] else "—"
            for c in CLASSES[:-2]) + " |")
    return out


def head_table(rows, data) -> list[str]:
    """The head (LM-head GEMMs, final norm, loss) and the embedding, ms per micro-batch."""
    out = ["| case | head GEMMs | loss | embedding |", "|---|---|---|---|"]
    for r, cs in zip(rows, data):
        h, e = cs["head"], cs["embedding"]
        out.append(f"| {r.name} | {_ms(h.get('gemm', 0))} | {_ms(h.get('loss', 0))} | "
                   f"{_ms(sum(e.values()))} |")
    return out


def step_table(rows, data) -> list[str]:
    """Published and diptych step seconds, and the missing time per layer and micro-batch
    of a stage against the layer's summed op time (runs each row's cluster step)."""
    out = ["| case | published | diptych | missing | layers × micro-batches per stage | "
           "missing per layer and micro-batch | of the layer's summed ops | pipeline "
           "boundaries per layer |", "|---|---|---|---|---|---|---|---|"]
    for r, cs in zip(rows, data):
        lay = stage_layout(r)
        res = vs.run_row(r)
        miss = r.published_s - res.seconds
        n = lay["layers_per_stage"] * lay["micro_batches"]
        model = load_model(r.model)
        kinds = collections.Counter(layer_order(model, {k: None for k in cs}))
        layer = sum(sum(cs[k].values()) * c for k, c in kinds.items()) / sum(kinds.values())
        out.append(f"| {r.name} | {r.published_s:.2f} s | {res.seconds:.2f} s | "
                   f"{miss:.2f} s | {lay['layers_per_stage']} × {lay['micro_batches']} | "
                   f"{_ms(miss / n)} ms | {miss / n / layer:.0%} | "
                   f"{lay['boundaries_per_layer']:.2f} |")
        print(out[-1], flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=(), help="rows whose name holds TEXT")
    ap.add_argument("--steps", action="store_true",
                    help="also run each row's cluster step (~20 s a row)")
    ap.add_argument("--out", help="write the Markdown tables here")
    a = ap.parse_args(argv)
    rows = [r for r in vs._rows() if not a.only or any(o in r.name for o in a.only)]
    data = [class_seconds(r) for r in rows]
    lines = ["Per layer, one micro-batch on one rank (ms; share of the layer's summed ops):",
             "", *layer_table(rows, data), "", "Head and embedding (ms per micro-batch):",
             "", *head_table(rows, data)]
    print("\n".join(lines), flush=True)
    if a.steps:
        lines += ["", "Steps:", "", *step_table(rows, data)]
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
