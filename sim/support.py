"""What a chip's datapath supports for an op: the dataflows a GEMM may use, the precision a
phase runs in (:func:`check_supported`: ``diptych run``'s precision check, which the run layer,
the cluster step and the CLI's precision option all make), and where the narrow operand of a
mixed-precision product is expanded.

The op records (:mod:`diptych.workloads.ops`) and the lowering know no chip; these are the
rules that join an op to a chip's ``[core.array]`` and ``[core.vector]`` tables, used by the
mapper (tile capacity), the engine's entry points and the run layer
(:mod:`diptych.sim.run`).
"""

from __future__ import annotations

from ..arch.chip import DATAFLOWS, Chip
from ..arch.dtypes import dtype_bytes, element_bits, is_block_scaled
from ..workloads.ops import Gemm, mixed_pair, narrow_b
from ..workloads.precision import Precision


def check_dataflows(chip, dataflow):
    """The dataflows to try for a GEMM on ``chip``: the requested one (validated) or all the
    chip supports."""
    supported = chip.core.array.dataflows
    if dataflow is None:
        return tuple(supported)
    if dataflow not in DATAFLOWS:
        raise ValueError(f"dataflow must be one of {', '.join(DATAFLOWS)}, not {dataflow!r}")
    if dataflow not in supported:
        raise ValueError(f"dataflow {dataflow!r} is not supported by chip {chip.name!r} "
                         f"(supported: {', '.join(supported)})")
    return (dataflow,)


def expanded_b_bits(chip, op) -> int:
    """Bits per element of the expanded copy of a B block that ``chip`` keeps in the
    scratchpad beside B's two slots while the array multiplies it, or 0.

    A GEMM whose B operand is narrower than its A operand (W4A16 weights, an FP8 KV cache
    under BF16 queries) computes in A's dtype; a chip whose PE does not multiply the pair
    (``core.array.mixed_input``) expands B on its vector unit (``core.array.dequant =
    "vector"``; sim/run/precision_ops.py charges the work), and unless the vector unit hands the
    expanded values to the array directly (``core.vector.on_array_input_path``, registers
    into the MMA), it writes them back into the scratchpad at A's width for the array to read
    (docs/precision.md, "On-chip traffic of expanded tiles"): one B block at A's width, A's
    element bits, beside the narrow ones."""
    if chip is None or not narrow_b(op):
        return 0
    arr = chip.core.array
    if (mixed_pair(op) in arr.mixed_input or arr.dequant != "vector"
            or chip.core.vector.on_array_input_path):
        return 0
    return element_bits(op.a_dtype)


def dequant_place(chip, g: Gemm) -> str | None:
    """Where ``chip`` expands ``g``'s B operand: None (not a mixed GEMM), ``"pe"`` (its pair
    is in ``mixed_input``) or ``"vector"``. ValueError naming ``core.array.dequant`` when the
    chip has neither."""
    if not narrow_b(g):
        return None
    arr = chip.core.array
    pair = mixed_pair(g)
    if pair in arr.mixed_input:
        return "pe"
    if arr.dequant == "vector":
        return "vector"
    have = ", ".join(arr.mixed_input) or "none"
    what = "weights" if "weight" in g.tags else "B operand (a KV cache)"
    raise ValueError(f"chip {chip.name!r} cannot multiply {g.b_dtype} {what} by "
                     f"{g.a_dtype} activations: core.array.mixed_input lacks {pair!r} "
                     f"(it has: {have}) and core.array.dequant is {arr.dequant!r}; expected "
                     f"a listed pair or dequant = \"vector\"")


def wider(a: str, b: str) -> str:
    """The wider of two dtypes (``a`` on a tie): what a product of the two computes in."""
    return a if dtype_bytes(a) >= dtype_bytes(b) else b


def check_supported(chip: Chip, p: Precision) -> str:
    """The compute dtype of ``p`` on ``chip`` (the wider of weights and activations, or an FP8
    recipe's linear dtype: the one whose peak MFU refers to). Raises ValueError naming the
    chip, the dtype and the dtypes its arrays support when it cannot multiply weights by
    activations or attend over the KV cache (activations × KV) in that precision, or when its
    weights or KV cache are narrower than its activations and the chip has no way to expand
    them (``core.array.mixed_input`` / ``core.array.dequant``, docs/precision.md)."""
    comp = wider(p.activations, p.weights)
    checks = [("weights x activations", comp),
              ("attention over the KV cache", wider(p.activations, p.kv))]
    if p.linear is not None:       # an FP8 recipe: the linear GEMMs run in its dtype
        comp = p.linear
        checks.insert(0, (f"the linear layers of recipe {p.recipe}", p.linear))
    for what, d in checks:
        if not chip.supports(d):
            why = ""
            if is_block_scaled(d) and chip.core.array.block_scale == "none":
                why = "; its arrays have no block-scale support (core.array.block_scale " \
                      "is 'none')"
            raise ValueError(f"chip {chip.name!r} cannot compute {what} in {d}: "
                             f"core.array.macs_per_pe_per_cycle.{d} is 0 (its arrays "
                             f"support {', '.join(chip.dtypes)}){why}; choose --act-dtype/"
                             f"--weights-dtype/--kv-dtype among those")
    # weights, and a KV cache (decode), narrower than the activations: expanded somewhere
    # (a recipe's linears take inputs in their weights' dtype; its other weights are wide)
    narrow = [(p.kv, ())] if p.linear else [(p.weights, ("weight",)), (p.kv, ())]
    for b, tags in narrow:
        if dtype_bytes(b) < dtype_bytes(p.activations):
            dequant_place(chip, Gemm(name="w", m=1, k=1, n=1, a_dtype=p.activations,
                                     b_dtype=b, tags=tags))
    return comp
