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

Forward 22 B and backward 10 B per logit at BF16. Left out, each under 0.01 % of a pass's
bytes: the per-row vectors (max, sum, targets, the gathered logit: 4-8 B per row) and, at
tp > 1, the two all-reduces of them (``rows × 4`` and ``rows × 8`` bytes). The loss is written
in FP32, ``rows × 4`` bytes.

**The unfused path** (``"unfused"``, :data:`IMPLEMENTATIONS`): without
``cross_entropy_loss_fusion`` (Megatron-Core's default, ``False``: core_r0.9.0
megatron/core/model_parallel_config.py; NeMo 24.09 ``build_transformer_config`` takes the
TransformerConfig default for a field its model config does not set) the same operations run
eagerly, one PyTorch kernel each [S: core_r0.9.0 tensor_parallel/cross_entropy.py
``VocabParallelCrossEntropy``; core_v0.7.0 @a645f896 (NeMo 24.05) computes the same with
``logits.float()`` in ``compute_language_model_loss`` and an out-of-place subtraction, the
same bytes]:

* ``cross_entropy.cast`` (``.float()``): a + 4; ``cross_entropy.max`` (``torch.max(dim=-1)``):
  4 read, the row max written (4 B per row); ``cross_entropy.sub`` (``-= logits_max``): 4 + 4;
  ``cross_entropy.exp`` (``torch.exp(out=)``): 4 + 4; ``cross_entropy.sum``: 4 read, the
  row sum written (4 B per row); ``cross_entropy.div`` (``div_``, the saved softmax): 4 + 4
  and the FP32 loss per row.
* backward: ``cross_entropy.bwd`` (``grad_input.mul_(grad_output)``): 4 + 4 and the loss's
  gradient per row; ``cross_entropy.cast.bwd`` (autograd's ``.float()`` backward, the cast to
  BF16): 4 + 2.

Forward 38 B and backward 14 B per logit at BF16, 52 in all (20 more than fused). The per-row
target bookkeeping (mask, clone, the gathered logit, the one-hot ``-=`` of the backward:
a handful of kernels over ``rows`` elements each) is left out like the fused path's
(under 0.01 % of the bytes; their launches, a few microseconds each, are not charged either).
Which recipe runs which path is the run's choice (``Scenario.cross_entropy``, ``diptych run
--cross-entropy``); the published configs benchmarks/validate_system.py reproduces say which.
"""

from __future__ import annotations

from .dropout import TAG as DROPOUT_TAG
from .ops import BACKWARD_TAG, VectorOp

#: Bytes of an FP32 logit: ``calculate_logits_max`` casts the logits with ``.float()``.
FP32_BYTES = 4
#: Bytes of the logit gradient: ``calculate_gradients`` returns ``.to(torch.bfloat16)``.
GRAD_BYTES = 2

#: The loss implementations a training run may name: Megatron-Core's fused cross-entropy
#: (``cross_entropy_loss_fusion: true``) and its eager, unfused one (module docstring).
IMPLEMENTATIONS: tuple[str, ...] = ("fused", "unfused")
#: What a run charges unless it names one: the fused path, as the Llama 3.1 configs set it
#: (NVIDIA/dgxc-benchmarking 35a9aec llama3.1/llama3.1_8b.yaml, ``cross_entropy_loss_fusion:
#: true``), the runs this loss model was first checked on.
DEFAULT = "fused"

#: ``(name, kind, read bytes per logit: "a" = the logits' own width, write bytes per logit,
#: bytes written per row, ALU ops per logit, the tensor it writes: an FP32 buffer over the
#: logits, or a row reduction's vector)`` of each implementation's forward passes
#: (module docstring) [S: fused_cross_entropy.py and cross_entropy.py above; the ALU counts
#: are the operations each runs: cast + max, subtract + exp + sum, divide]. The last pass
#: saves the softmax and also writes the FP32 loss per row.
FORWARD_PASSES = {
    "fused": (("cross_entropy.max", "softmax", "a", FP32_BYTES, 0, 2.0, "ce_logits"),
              ("cross_entropy.exp", "softmax", FP32_BYTES, FP32_BYTES, 0, 3.0, "ce_exp"),
              ("cross_entropy.norm", "softmax", FP32_BYTES, FP32_BYTES, 0, 1.0, "ce_softmax")),
    "unfused": (("cross_entropy.cast", "copy", "a", FP32_BYTES, 0, 1.0, "ce_logits"),
                ("cross_entropy.max", "softmax", FP32_BYTES, 0, FP32_BYTES, 1.0, "ce_max"),
                ("cross_entropy.sub", "softmax", FP32_BYTES, FP32_BYTES, 0, 1.0, "ce_shifted"),
                ("cross_entropy.exp", "softmax", FP32_BYTES, FP32_BYTES, 0, 1.0, "ce_exp"),
                ("cross_entropy.sum", "softmax", FP32_BYTES, 0, FP32_BYTES, 1.0, "ce_sum"),
                ("cross_entropy.div", "softmax", FP32_BYTES, FP32_BYTES, 0, 1.0, "ce_softmax")),
}
#: The backward kernels of each implementation, ``(name, kind, read bytes per logit, write
#: bytes per logit, ALU ops per logit)``: the first reads the saved softmax and the loss's
#: gradient (one FP32 per row); fused: one-hot subtract, multiply, cast in one kernel (writes
#: the softmax back and the BF16 gradient); unfused: the multiply in place, then the cast.
BACKWARD_PASSES = {
    "fused": (("cross_entropy.bwd", "softmax", FP32_BYTES, FP32_BYTES + GRAD_BYTES, 2.0),),
    "unfused": (("cross_entropy.bwd", "softmax", FP32_BYTES, FP32_BYTES, 1.0),
                ("cross_entropy.cast.bwd", "copy", FP32_BYTES, GRAD_BYTES, 1.0)),
}

#: The implementation whose last forward pass (the one that saves the softmax) is named so.
SAVED_BY = {passes[-1][0]: impl for impl, passes in FORWARD_PASSES.items()}


def check_implementation(impl) -> str:
    """``impl`` if it is one of :data:`IMPLEMENTATIONS`, else ValueError naming it."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"cross_entropy must be one of {', '.join(IMPLEMENTATIONS)}, "
                         f"not {impl!r}")
    return impl


#: Tag of every loss pass, beside its implementation's name (:data:`IMPLEMENTATIONS`: a
#: stack's kernels of the two paths stream at their own rates, sim/vector.py); the pass that
#: saves the softmax also carries ``"saved"``.
TAG = "loss"
#: The tags that may change a vector op's rate (sim/vector.py ``stream_fraction`` reads
#: them): the direction, the LM loss's passes with their implementation, and a dropout's
#: (workloads/dropout.py). A vector op's result is keyed on these tags and no others
#: (sim/api.py).
RATE_TAGS = frozenset((BACKWARD_TAG, TAG, DROPOUT_TAG, *IMPLEMENTATIONS))


def implementation_of(tags) -> str | None:
    """The loss implementation a pass with ``tags`` belongs to (:data:`IMPLEMENTATIONS`), or
    None for an op that is not a loss pass."""
    if TAG not in tags:
        return None
    return next((t for t in tags if t in IMPLEMENTATIONS), None)


def forward_ops(rows: int, vocab: int, a_bytes: float,
                impl: str = DEFAULT) -> list[VectorOp]:
    """The forward passes of implementation ``impl`` (:data:`FORWARD_PASSES`) over ``rows ×
    vocab`` logits of ``a_bytes`` each, computed in FP32 (their dtype: no output of theirs is
    a block-scaled activation); the last also writes the FP32 loss (``rows × 4`` bytes) and
    is the one that saves the softmax (tag ``"saved"``: :func:`~diptych.workloads.memory.\
saved_bytes` counts what it reads, the FP32 buffer it normalises in place)."""
    n = rows * vocab
    passes = FORWARD_PASSES[check_implementation(impl)]
    out = []
    for i, (name, kind, rd, wr, row_wr, ops, _) in enumerate(passes):
        last = i == len(passes) - 1
        out.append(VectorOp(name=name, kind=kind, elements=n, ops_per_element=ops,
                            read_bytes=n * (a_bytes if rd == "a" else rd),
                            write_bytes=n * wr + rows * (row_wr + (FP32_BYTES if last else 0)),
                            dtype="fp32", tags=(TAG, impl, "saved") if last else (TAG, impl)))
    return out


def outputs(impl: str = DEFAULT) -> tuple[tuple[str, bool], ...]:
    """``(tensor, row)`` of each forward pass of ``impl`` in order (:data:`FORWARD_PASSES`):
    the tensor it writes and whether it is a row reduction's vector (no buffer over the
    logits)."""
    return tuple((p[-1], p[3] == 0) for p in FORWARD_PASSES[check_implementation(impl)])


def backward_ops(op: VectorOp) -> list[VectorOp]:
    """The backward of forward pass ``op``: the gradient kernels of its implementation
    (:data:`BACKWARD_PASSES`) for the pass that saved the softmax (the first also reads the
    loss's gradient, one FP32 per row), nothing for the others (their gradient is those
    kernels')."""
    if "saved" not in op.tags:
        return []
    impl = SAVED_BY[op.name]
    n = op.elements
    d_loss = op.write_bytes - n * FP32_BYTES      # the loss's gradient, one FP32 per row
    return [VectorOp(name=name, kind=kind, elements=n, ops_per_element=ops,
                     read_bytes=n * rd + (d_loss if i == 0 else 0.0), write_bytes=n * wr,
                     dtype=op.dtype, tags=(TAG, impl, "bwd"))
            for i, (name, kind, rd, wr, ops) in enumerate(BACKWARD_PASSES[impl])]
