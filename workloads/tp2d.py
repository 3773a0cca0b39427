"""The 2-D weight-stationary tensor-parallel layout of the FFN (inference on a torus).

[S: Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023 (arXiv 2211.05102),
§3.2.2 and Figure 2(b)] Each FFN weight ``E × F`` is split over both dimensions of an
``X × YZ`` grid of the ``n = X·YZ`` chips: ``E`` (d_model) over the ``X`` axis, ``F`` (d_ff)
over the ``YZ`` axes, so every chip holds an ``E/X × F/YZ`` block. The residual stream lives
fully sharded (``BLE_xyz``, ``1/n`` of the activations on each chip). Per layer:

1. all-gather over ``YZ`` of the normed input: ``BLE_xyz → BLE_x`` (``T·E/X`` elements);
2. ``W_in`` (``E/X × F/YZ``): partial sums over ``x``, reduce-scattered over ``X``
   (``T·F/YZ`` elements; both halves of a gated MLP's ``gate_up``);
3. the activation on ``1/n`` of ``T·F``;
4. all-gather over ``X``: ``BLF_yz`` (``T·F/YZ`` elements);
5. ``W_out`` (``F/YZ × E/X``): partial sums over ``yz``, reduce-scattered over ``YZ`` back
   to ``BLE_xyz`` (``T·E/X`` elements).

The bytes each chip sends, ``≈ 2·T·E/X + 2·T·F/YZ``, are smallest at ``X = √(n·E/F)``:
with ``F = 4E``, ``X = √n/2``, ``YZ = 2√n`` and ``8·T·E/√n`` (the paper's
``T_comm = 8BLE / (√n · network bandwidth)``), against the 1-D layout's ``≈ 2·T·E``
whatever ``n``. The ``X`` axis is one side of the torus slice that holds the group, ``YZ``
the others (the paper's ``E_x F_yz``), so each collective runs over the links of the
dimensions it spans.

In scope: the dense FFN (decode and prefill) and GQA/MQA attention, its projections split
the same way with the heads in place of d_ff over ``YZ`` and the batch over ``X``
(``workloads.lower._attention_2d`` [assumption]; heads need only divide ``YZ``). Not
modelled: the paper's batch-sharded multi-query KV cache over all ``n`` chips (§3.3), MoE
FFNs, MLA and gated attention, the norm's cross-chip statistics (``T`` scalars per norm).
"""

from __future__ import annotations

from .config import ModelConfig
from .dataflow import NOFLOW
from .ops import Collective, Op

#: The tensor-parallel layouts: Megatron's 1-D split, the paper's 2-D FFN split.
LAYOUTS = ("1d", "2d")

#: Why the 2-D layout refuses training (:func:`check_2d`, and the run scenario's check).
INFERENCE_ONLY = ("--tp-layout 2d is an inference layout (Pope et al. 2022); phase train "
                  "takes --tp-layout 1d")


def grid_problems(m: ModelConfig, x: int, yz: int) -> list[str]:
    """What an ``X × YZ`` grid fails to split in ``m`` (empty: it splits it): d_model over
    ``X``, d_ff, the query heads and the KV heads (divide or be divided) over ``YZ``."""
    out = []
    if x < 2 or yz < 2:
        out.append(f"X ({x}) and YZ ({yz}) must both be > 1")
    if m.hidden_size % x:
        out.append(f"X must divide d_model ({m.hidden_size})")
    if m.intermediate_size % yz:
        out.append(f"YZ must divide d_ff ({m.intermediate_size})")
    if m.heads % yz:
        out.append(f"YZ must divide the attention heads ({m.heads})")
    if m.kv_heads % yz and yz % m.kv_heads:
        out.append(f"the KV heads ({m.kv_heads}) must divide or be divided by YZ")
    return out


def x_axis(m: ModelConfig, shape: tuple[int, ...]) -> int:
    """The side of torus slice ``shape`` that the 2-D layout's ``X`` axis (d_model) takes:
    among the sides whose grid splits ``m`` (:func:`grid_problems`), the one with the fewest
    FFN bytes per chip, ``E/X + F/YZ`` (ties: the smaller ``X``). ValueError naming the
    slice when none does."""
    n = 1
    for k in shape:
        n *= k
    e, f = m.hidden_size, m.intermediate_size
    fits = [(e / k + f / (n // k), k, i) for i, k in enumerate(shape)
            if not grid_problems(m, k, n // k)]
    if not fits:
        why = "; ".join(f"X={k}: " + ", ".join(grid_problems(m, k, n // k)) for k in
                        sorted(set(shape)))
        raise ValueError(f"--tp-layout 2d: no side X of the {n}-chip torus slice "
                         f"{'x'.join(map(str, shape))} splits {m.name} as X x YZ ({why})")
    return min(fits)[2]


def check_2d(m: ModelConfig, phase: str) -> None:
    """Raise ValueError unless the 2-D layout applies to ``m`` in ``phase`` (inference on a
    dense FFN)."""
    if phase == "train":
        raise ValueError(INFERENCE_ONLY)
    if m.is_moe:
        raise ValueError(f"--tp-layout 2d splits a dense FFN; {m.name} is a mixture of experts "
                         f"(not modelled)")
    if m.is_mla or m.attn_output_gate:
        raise ValueError(f"--tp-layout 2d: {m.name}'s {'MLA' if m.is_mla else 'gated'} "
                         f"attention is not modelled under it")
    if m.linear_layers or m.parallel_ssm:
        raise ValueError(f"--tp-layout 2d: {m.name}'s linear-attention / state-space layers "
                         f"are not modelled under it")


def sub_slice(name: str, kind: str, nbytes: float, c, axes: tuple[int, ...]) -> Collective:
    """A collective over the sides ``axes`` of the context's torus slice, tagged ``tp``."""
    group = 1
    for i in axes:
        group *= c.tp_shape[i]
    return Collective(name=name, kind=kind, bytes=nbytes, group=group, tags=("tp",),
                      torus_shape=c.tp_shape, torus_axes=axes)


def ffn_2d(c, prefix: str, width: int, *, flow=None, inp: str = "h_mlp",
           out: str | None = None) -> list[Op]:
    """The dense FFN of width ``width`` for one chip of the 2-D layout (module docstring,
    steps 1-4; step 5's reduce-scatter is :func:`output_reduce_scatter`). ``c``: the
    lowering context (``workloads.lower._Ctx`` with ``tp_shape`` set). With a ``flow``:
    reads the chip's ``1/n`` of ``inp``, writes ``out`` (``T·E/X`` partial sums)."""
    T, d, act = c.tokens, c.m.hidden_size, c.m.activation
    X, yz = c.tp_x, c.tp // c.tp_x
    e, f = d // X, width // yz
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    out = out or f"{prefix}mlp_out"
    xs, yzs = (c.tp_x_axis,), c.tp_yz_axes
    gated = c.m.gated_mlp
    up_n = 2 * f if gated else f
    ag_in = sub_slice(f"{prefix}mlp_in_all_gather", "all_gather", T * e * a, c, yzs)
    up = c.gemm(f"{prefix}gate_up_proj" if gated else f"{prefix}fc1", T, e, up_n,
                tags=("mlp",))
    rs_up = sub_slice(f"{prefix}mlp_up_reduce_scatter", "reduce_scatter", T * up_n * a, c, xs)
    fn = (c.vec(f"{prefix}{act}", act, T * f / X, reads=2.0, tags=("saved",)) if gated else
          c.vec(f"{prefix}gelu", "gelu", T * f / X, tags=("saved",)))
    ag_act = sub_slice(f"{prefix}mlp_act_all_gather", "all_gather", T * f * a, c, xs)
    down = c.gemm(f"{prefix}down_proj" if gated else f"{prefix}fc2", T, f, e, tags=("mlp",))
    w_up, w_down = (f"w_{prefix}gate_up", f"w_{prefix}down") if gated else \
        (f"w_{prefix}fc1", f"w_{prefix}fc2")
    fl.vec(ag_in, [(inp, 1.0 / c.tp)], [(fl.t(f"{prefix}mlp_in", T * e * a), 1.0)])
    fl.gemm(up, [(f"{prefix}mlp_in", 1.0)], [(fl.t(w_up, e * up_n * wb, "weight"), 1.0)],
            [(fl.t(f"{prefix}mlp_up_partial", T * up_n * a), 1.0)])
    fl.vec(rs_up, [(f"{prefix}mlp_up_partial", 1.0)],
           [(fl.t(f"{prefix}mlp_up", T * up_n * a), 1.0 / X)])
    fl.vec(fn, [(f"{prefix}mlp_up", 1.0 / X)],
           [(fl.t(f"{prefix}act_shard", T * f * a / X), 1.0)])
    fl.vec(ag_act, [(f"{prefix}act_shard", 1.0)], [(fl.t(f"{prefix}act", T * f * a), 1.0)])
    fl.gemm(down, [(f"{prefix}act", 1.0)], [(fl.t(w_down, f * e * wb, "weight"), 1.0)],
            [(fl.t(out, T * e * a), 1.0)])
    return [ag_in, up, rs_up, fn, ag_act, down]


def output_reduce_scatter(c, name: str) -> Collective:
    """Step 5: the FFN output's partial sums over ``YZ`` reduce-scattered to the chip's
    ``1/n`` of the residual stream (``T·E/X`` elements)."""
    e = c.m.hidden_size // c.tp_x
    return sub_slice(f"{name}_reduce_scatter", "reduce_scatter", c.tokens * e * c.p.a_bytes, c,
                   c.tp_yz_axes)
