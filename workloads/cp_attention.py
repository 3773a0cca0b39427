"""Context parallelism's bookkeeping outside the attention kernels, as Transformer Engine's
ring attention runs it in training: the copies, the merge of each ring step's partial output
and the accumulation of each step's gradients (one :class:`RingMerge` record after a layer's
fused attention, its backward before the attention's backward).

[S: NVIDIA/TransformerEngine v1.10 @08a85d3b transformer_engine/pytorch/attention.py
``AttnFuncWithCPAndKVP2P`` (``cp_comm_type="p2p"``, TE's default; Megatron-Core core_r0.9.0
sets no other), the causal ``sbhd`` path with fused attention in BF16, as Megatron-Core runs
it; the same operations in v1.11. ``flash_attn_fwd_out_correction`` is a ``jit_fuser``
function (``torch.compile``): one kernel reading the step's partial output and reading and
writing the output. Read from the code, not profiled; [assumption] the nemo:24.09 image
behind the Llama 3.1 rows runs a TE of the 1.10-1.11 line.] One record holds the forward
passes after the kernels, though the K/V copy precedes them (the same bytes on the same
stream: an ordering approximation).

Per layer and micro-batch, rank ``r`` of ``cp`` (its load-balanced chunks: the first and last
of ``2·cp``), with ``q``/``o``: the bytes of its Q and of its output (O, dO, dQ have Q's or O's
size), ``kv``: its K and V bytes together; each pass reads and writes (a half pass: half):

Forward (the attention kernels of the ``cp`` steps run between these):

* ``torch.cat((k, v))`` into the first P2P buffer: reads and writes ``kv``;
* each step ``i = 1 … cp−1`` before the rank's own turn (``i ≤ r``) reads the first half of
  the received K/V (``kv[0].contiguous()``), after it the second half of Q
  (``q[1].contiguous()``): ``kv/2`` or ``q/2`` read and written;
* ``out = torch.zeros_like(q)``: ``o`` written;
* ``flash_attn_fwd_out_correction`` per step: the step's partial output read, the output read
  and written: ``3·o``, half of it for a step that covered half the queries (``i > r``).

Backward:

* ``p2p_comm_buffers[0][0].copy_(kv)``: ``kv`` read and written;
* per step ``i`` (``cp − 1``: the rank's own chunk, views only): the K/V half
  (``i ≥ cp − r − 1``) or the Q, O and dO halves made contiguous;
* ``dq``: each step's dQ copied or added (``dq.copy_``, ``dq.add_``, on the whole or the
  second half, by the branches of the code);
* ``torch.cat((dk_, dv_))`` of each step's K/V gradient, then added or copied into the
  ring's dK/dV buffer (whole or first half).

Left out, each under 1 % of these bytes: the softmax statistics' corrections and reshapes (4-8
bytes per query row and head), the P2P transfers themselves (the ring's collective, timed as
the layer's K/V all-gather), launches. The ranks run the ring in step, so the record charges
the busiest rank's bytes (:func:`busiest`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import VectorOp

#: Tag of the record.
TAG = "cp_merge"


def _half(nbytes: float) -> tuple[float, float]:
    """(read, write) of a copy of half a tensor of ``nbytes``."""
    return nbytes / 2, nbytes / 2


def forward_bytes(cp: int, r: int, q: float, o: float, kv: float) -> tuple[float, float]:
    """(read, write) bytes of rank ``r``'s forward passes (module docstring)."""
    rd, wr = kv, kv                                   # cat(k, v) into the P2P buffer
    for i in range(1, cp):
        a, b = _half(kv if i <= r else q)             # kv[0] / q[1] .contiguous()
        rd, wr = rd + a, wr + b
    wr += o                                           # out = zeros_like(q)
    for i in range(cp):                               # out += o_i · exp(lse_i − lse)
        f = 1.0 if i <= r else 0.5
        rd, wr = rd + 2 * o * f, wr + o * f
    return rd, wr


def backward_bytes(cp: int, r: int, q: float, o: float, kv: float) -> tuple[float, float]:
    """(read, write) bytes of rank ``r``'s backward passes (module docstring)."""
    rd, wr = kv, kv                                   # p2p_comm_buffers[0][0].copy_(kv)
    for i in range(cp):
        own = cp - r - 1
        if i == cp - 1:
            pass                                      # its own chunk: views
        elif i >= own:
            a, b = _half(kv)                          # kv[0].contiguous()
            rd, wr = rd + a, wr + b
        else:                                         # q[1], out[1], dout[1] .contiguous()
            rd, wr = rd + q / 2 + o, wr + q / 2 + o
        # dq
        if i > own:
            rd, wr = rd + 2 * q, wr + q               # dq.add_(dq_)
        elif i == own:
            if r == cp - 1:
                rd, wr = rd + q, wr + q               # dq.copy_(dq_)
            else:                                     # dq[0].copy_, dq[1].add_
                rd, wr = rd + q / 2 + q, wr + q
        elif i > 0:
            rd, wr = rd + q, wr + q / 2               # dq[1].add_(dq_)
        else:
            rd, wr = rd + q / 2, wr + q / 2           # dq[1].copy_(dq_)
        # dkv_ = cat(dk_, dv_): the step's K/V gradient, whole or the first half
        step_kv = kv if (i == cp - 1 or i < own) else kv / 2
        rd, wr = rd + step_kv, wr + step_kv
        if i == cp - 1:
            if r == 0:                                # dkv[0].add_, dkv[1].copy_
                rd, wr = rd + kv + kv / 2, wr + kv
            else:
                rd, wr = rd + 2 * kv, wr + kv         # dkv.add_(dkv_)
        elif i >= own:
            if i == 0 and r == cp - 1:
                rd, wr = rd + kv / 2, wr + kv / 2     # dkv[0].copy_(dkv_)
            else:
                rd, wr = rd + kv, wr + kv / 2         # dkv[0].add_(dkv_)
        elif i > 0:
            rd, wr = rd + 2 * kv, wr + kv             # dkv.add_(dkv_)
        else:
            rd, wr = rd + kv, wr + kv                 # dkv.copy_(dkv_)
    return rd, wr


def busiest(fn, cp: int, q: float, o: float, kv: float) -> tuple[float, float]:
    """``fn``'s (read, write) of the rank that moves the most bytes."""
    return max((fn(cp, r, q, o, kv) for r in range(cp)), key=lambda x: (x[0] + x[1], x))


@dataclass(frozen=True, kw_only=True)
class RingMerge(VectorOp):
    """The forward bookkeeping of a layer's ring attention (module docstring), with the bytes
    of its backward (``bwd_read_bytes``, ``bwd_write_bytes``) for :meth:`backward`."""

    bwd_read_bytes: float = 0.0
    bwd_write_bytes: float = 0.0

    def backward(self) -> VectorOp:
        """The backward passes as one vector op."""
        return VectorOp(name=f"{self.name}.bwd", kind="add", elements=self.elements,
                        ops_per_element=1.0, read_bytes=self.bwd_read_bytes,
                        write_bytes=self.bwd_write_bytes, dtype=self.dtype,
                        tags=self.tags + ("bwd",))


def merge_op(cp: int, q: float, o: float, kv: float, o_elements: int,
             dtype: str = "bf16") -> RingMerge:
    """The record of one layer's ring-attention bookkeeping at ``cp`` ranks (``q``, ``o``,
    ``kv``: the rank's Q, output and K+V bytes; ``o_elements``: its output's elements, whose
    merge is the record's arithmetic)."""
    rd, wr = busiest(forward_bytes, cp, q, o, kv)
    brd, bwr = busiest(backward_bytes, cp, q, o, kv)
    return RingMerge(name="attention.cp_merge", kind="add", elements=max(1, o_elements),
                     ops_per_element=3.0, read_bytes=rd, write_bytes=wr, dtype=dtype,
                     tags=(TAG,), bwd_read_bytes=brd, bwd_write_bytes=bwr)
