"""Which ops of a lowered serving step run on attention–FFN disaggregation's FFN pool
(docs/serving.md, "Attention–FFN disaggregation"; :mod:`.afd`).

A layer block's FFN is the ops between its ``mlp_norm`` and its ``mlp_residual``: the dense
MLP, or the MoE layer's experts (with their permute and combine) and shared experts. Of
those, the router and its top-k stay on the attention pool (MegaScale-Infer's attention
nodes compute the gate before dispatching, arXiv 2504.02263), as do norms; collectives
(the in-pool dispatch/combine all-to-alls and the FFN's all-reduce) are what the link
between the pools carries instead, so neither pool runs them. A GEMM's precision ops
(``<gemm>.scales``/``.rescale``/``.dequant``) go with their GEMM.
"""

from __future__ import annotations

from dataclasses import replace

from ...workloads.graph import Workload
from ...workloads.ops import Collective
from ...workloads.params import chip_share, weight_bytes, weight_tensors
from ...workloads.serving_step import base_name

#: Ops between ``mlp_norm`` and ``mlp_residual`` that stay on the attention pool.
ROUTER_OPS = frozenset({"router", "topk"})

#: The two sides of a split step.
SIDES = ("attention", "ffn")


def ffn_op(op) -> bool:
    """Whether an op inside a layer's FFN span runs on the FFN pool (module docstring)."""
    name = base_name(op.name.split(".")[0])
    return not (isinstance(op, Collective) or name in ROUTER_OPS or "norm" in name)


def ffn_span(block) -> tuple[int, int] | None:
    """Indices ``(after mlp_norm, mlp_residual)`` of a layer block's FFN ops; None for a
    block without a FFN (embedding, head)."""
    names = [base_name(o.name) for o in block.ops]
    if "mlp_norm" not in names or "mlp_residual" not in names:
        return None
    return names.index("mlp_norm") + 1, names.index("mlp_residual")


def split_workload(w: Workload, side: str) -> Workload:
    """``w``'s attention-pool part (``side="attention"``: every block, the FFN ops taken
    out) or FFN-pool part (``side="ffn"``: the layer blocks' FFN ops only). A split block is
    a chain of its remaining ops (the summed execution times ops in order; it reads no
    access records)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {', '.join(SIDES)}, not {side!r}")
    blocks = []
    for b in w.blocks:
        span = ffn_span(b)
        if span is None:
            if side == "attention":
                blocks.append(b)
            continue
        lo, hi = span
        keep = tuple(o for i, o in enumerate(b.ops) if (lo <= i < hi and ffn_op(o))
                     == (side == "ffn"))
        if keep:
            blocks.append(b.with_ops(keep))
    return replace(w, blocks=tuple(blocks))


#: Weight groups (:func:`~diptych.workloads.params.weight_tensors`) pool B holds.
FFN_GROUPS = frozenset({"mlp", "expert", "shared_expert"})


def part_weight_bytes(r, side: str, chips: int) -> float:
    """Weight bytes per chip of ``r.model``'s pool-``side`` part on ``chips`` chips: pool A
    every group but :data:`FFN_GROUPS` (split tensors ÷ n), pool B those (routed experts
    whole, ÷ m; dense and shared MLPs ÷ m)."""
    return weight_bytes([(t, chip_share(t, chips, chips, whole_experts=True))
                         for t in weight_tensors(r.model)
                         if (t.group in FFN_GROUPS) == (side == "ffn")], r.precision)


__all__ = ["FFN_GROUPS", "ROUTER_OPS", "SIDES", "ffn_op", "ffn_span", "part_weight_bytes",
           "split_workload"]
