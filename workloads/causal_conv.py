"""The depthwise causal conv (with SiLU) that linear-attention and state-space mixers run
before their recurrence, and the per-sequence state it carries.

Gated DeltaNet (Qwen3-Next) convolves q/k/v, Mamba-2 (Falcon-H1) x/B/C, each channel with its
own ``kernel`` taps [M: transformers models/qwen3_next, models/falcon_h1;
``causal_conv1d_fn`` / ``causal_conv1d_update``]. A sequence keeps the last ``kernel − 1``
inputs of every channel (in the activations' dtype) as state: a step after a past reads them
and an inference pass writes the new ones, bytes that do not depend on the context.
"""

from __future__ import annotations

from .dataflow import Pieces
from .ops import VectorOp

#: ALU ops per output: a multiply-add per tap (2 each) and SiLU (4).
SILU_OPS = 4.0


def causal_conv(c, fl, *, name: str, prefix: str, channels: int, src: Pieces, out: str,
                bias: bool = False) -> VectorOp:
    """The conv of context ``c`` over ``channels`` channels (per rank) of the pieces ``src``
    (``T × channels`` elements), recorded in flow ``fl``: it reads ``w_<name>`` (taps and
    bias) and, after a past or in decode, the sequences' ``<prefix>conv_state`` (kind
    ``kv_cache``); writes ``out`` and, in inference, ``<prefix>conv_state_new``. Tagged
    ``state`` when it moves a state (left out of the peak working set)."""
    T, B, a, wb = c.tokens, c.batch, c.p.a_bytes, c.p.uw_bytes   # (no recipe quantises it)
    kernel = c.m.linear_conv_kernel if c.layer.linear else c.m.ssm_conv_kernel
    inference = c.phase != "train"
    state = B * channels * (kernel - 1) * a
    s_in = state if c.phase == "decode" or (inference and c.past > 0) else 0.0
    s_out = state if inference else 0.0
    weights = channels * kernel * wb + (channels * wb if bias else 0.0)
    op = VectorOp(name=name, kind="mul", elements=T * channels,
                  ops_per_element=2.0 * kernel + SILU_OPS,
                  read_bytes=T * channels * a + weights + s_in,
                  write_bytes=T * channels * a + s_out, dtype=c.p.activations,
                  tags=("saved", "state") if inference else ("saved",))
    reads = list(src) + [(fl.t(f"w_{name}", weights, "weight"), 1.0)]
    if s_in:
        reads.append((fl.t(f"{prefix}conv_state", s_in, "kv_cache"), 1.0))
    writes = [(fl.t(out, T * channels * a), 1.0)]
    if s_out:
        writes.append((fl.t(f"{prefix}conv_state_new", s_out, "kv_cache", live_out=True), 1.0))
    return fl.vec(op, reads, writes)
