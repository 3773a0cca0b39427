"""Mamba-2, the state-space mixer of Falcon-H1's hybrid layers, lowered to ops for one
tensor-parallel rank.

A Mamba-2 mixer [M: transformers models/falcon_h1 ``FalconH1Mixer``; S: Dao and Gu, "Transformers
are SSMs", arXiv:2405.21060] projects the normed input (``in_proj``) to the gate z
(``d_ssm = H·P``), x (``d_ssm``), B and C (``G`` groups of ``N``) and ``dt`` (one per head);
runs a depthwise causal conv (``kernel`` taps, SiLU) over x, B, C; and runs the selective
state-space recurrence per head with a ``P × N`` state ``S`` per sequence::

    S_t = exp(dt_t·A) S_{t−1} + dt_t x_t B_tᵀ,   y_t = S_t C_t + D x_t

then ``y · SiLU(z)`` (RMS-normed first when ``mamba_rms_norm``) and ``out_proj``. In Falcon-H1
the mixer runs in parallel with the layer's attention on the same normed input; their
outputs are summed into the residual (in the all-reduce and residual add, as the shared
experts' output is, :func:`~diptych.workloads.lower.layer_ops`).

What the ops model:

* **Decode**: ``mamba_ssm``'s ``selective_state_update``, on the vector lanes: per token and
  head ``5·P·N`` ALU ops (:data:`RECURRENT_OPS_PER_STATE_ELEMENT`), each sequence's state read
  once and written once per step: a cost independent of the context. The conv reads and
  writes its ``kernel − 1`` cached inputs per sequence.
* **Prefill and training**: the chunked SSD algorithm of ``mamba_chunk_scan_combined``
  [S: state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py: ``_bmm_chunk_fwd``,
  ``_chunk_state_fwd``, ``_state_passing_fwd``, ``_chunk_scan_fwd``] in chunks of
  ``ssm_chunk_size`` tokens (the last computed whole): per chunk ``ssm_cb`` (``C Bᵀ``, C²·N
  MACs per group), ``ssm_chunk_state`` (``Bᵀ X``, C·N·P per head), ``ssm_state_pass`` (the
  sequential pass over chunks on the vector lanes, 2 ops per state element), ``ssm_scan``
  (``[C, CBᵀ∘L]·[S; X]``, C·(N + C)·P per head). Backward derived op by op (2× forward).

The per-sequence ops (:data:`CORE_OPS`) are a serving step's cores. This module knows nothing
of :mod:`~diptych.workloads.lower` (it takes its ``_Ctx``).
"""

from __future__ import annotations

import math

from ..arch.dtypes import dtype_bytes
from .causal_conv import causal_conv
from .dataflow import NOFLOW
from .ops import Op, VectorOp

#: ALU ops per state element per token of the recurrent (decode) update [assumption: counted
#: from the recurrence: the decay multiply (1), ``dt·x·Bᵀ`` added (multiply-add, 2), ``S C``
#: (multiply-add, 2); the per-head ``exp(dt·A)``, softplus of dt and ``D x`` are O(P)].
RECURRENT_OPS_PER_STATE_ELEMENT = 5.0
#: ALU ops per output of the gate: ``y · SiLU(z)`` (SiLU 4, product 1), plus an RMSNorm (4)
#: when the mixer norms ``y`` first.
GATE_OPS, NORM_OPS = 5.0, 4.0
#: ALU ops per state element of the pass over chunks (decay and add).
STATE_PASS_OPS = 2.0

#: The per-sequence ops of a Mamba-2 mixer.
CORE_OPS = frozenset({"ssm_conv1d", "ssm_recurrent", "ssm_cb", "ssm_chunk_state",
                      "ssm_state_pass", "ssm_scan"})


def shapes(m, tp: int) -> dict:
    """One rank's Mamba-2 widths: heads ``h``, head width ``p``, state ``n``, groups ``g``
    (split over ranks when they divide, else replicated: one group serves every head),
    ``d_ssm``, the conv's channels and ``in_proj``'s outputs (z, x, B, C, dt)."""
    h, p, n = m.ssm_heads // tp, m.ssm_head_dim, m.ssm_state_size
    g = m.ssm_groups // tp if m.ssm_groups % tp == 0 else m.ssm_groups
    d_ssm = h * p
    conv = d_ssm + 2 * g * n
    return {"h": h, "p": p, "n": n, "g": g, "d_ssm": d_ssm, "conv": conv,
            "in": d_ssm + conv + h}


def ssm_mixer(c, *, flow=None, inp: str = "h_attn", out: str = "ssm_out") -> list[Op]:
    """The Mamba-2 mixer of context ``c`` reading the normed input ``inp`` and writing
    ``out`` (module docstring); the state a sequence carries is ``ssm_conv_state`` /
    ``ssm_state`` (read, kind ``kv_cache``) and ``..._new`` (written)."""
    m, T, B, q = c.m, c.tokens, c.batch, c.q_len
    d = m.hidden_size
    s = shapes(m, c.tp)
    h, p, n, g, d_ssm, conv, w_in = (s[k] for k in ("h", "p", "n", "g", "d_ssm", "conv", "in"))
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    inference = c.phase != "train"
    reads_state = c.phase == "decode" or (inference and c.past > 0)

    proj = c.gemm("in_proj_ssm", T, d, w_in, tags=("attn",))
    fl.gemm(proj, [(inp, 1.0)], [(fl.t("w_in_proj_ssm", d * w_in * wb, "weight"), 1.0)],
            [(fl.t("ssm_in", T * w_in * a), 1.0)])
    ops: list[Op] = [proj]
    ops.append(causal_conv(c, fl, name="ssm_conv1d", prefix="ssm_", channels=conv,
                           src=[("ssm_in", conv / w_in)], out="ssm_xbc", bias=m.ssm_conv_bias))

    state = B * h * p * n * dtype_bytes(m.state_dtype)
    if c.phase == "decode":
        rec = VectorOp(name="ssm_recurrent", kind="mul", elements=B * h * p * n * q,
                       ops_per_element=RECURRENT_OPS_PER_STATE_ELEMENT,
                       read_bytes=T * conv * a + T * h * a + state,
                       write_bytes=T * d_ssm * a + state, dtype=c.p.activations,
                       tags=("state",))
        fl.vec(rec, [("ssm_xbc", 1.0), ("ssm_in", h / w_in),
                     (fl.t("ssm_state", state, "kv_cache"), 1.0)],
               [(fl.t("ssm_y", T * d_ssm * a), 1.0),
                (fl.t("ssm_state_new", state, "kv_cache", live_out=True), 1.0)])
        ops.append(rec)
    else:
        ops += _chunked(c, s, fl, state if inference else 0.0, reads_state)

    norm = NORM_OPS if m.ssm_rms_norm else 0.0
    nw = d_ssm * c.p.uw_bytes if m.ssm_rms_norm else 0.0     # (no recipe quantises it)
    gate = c.vec("ssm_gate", "mul", T * d_ssm, reads=2.0, extra_read_bytes=nw,
                 ops=GATE_OPS + norm, tags=("saved",))
    rd = [("ssm_y", 1.0), ("ssm_in", d_ssm / w_in)]
    if nw:
        rd.append((fl.t("w_ssm_norm", nw, "weight"), 1.0))
    fl.vec(gate, rd, [(fl.t("ssm_gated", T * d_ssm * a), 1.0)])
    o = c.gemm("out_proj_ssm", T, d_ssm, d, tags=("attn",))
    fl.gemm(o, [("ssm_gated", 1.0)], [(fl.t("w_out_proj_ssm", d_ssm * d * wb, "weight"), 1.0)],
            [(fl.t(out, T * d * a), 1.0)])
    return ops + [gate, o]


def _chunked(c, s: dict, fl, state: float, reads_state: bool) -> list[Op]:
    """The chunked SSD of prefill and training (module docstring), reading ``ssm_xbc`` (x, B,
    C in that order), writing ``ssm_y``; ``state``: bytes of the final state an inference pass
    stores (and reads first when ``reads_state``)."""
    T, B, q = c.tokens, c.batch, c.q_len
    h, p, n, g, d_ssm, conv = (s[k] for k in ("h", "p", "n", "g", "d_ssm", "conv"))
    a = c.p.a_bytes
    C = c.m.ssm_chunk_size
    k = math.ceil(q / C)                      # chunks per sequence (the last one padded)
    Gh, Gg = B * h * k, B * g * k             # (sequence, head|group, chunk) products
    pad = k * C / q
    x = [("ssm_xbc", pad * d_ssm / conv)]
    b_ = [("ssm_xbc", pad * g * n / conv)]    # B, read once per group ...
    cc = [("ssm_xbc", pad * g * n / conv)]    # ... and C
    per_head = h / g                          # heads each group's B and C serve
    ops: list[Op] = []

    def gemm(name, m_, k_, n_, batch, A, Bp, out, out_bytes, share=1.0):
        op = c.gemm(name, m_, k_, n_, batch=batch, weight=False, tags=("attn", "ssm"),
                    shared_b=False)
        fl.gemm(op, A, Bp, [(fl.t(out, out_bytes), share)], deps=("ssm_in",))
        ops.append(op)

    gemm("ssm_cb", C, n, C, Gg, cc, b_, "ssm_CB", Gg * C * C * a)
    gemm("ssm_chunk_state", n, C, p, Gh, [(t, f * per_head) for t, f in b_], x,
         "ssm_states", Gh * n * p * a)
    init = state if reads_state else 0.0
    sp = VectorOp(name="ssm_state_pass", kind="mul", elements=Gh * n * p,
                  ops_per_element=STATE_PASS_OPS, read_bytes=Gh * n * p * a + init,
                  write_bytes=Gh * n * p * a + state, dtype=c.p.activations,
                  tags=("state",) if state else ())
    rd = [("ssm_states", 1.0)]
    if init:
        rd.append((fl.t("ssm_state", init, "kv_cache"), 1.0))
    wr = [(fl.t("ssm_states_prev", Gh * n * p * a), 1.0)]
    if state:
        wr.append((fl.t("ssm_state_new", state, "kv_cache", live_out=True), 1.0))
    fl.vec(sp, rd, wr)
    ops.append(sp)
    gemm("ssm_scan", C, n + C, p, Gh, [(t, f * per_head) for t, f in cc]
         + [("ssm_CB", per_head)], [("ssm_states_prev", 1.0)] + x, "ssm_y", T * d_ssm * a, pad)
    return ops
