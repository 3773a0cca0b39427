"""Whether a chip can run a precision: the check every command that times a workload makes.

:func:`check_supported` is ``diptych run``'s precision check; ``workloads/run.py``, the
cluster step (:mod:`diptych.sim.cluster.step`) and ``tools/precision.py`` call it.
"""

from __future__ import annotations

from ..arch.chip import Chip
from ..arch.dtypes import dtype_bytes
from .precision import Precision


def wider(a: str, b: str) -> str:
    """The wider of two dtypes (``a`` on a tie): what a product of the two computes in."""
    return a if dtype_bytes(a) >= dtype_bytes(b) else b


def check_supported(chip: Chip, p: Precision) -> str:
    """The compute dtype of ``p`` on ``chip`` (the wider of weights and activations, whose
    peak MFU refers to). Raises ValueError naming the chip, the dtype and the dtypes its
    arrays support when it cannot multiply weights by activations or attend over the KV
    cache (activations × KV) in that precision."""
    comp = wider(p.activations, p.weights)
    for what, d in (("weights x activations", comp),
                    ("attention over the KV cache", wider(p.activations, p.kv))):
        if not chip.supports(d):
            raise ValueError(f"chip {chip.name!r} cannot compute {what} in {d} (its arrays "
                             f"support {', '.join(chip.dtypes)}); choose --act-dtype/"
                             f"--weights-dtype/--kv-dtype among those")
    return comp
