"""The token embedding's weight gradient as PyTorch and the optimizer run it: whole-table
passes per micro-batch, beside the scatter of the tokens' row gradients.

* ``embed_tokens.bwd.zero``: PyTorch's embedding backward allocates the table's gradient as
  zeros and scatters the tokens' rows into it, so every backward writes the whole (vocab ÷ tp)
  × d table once [S: pytorch/pytorch aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu
  ``embedding_backward_cuda_kernel``: ``grad_weight = at::zeros({num_weights,
  grad.size(-1)}, grad.options())``; Megatron-Core's ``VocabParallelEmbedding`` looks rows up
  with ``F.embedding`` unless ``deterministic_mode`` (NVIDIA/Megatron-LM core_r0.9.0 @1afee592
  megatron/core/tensor_parallel/layers.py), which the published runs leave off].
* ``embed_tokens.bwd.accumulate``: the embedding is no Transformer Engine linear, so its
  gradient does not go through the fused weight-gradient accumulation; the fresh table
  gradient is added to the accumulated one, reading both and writing the sum, once per
  micro-batch [S: NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py
  ``_grad_copy``: ``grad_out.add_(grad_in)`` into the gradient bucket, then ``param.grad =
  None``; NeMo 24.09's ``distributed_fused_adam`` (dgxc-benchmarking 35a9aec
  llama3.1/llama3.1_8b.yaml ``optim.name``); without it, autograd's AccumulateGrad adds into
  ``param.grad`` with the same bytes].

Between them the scatter: the tokens' row gradients added into their rows. All three are
memory-bound streams, timed at the vector unit's memory rate like every other vector op.
"""

from __future__ import annotations

from .ops import VectorOp

#: Tag of the lookup whose backward adds these passes.
TAG = "vocab_table"


def table_grad_ops(lookup: VectorOp, elements: float,
                   g_bytes: float) -> tuple[VectorOp, VectorOp, VectorOp]:
    """``(zero, scatter, accumulate)``: the backward of token lookup ``lookup`` over a table
    of ``elements`` weights, its gradient ``g_bytes`` per element (PyTorch zeroes it in the
    row gradients' dtype and the bucket holds ``grad_sync_dtype``: BF16 both in the published
    runs, the gradients' width here). ``zero``: the whole gradient written; ``scatter``: the
    tokens' row gradients (what the lookup wrote) added into their rows (one gradient row per
    token); ``accumulate``: the table's gradient added into the accumulated one (reads both,
    writes the sum). The zero and the sum are labelled FP32 (the add's registers): under a
    block-scaled gradient dtype (MXFP8 training) their bytes are the gradient's, but no
    output quantisation is charged for them [assumption]."""
    n = max(1, int(round(elements)))
    zero = VectorOp(name=f"{lookup.name}.bwd.zero", kind="copy", elements=n,
                    ops_per_element=0.0, read_bytes=0.0, write_bytes=n * g_bytes,
                    dtype="fp32", tags=(TAG, "bwd"))
    scatter = VectorOp(name=f"{lookup.name}.bwd", kind="embedding", elements=lookup.elements,
                       ops_per_element=1.0, read_bytes=lookup.write_bytes,
                       write_bytes=lookup.elements * g_bytes, dtype=lookup.dtype,
                       tags=(TAG, "bwd"))
    acc = VectorOp(name=f"{lookup.name}.bwd.accumulate", kind="add", elements=n,
                   ops_per_element=1.0, read_bytes=2 * n * g_bytes, write_bytes=n * g_bytes,
                   dtype="fp32", tags=(TAG, "bwd"))
    return zero, scatter, acc
