"""A serving engine's sampling kernels as ops: the passes :data:`diptych.arch.sampler.SAMPLERS`
lists for the engine a runtime profile names, over the ``rows × vocab`` logits of a step
(every sampled row, the whole vocabulary: the LM head's output is all-gathered first), after
the head. docs/serving.md, "The engine's sampler".

Each pass reads the buffer the one before it wrote (the first, the head's logits) and writes
the next; the last pass's buffer outlives the step (the engine reads the tokens from it).
"""

from __future__ import annotations

from ..arch.sampler import SAMPLERS, check_sampler
from .ops import VectorOp

#: Tag of every sampling pass (beside the sampler's name).
TAG = "sampler"


def sampler_ops(rows: int, vocab: int, a_bytes: float, sampler: str) -> list[VectorOp]:
    """The passes of ``sampler`` over ``rows × vocab`` logits whose own width is ``a_bytes``
    (FP32 ops: every pass after the engine's output cast works on FP32 logits)."""
    n = rows * vocab
    return [VectorOp(name=name, kind=kind, elements=n, ops_per_element=ops,
                     read_bytes=n * (a_bytes if rd == "a" else rd), write_bytes=n * wr,
                     dtype="fp32", tags=(TAG, sampler))
            for name, kind, rd, wr, ops in SAMPLERS[check_sampler(sampler)]]

