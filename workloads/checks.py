"""Whether a chip can run a precision: the check every command that times a workload makes.

:func:`check_supported` is ``diptych run``'s precision check; ``workloads/run.py``, the
cluster step (:mod:`diptych.sim.cluster.step`) and ``tools/precision.py`` call it.
"""

from __future__ import annotations

from ..arch.chip import Chip
from ..arch.dtypes import dtype_bytes, is_block_scaled
from ..sim.ops import Gemm
from .precision import Precision


def wider(a: str, b: str) -> str:
    """The wider of two dtypes (``a`` on a tie): what a product of the two computes in."""
    return a if dtype_bytes(a) >= dtype_bytes(b) else b


def check_supported(chip: Chip, p: Precision) -> str:
    """The compute dtype of ``p`` on ``chip`` (the wider of weights and activations, whose
    peak MFU refers to). Raises ValueError naming the chip, the dtype and the dtypes its
    arrays support when it cannot multiply weights by activations or attend over the KV
    cache (activations × KV) in that precision, or when its weights or KV cache are narrower
    than its activations and the chip has no way to expand them (``core.array.mixed_input`` /
    ``core.array.dequant``, docs/precision.md)."""
    comp = wider(p.activations, p.weights)
    for what, d in (("weights x activations", comp),
                    ("attention over the KV cache", wider(p.activations, p.kv))):
        if not chip.supports(d):
            why = ""
            if is_block_scaled(d) and chip.core.array.block_scale == "none":
                why = "; its arrays have no block-scale support (core.array.block_scale " \
                      "is 'none')"
            raise ValueError(f"chip {chip.name!r} cannot compute {what} in {d}: "
                             f"core.array.macs_per_pe_per_cycle.{d} is 0 (its arrays "
                             f"support {', '.join(chip.dtypes)}){why}; choose --act-dtype/"
                             f"--weights-dtype/--kv-dtype among those")
    from .quant import dequant_place
    # weights, and a KV cache (decode), narrower than the activations: expanded somewhere
    for b, tags in ((p.weights, ("weight",)), (p.kv, ())):
        if dtype_bytes(b) < dtype_bytes(p.activations):
            dequant_place(chip, Gemm(name="w", m=1, k=1, n=1, a_dtype=p.activations,
                                     b_dtype=b, tags=tags))
    return comp
