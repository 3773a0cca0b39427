"""Dropout in a training step as Megatron-Core and its attention kernels run it (issue 21).

Two probabilities, as NeMo's model config names them (``hidden_dropout``,
``attention_dropout``); both are 0 by default, and at 0 nothing here is lowered (the dropout
is the identity, PyTorch's ``F.dropout`` with ``p=0`` returns its input).

* **Hidden dropout** (``hidden_dropout`` > 0): Megatron-Core's bias-dropout-add after the
  attention and the MLP of every layer, ``out = residual + dropout(x + bias)`` [S:
  NVIDIA/Megatron-LM core_r0.9.0 (1afee592) megatron/core/fusions/fused_bias_dropout.py
  L36-37; ``bias_dropout_add_fused_train`` is ``@jit_fuser`` and megatron/core/jit.py makes
  ``jit_fuser = torch.compile`` from PyTorch 2.2 (read at 00caa53a)]. Inductor decomposes
  ``aten.native_dropout`` into ``bool_mask = torch.rand_like(input) > p``, ``res = bool_mask
  * input * (1 / (1 - p))`` and returns ``(res, bool_mask)`` [S: pytorch/pytorch
  torch/_decomp/decompositions.py ``native_dropout``]; the backward multiplies the output
  gradient by that mask and the scale, and the random draw is not re-run there
  [assumption: the compiled graph saves the bool mask, the smallest tensor between the draw
  and the backward, rather than re-drawing it]. Per element of the stream (``a`` = the
  activations' bytes, BF16 2) the forward kernel reads ``x`` and the residual (``2a``) and writes the sum
  and the mask (``a + 1``); the backward gains a kernel of its own, ``grad · mask · scale``,
  reading the output gradient and the mask (``a + 1``) and writing the sub-block output's
  gradient (``a``); the residual's gradient is the output gradient as it is, summed with the
  norm's as without dropout (workloads/train.py :func:`~diptych.workloads.train.\
vector_backward_bytes`). The masks are saved activations: ``1`` B per element, ``2·s·b·h``
  per layer (Korthikanti et al. 2022's dropout-mask term; ``÷ tp`` under sequence
  parallelism, where the bias-dropout-adds run on the rank's shard). The kernels are timed by
  their bytes at the vector unit's rate, or, under a stack table with ``dropout_add`` rates
  (arch/chip.py ``ElementwiseKernels``: the op's :data:`TAG` picks them), at the rate measured
  for Megatron's compiled kernel, the random draw included (h100: 0.38 of the copy rate
  forward on GPT-3's shard, 0.63 for the dropout's backward; measured on a GH100,
  arch/chips/h100.toml).
  The embedding's dropout (Megatron-Core's ``LanguageModelEmbedding.embedding_dropout``, the
  same ``hidden_dropout``, once per micro-batch on the first stage against two per layer) is
  not lowered.
* **Attention dropout** (``attention_dropout`` > 0): the fused attention kernel drops
  probabilities in place, drawing its mask with Philox inside the kernel in the forward and
  again in the backward (FlashAttention-2: one ``philox`` call, 7 rounds, per 16 scores;
  no mask stored [S: Dao-AILab/flash-attention csrc/flash_attn/src/dropout.h
  ``apply_dropout``, philox.cuh ``philox``]): no bytes move, the kernel runs longer. Its cost
  is the attention table's measured ``dropout_cost`` (arch/chip.py ``AttentionKernel``;
  sim/run/attention_tiles.py): the tiled compute time × ``(1 + dropout_cost)`` on every
  call of a kernel that drops (tagged :data:`TAG`). Unfused attention (``--attention
  unfused``) has no dropout kernel here: a probability there is refused.
"""

from __future__ import annotations

import math
import numbers

#: Tag of a forward op that drops: a residual add that also writes its mask, a fused
#: attention kernel that draws one inside.
TAG = "dropout"
#: Bytes per element of a saved dropout mask: PyTorch's ``bool`` (``native_dropout``).
MASK_BYTES = 1.0
#: Lane ops per element a residual add that drops adds to its forward: the compare that
#: draws the mask and the scale (``bool_mask * input * (1 / (1 - p))``). Its backward,
#: ``grad · mask · scale``, is the dropout's own kernel (workloads/train.py
#: ``dropout_backward``); the add's own backward is the add's as at p = 0.
DROP_OPS = 2.0
#: The probabilities a run sets (``Scenario``, ``Precision``), as NeMo names them.
FIELDS = ("hidden_dropout", "attention_dropout")


def check_probability(name: str, p) -> float:
    """``p`` as a float if it is a real number in [0, 1), else ValueError naming ``name``,
    the value and what was expected (1 would drop everything: no training step)."""
    # numbers.Real: NumPy's floats and integers too (np.float32(0.1) from a sweep); a bool
    # (a Real through int) is not a probability, nor NumPy's (not a Real)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or math.isnan(p) \
            or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), not {p!r}")
    return float(p)
