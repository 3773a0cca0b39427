"""The LM loss of a training step as Megatron-Core runs it: vocab-parallel cross-entropy over
the rank's ``rows × v`` logits (``v`` = vocabulary ÷ tp), in FP32, in the passes of its fused
path (``cross_entropy_loss_fusion``).

[S: NVIDIA/Megatron-LM core_r0.9.0 @1afee592 megatron/core/fusions/fused_cross_entropy.py
(the four ``@jit_fuser`` functions below) over megatron/core/tensor_parallel/cross_entropy.py
(``VocabParallelCrossEntropy``, the operations each runs); megatron/core/jit.py: ``jit_fuser =
torch.compile`` from PyTorch 2.2 [assumption: each function one generated kernel, Inductor
fusing a row reduction with the pointwise work over the same rows, and keeping the in-place
update of an input as a store; read from the code, not profiled]; the loss is
computed in ``LanguageModule.compute_language_model_loss``, which transposes only the labels
and the per-token loss, not the logits. NVIDIA/NeMo v2.0.0 (NeMo 24.09) @e938df32
megatron_base_model.py ``build_transformer_config`` copies ``cross_entropy_loss_fusion`` from
the model config; NVIDIA/dgxc-benchmarking 35a9aec llama3.1/llama3.1_8b.yaml and
llama3.1_70b.yaml set ``cross_entropy_loss_fusion: true``.]

Bytes per logit element (``a``: the logits' width, BF16 = 2), reads + writes:

* ``cross_entropy.max`` (``calculate_logits_max``): ``logits.float()`` (returned, so
  stored) and the row max over the same read: a + 4.
* ``cross_entropy.exp`` (``calculate_predicted_logits``): ``logits -= max`` in place, the
  target logit gathered, ``exp`` into the same buffer, the row sum: 4 + 4.
* ``cross_entropy.norm`` (``calculate_cross_entropy_loss``): ``exp_logits.div_(sum)``, the
  softmax it saves for backward: 4 + 4.
* backward, ``cross_entropy.bwd`` (``calculate_gradients``): ``softmax[target] -= 1``,
  ``*= grad``, ``.to(torch.bfloat16)``: reads the saved softmax, writes it back (an in-place
  update of a graph input, which torch.compile keeps) and the BF16 logit gradient: 4 + 6.

Forward 22 B and backward 10 B per logit at BF16 (the unfused path, ``.float()``, ``max``,
``sub_``, ``exp``, ``sum``, ``div_`` and ``mul_``, ``.to`` as separate kernels, would move 38 +
14 B). Left out, each under 0.01 % of a pass's bytes: the per-row vectors (max, sum, targets,
the gathered logit: 4-8 B per row) and, at tp > 1, the two all-reduces of them
(``rows × 4`` and ``rows × 8`` bytes). The loss is written in FP32, ``rows × 4`` bytes.
"""

from __future__ import annotations

from .ops import VectorOp

#: Bytes of an FP32 logit: ``calculate_logits_max`` casts the logits with ``.float()``.
FP32_BYTES = 4
#: Bytes of the logit gradient: ``calculate_gradients`` returns ``.to(torch.bfloat16)``.
GRAD_BYTES = 2

#: ``(name, read bytes per logit: "a" = the logits' own width, write bytes per logit, ALU ops
#: per logit)`` of the forward passes (module docstring) [S: fused_cross_entropy.py above;
#: the ALU counts are the operations each function runs: cast + max, subtract + exp + sum,
#: divide].
FORWARD_PASSES = (("cross_entropy.max", "a", FP32_BYTES, 2.0),
                  ("cross_entropy.exp", FP32_BYTES, FP32_BYTES, 3.0),
                  ("cross_entropy.norm", FP32_BYTES, FP32_BYTES, 1.0))
#: The backward pass: reads the saved softmax, writes it back and the BF16 gradient; one-hot
#: subtract (one element per row), multiply, cast.
BACKWARD_PASS = ("cross_entropy.bwd", FP32_BYTES, FP32_BYTES + GRAD_BYTES, 2.0)

#: Tag of every loss pass; the pass that saves the softmax also carries ``"saved"``.
TAG = "loss"


def forward_ops(rows: int, vocab: int, a_bytes: float) -> list[VectorOp]:
    """The forward passes over ``rows × vocab`` logits of ``a_bytes`` each (module table),
    computed in FP32 (their dtype: no output of theirs is a block-scaled activation);
    the last also writes the FP32 loss (``rows × 4`` bytes) and is the one that saves the
    softmax (tag ``"saved"``: :func:`~diptych.workloads.memory.saved_bytes` counts what it
    reads, the FP32 buffer it normalises in place)."""
    n = rows * vocab
    out = []
    for i, (name, rd, wr, ops) in enumerate(FORWARD_PASSES):
        last = i == len(FORWARD_PASSES) - 1
        out.append(VectorOp(name=name, kind="softmax", elements=n, ops_per_element=ops,
                            read_bytes=n * (a_bytes if rd == "a" else rd),
                            write_bytes=n * wr + (rows * FP32_BYTES if last else 0.0),
                            dtype="fp32", tags=(TAG, "saved") if last else (TAG,)))
    return out


def backward_ops(op: VectorOp) -> list[VectorOp]:
    """The backward of forward pass ``op``: the one gradient kernel for the pass that saved
    the softmax (it also reads the loss's gradient, one FP32 per row), nothing for the
    others (their gradient is that kernel's)."""
    if "saved" not in op.tags:
        return []
    name, rd, wr, ops = BACKWARD_PASS
    n = op.elements
    d_loss = op.write_bytes - n * FP32_BYTES      # the loss's gradient, one FP32 per row
    return [VectorOp(name=name, kind="softmax", elements=n, ops_per_element=ops,
                     read_bytes=n * rd + d_loss, write_bytes=n * wr, dtype=op.dtype,
                     tags=(TAG, "bwd"))]
