"""Tensor-parallel communication overlapped with the GEMMs, as Transformer Engine runs it
(userbuffers) or, with it off, as Megatron-Core's sequence parallelism runs it on NCCL
(:func:`nccl_sub_block`; the run setting ``tp_comm_overlap``, sim/run/stack.py).

Used by the cluster step (:mod:`diptych.sim.cluster.step`, per layer kind) and by a one-node
``run`` (:func:`one_node_overlap`, per block), on a chip with a ``[tp_overlap]`` table, in
training with the tensor-parallel overlap on.

With sequence parallelism each tensor-parallel all-reduce of a layer is a reduce-scatter of
the row-parallel GEMM's output and an all-gather of the next column-parallel GEMM's input
(Megatron-LM, Korthikanti et al. 2022). Transformer Engine's comm-GEMM overlap (userbuffers)
hides them inside the GEMMs by three methods, chosen per GEMM (the chip's ``[tp_overlap]``
table, :class:`~diptych.arch.chip.TpOverlap`, holds a stack's choice):

* **ring exchange** (:func:`ring_exchange_s`): the GEMM is split into one chunk per rank
  along its rows (tokens: ``rows / ranks`` each, every chunk multiplying the whole weight);
  each rank starts on its own piece and computes each next chunk as its piece arrives over
  the ring, copied by the copy engines (no cores taken);
* **pipelined** (:func:`pipelined_s`): the GEMM is split into ``splits`` chunks along its
  output columns (the weight's output features: ``n / splits`` each, every chunk reading
  the whole input), each chunk's reduce-scatter sent while the next is computed, the GEMM
  running on the cores the reduce-scatter's kernels leave it (TE's ``_math_sms = sm_count -
  num_sm``);
* **bulk** (:func:`bulk_s`): the collective runs beside an independent GEMM launched on all
  the cores; its kernels take ``cores`` of them (a communication CTA does not share an SM
  with a compute kernel: NCCL's maintainer, NVIDIA/nccl#689) for as long as it runs.

Per sub-block (attention: ``qkv`` then ``proj``; MLP: ``fc1`` then ``fc2``) and micro-batch,
:func:`sub_block_overlap` gives the seconds the overlapped communication adds to the forward
and to the backward beyond the GEMMs' own time on the whole chip (the cores' tax and what the
chunks leave exposed), the time ``diptych`` charges as the layer's exposed tensor-parallel
communication. The backward carries the all-gather of the saved input that sequence
parallelism repeats for the weight gradient (Korthikanti et al., §4.2.2).

**The chunks** (:func:`chunk_op`, :func:`chunked_s`) are GEMMs of their own, each timed by
the engine at its own shape (``SubBlockGemms.*_chunked_s``): a smaller GEMM pays its own tile
waves and fixed costs, and each ring-exchange chunk streams the whole weight again. How
Transformer Engine splits them [S: NVIDIA/TransformerEngine v1.11 (c27ee60)
transformer_engine/pytorch/csrc/comm_gemm_overlap.h; the same in v1.13 (e5edd6c)
transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp]:
``UbufCommOverlap::split_overlap_rs`` (the pipelined reduce-scatter) takes ``m = A.size(0)``,
``m_chunk = m / _num_splits`` and multiplies ``input_a_chunk {m_chunk, k}`` by the whole
``B`` (L450-L485), where ``A`` is the weight (``fp8_gemm(weight_fp8._data, ...)``,
module/linear.py L206-207; ``gemm(weight, ...)`` on the BF16 path, L274-275): a chunk of
the weight's output features against all the tokens;
``UbufP2PCommOverlap::split_overlap_ag`` (the ring exchange, ``aggregate`` off: TE's
default, module/base.py L252) runs ``tp_size`` GEMMs of the whole ``A`` (the weight) against
``_ubufs[send_chunk_id]``, one rank's ``n_chunk`` rows of the input (L1018-L1042); with
``aggregate`` (``_aggregate2``, NeMo's ``aggregate: 1``, passed by module/base.py L267, L322)
it first swaps one piece with its neighbour (L955-L968: ``comm_bytes``, the first GEMM's
stream waiting for it), then runs ``num_steps = _tp_size / 2`` GEMMs of the whole ``A``
against ``{n_chunk * 2, k}`` rows (L953, L974-L996), each next one after a
``comm_bytes * 2`` exchange with the rank two away (L998-L1008) (:func:`aggregate_s`,
:func:`ring_chunks`). The chunk
GEMMs are issued round-robin on ``min(num_max_streams, chunks)`` compute streams
(L196-L199, L723-L727), ``num_max_streams = _NUM_MAX_UB_STREAMS = 3`` (module/base.py L50,
L323, L343), a stream waiting only for its own chunk's input (L1050-L1053; the pipelined
chunks only for the GEMM's start, L465-L466; cpp_extensions/gemm.py L83-L89, L146-L147: ``A``
passed as is): consecutive
chunks may run at once, so a chunk's tiles can take the cores the previous chunk's last
wave leaves idle. :func:`chunked_s` models that as the chunks' tiles dealt to the cores in
launch order, each chunk after the previous one on its stream (:func:`pooled_waves`:
``ceil(chunks · tiles / units)`` waves whenever a chunk fills a wave) [assumption: one tile
per core at a time (cuBLAS's Hopper GEMMs hold most of an SM's shared memory) and a chunk's
fixed costs not hidden by the next one]. Checked against XLA's measured H100 GEMM table
(benchmarks/validate_tp_chunks.py, docs/cluster.md "Tensor-parallel overlap").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...arch.dtypes import dtype_bytes
from ...workloads.graph import Workload
from ...workloads.ops import Collective, Gemm
from ...workloads.precision import Precision
from ...workloads.recipe import quantized


def ring_exchange_s(gemm_s: float, comm_s: float, ranks: int) -> float:
    """Seconds of a GEMM of ``gemm_s`` whose input arrives over a ring of ``ranks`` ranks in
    ``comm_s`` (the whole all-gather): ``ranks`` chunks, the first on the local piece at once,
    each next one when both its piece has arrived and the previous chunk is done."""
    if ranks <= 1 or comm_s <= 0.0:
        return gemm_s
    chunk, step = gemm_s / ranks, comm_s / (ranks - 1)
    return chunk + (ranks - 1) * max(chunk, step)


def aggregate_s(gemm_s: float, comm_s: float, ranks: int) -> float:
    """:func:`ring_exchange_s` as Transformer Engine's ``aggregate`` variant runs it (module
    docstring, "The chunks"): a first exchange of one rank's piece with the neighbour, then
    ``ranks / 2`` chunks of two pieces' rows each, every next chunk after a two-piece exchange
    with the rank two away (``ranks - 1`` pieces moved in all, as the plain ring). The first
    chunk waits for the first exchange: nothing is computed on the local piece alone."""
    if ranks <= 1 or comm_s <= 0.0:
        return gemm_s
    steps = ranks // 2
    chunk, step = gemm_s / steps, comm_s / (ranks - 1)
    return step + chunk + (steps - 1) * max(chunk, 2 * step)


def ring_s(gemm_s: float, comm_s: float, ranks: int, aggregate: bool) -> float:
    """:func:`aggregate_s` when ``aggregate``, else :func:`ring_exchange_s`."""
    return (aggregate_s if aggregate else ring_exchange_s)(gemm_s, comm_s, ranks)


def ring_chunks(ranks: int, aggregate: bool) -> int:
    """The chunk GEMMs a ring exchange over ``ranks`` ranks splits its GEMM's rows into:
    ``ranks``, or ``ranks // 2`` (two pieces each) under TE's ``aggregate``."""
    return max(1, ranks // 2) if aggregate else ranks


#: The compute streams Transformer Engine issues one overlapped GEMM's chunks on, round-robin
#: [S: NVIDIA/TransformerEngine v1.11 transformer_engine/pytorch/module/base.py L50
#: ``_NUM_MAX_UB_STREAMS = 3``, passed as ``num_max_streams`` to both overlap classes].
UB_MAX_STREAMS = 3


def chunk_op(op: Gemm, *, rows: int = 1, cols: int = 1) -> Gemm:
    """One of the equal chunks Transformer Engine splits GEMM ``op`` into (module docstring,
    "The chunks"): its rows (tokens) in ``rows`` parts (the ring exchange), or its output
    columns in ``cols`` parts (the pipelined reduce-scatter). TE truncates a part that does
    not divide (``m_chunk = m / _num_splits``, v1.11 comm_gemm_overlap.h L450; the ring's
    buffers ``sample.size(0) / tp_size`` rows, L708/L716): its chunks then leave the
    remainder out; ``diptych`` rounds up instead, so that the chunks cover the whole GEMM
    (the same where it divides)."""
    for name, parts in (("rows", rows), ("cols", cols)):
        if parts <= 0:
            raise ValueError(f"chunk_op: {name} must be a positive number of parts, got {parts}")
    return replace(op, m=-(-op.m // rows), n=-(-op.n // cols))


def _units(mapping: dict, cores: int) -> int:
    """The units a GEMM's tiles are dealt to on ``cores`` cores: a core each (``units`` =
    ``"cores"``) or its ``arrays_per_core`` arrays, per the engine's ``mapping``."""
    return cores * (1 if mapping.get("units") == "cores" else mapping.get("arrays_per_core", 1))


def pooled_waves(chunks: int, tiles: int, units: int, streams: int) -> int:
    """Waves in which ``chunks`` GEMMs of ``tiles`` equal tiles each run on ``units`` units
    when issued round-robin on ``streams`` streams: a chunk may start once the previous chunk
    on its stream is done; free units take the earliest available chunk's next tiles (the
    block scheduler serves kernels in launch order); one tile per unit at a time, a wave the
    time of one tile. ``ceil(chunks · tiles / units)`` whenever ``tiles >= units`` and
    ``streams >= 2`` (no unit waits on a stream then)."""
    if units <= 0:
        raise ValueError(f"pooled_waves: units must be positive, got {units}")
    left, done, t = [tiles] * chunks, [-1] * chunks, 0
    while min(done) < 0:
        free = units
        for c in range(chunks):
            if left[c] and free and (c < streams or 0 <= done[c - streams] <= t):
                k = min(free, left[c])
                left[c] -= k
                free -= k
        t += 1
        for c in range(chunks):
            if done[c] < 0 and not left[c]:
                done[c] = t
    return t


def chunked_s(chunk_s: float, mapping: dict | None, chunks: int, cores: int) -> float:
    """Seconds of ``chunks`` equal chunk GEMMs of ``chunk_s`` each, issued round-robin on
    ``min(UB_MAX_STREAMS, chunks)`` streams on ``cores`` cores: a chunk's tiles take the
    units the previous chunk's last wave leaves idle (:func:`pooled_waves`), each wave as long
    as one of a chunk's (``chunk_s / waves``). ``mapping``: the engine's mapping of the chunk
    (:func:`requantised_s`); without one, ``chunks · chunk_s``."""
    if chunks <= 1:
        return chunk_s
    if not mapping or not mapping.get("waves"):
        return chunks * chunk_s
    units = max(_units(mapping, cores), mapping["busy_units"])
    waves = pooled_waves(chunks, mapping["tiles"], units, min(UB_MAX_STREAMS, chunks))
    return chunk_s * min(waves, chunks * mapping["waves"]) / mapping["waves"]


def split_s(ops, chip, alone: Callable, mapping: Callable | None, *, rows: int = 1,
            cols: int = 1) -> float:
    """Seconds of GEMMs ``ops`` on ``chip`` as Transformer Engine's overlap splits each
    (:func:`chunk_op`: ``rows`` or ``cols`` chunks), each chunk timed alone at its shape
    (``alone(op, chip)``) and the chunks on TE's streams (:func:`chunked_s`, from
    ``mapping(op, chip)``, the engine's mapping, or None)."""
    n = max(rows, cols)
    return sum(chunked_s(alone(c, chip), mapping(c, chip) if mapping else None, n,
                         chip.tensor_cores)
               for c in (chunk_op(o, rows=rows, cols=cols) for o in ops))


def pipelined_s(gemm_s: float, comm_s: float, splits: int) -> float:
    """Seconds of a GEMM of ``gemm_s`` (on the cores the collective leaves it) whose output is
    reduce-scattered in ``comm_s`` (the whole collective), pipelined in ``splits`` chunks:
    a two-stage pipeline of ``splits`` items."""
    if comm_s <= 0.0:
        return gemm_s
    a, b = gemm_s / splits, comm_s / splits
    return a + b + (splits - 1) * max(a, b)


def bulk_s(gemm_s: float, comm_s: float, cores: int, total_cores: int) -> float:
    """Seconds of a GEMM of ``gemm_s`` on all ``total_cores`` beside an independent collective
    of ``comm_s`` whose kernels take ``cores`` of them while it runs: the GEMM runs at
    ``(total − cores) / total`` of its rate during the collective, at full rate after it."""
    if comm_s <= 0.0:
        return gemm_s
    return max(comm_s, gemm_s + comm_s * cores / total_cores)


def requantised_s(gemm_s: float, mapping: dict | None, held: int, total_cores: int) -> float:
    """Seconds of a GEMM of ``gemm_s`` on the whole chip when ``held`` of its
    ``total_cores`` cores are taken by a communication kernel for all of it, the GEMM not
    partitioned for that (launched for the whole chip: an NCCL kernel beside a cuBLAS GEMM):
    its tiles are dealt to the units left, ``ceil(tiles / units left)`` waves in place of
    its ``waves`` (NVIDIA developer forum thread 337991: a 132-CTA GEMM beside a 24-CTA
    all-gather on H100 needs a second wave and nearly doubles). ``mapping``: the engine's
    mapping of the GEMM (:func:`~diptych.sim.gemm` ``mapping``: ``tiles``, ``waves``,
    ``busy_units``, ``units``, ``arrays_per_core``); a GEMM whose busy units fit on the
    cores left is not slowed. Without a mapping (a timer that gives none) the cores' share:
    ``gemm_s · total / (total − held)``."""
    left = total_cores - held
    if held <= 0:
        return gemm_s
    if not mapping or not mapping.get("waves"):
        return gemm_s * total_cores / left
    units_left = _units(mapping, left)
    if mapping["busy_units"] <= units_left:
        return gemm_s
    return gemm_s * math.ceil(mapping["tiles"] / units_left) / mapping["waves"]


def gemm_mapping(simulate: Callable | None) -> Callable:
    """``mapping(op, chip)`` for :func:`overlap_gemms`: the engine's mapping of GEMM ``op``
    (``simulate``: the op timer, None: the engine's), None when the timer gives none."""
    def mapping(op, chip) -> dict | None:
        if simulate is None:
            from .. import simulate as sim
        else:
            sim = simulate
        return getattr(sim(op, chip), "mapping", None) if isinstance(op, Gemm) else None
    return mapping


def bulk_held_s(gemm_s: float, held_s: float, comm_s: float) -> float:
    """Seconds of a GEMM of ``gemm_s`` beside an independent collective of ``comm_s`` during
    which it would take ``held_s`` in all (:func:`requantised_s`): its work advances at
    ``1 / held_s`` while the collective runs, at ``1 / gemm_s`` after it. With ``held_s =
    gemm_s · total / (total − cores)`` this is :func:`bulk_s`."""
    if comm_s <= 0.0:
        return gemm_s
    if comm_s >= held_s:
        return comm_s
    return comm_s + gemm_s * (1.0 - comm_s / held_s)


@dataclass(frozen=True)
class SubBlockGemms:
    """Seconds of one sub-block's GEMMs for one micro-batch on one rank, each alone on the
    whole chip: the column-parallel ones (``col_*``: all but the last weight GEMM; forward,
    data and weight gradients) and the row-parallel one (``row_*``), with
    ``row_fprop_margin_s`` its forward on the cores the pipelined reduce-scatter leaves;
    ``col_dgrad_held_s``/``col_wgrad_held_s`` the gradient GEMMs with the NCCL kernels'
    cores held (:func:`requantised_s`; 0: not timed, the cores' share). The ``*_chunked_s``
    are the same GEMMs as Transformer Engine's overlap runs them, in chunks each timed at its
    own shape (:func:`chunked_s`): the column-parallel forward and the row-parallel data
    gradient in ring-exchange chunks, the row-parallel forward in the pipeline's chunks on
    the margin (0: not timed, the chunks at the whole GEMM's rate)."""

    col_fprop_s: float
    row_fprop_s: float
    row_fprop_margin_s: float
    col_dgrad_s: float = 0.0
    col_wgrad_s: float = 0.0
    row_dgrad_s: float = 0.0
    col_dgrad_held_s: float = 0.0
    col_wgrad_held_s: float = 0.0
    col_fprop_chunked_s: float = 0.0
    row_fprop_margin_chunked_s: float = 0.0
    row_dgrad_chunked_s: float = 0.0


@dataclass(frozen=True)
class OverlapCost:
    """Seconds the overlapped collectives of one sub-block add beyond its GEMMs' own time:
    ``fwd_s``/``bwd_s`` in all, of which ``fwd_tax_s``/``bwd_tax_s`` is the GEMMs' slowdown
    on the cores the collectives take and ``chunk_fwd_s``/``chunk_bwd_s`` the chunk GEMMs'
    time beyond the whole GEMMs' on the same cores (:func:`chunked_s`): a GEMM cost, which
    stays when the collectives take no time (a free-communication variant, the waterfall's
    GEMM step)."""

    fwd_s: float
    bwd_s: float
    fwd_tax_s: float
    bwd_tax_s: float
    chunk_fwd_s: float = 0.0
    chunk_bwd_s: float = 0.0

    @property
    def chunk_s(self) -> float:
        """The chunks' extra time, forward and backward together."""
        return self.chunk_fwd_s + self.chunk_bwd_s


def nccl_sub_block(g: SubBlockGemms, *, all_gather_s: float, reduce_scatter_s: float,
                   nccl_cores: int, total_cores: int) -> OverlapCost:
    """The tensor-parallel communication of one sub-block as Megatron-Core runs sequence
    parallelism without userbuffers (NeMo ``ub_tp_comm_overlap: false``), by NCCL:

    * forward: the all-gather of the input before the column-parallel GEMM and the
      reduce-scatter of the row-parallel GEMM's output, each on the compute stream between
      its GEMMs: exposed;
    * backward: the all-gather of the output gradient before the row-parallel data gradient
      (synchronous: exposed); the all-gather of the saved input issued asynchronously beside
      the column-parallel data-gradient GEMM, then the reduce-scatter of the input gradient
      beside the weight-gradient GEMM ("Overlap dgrad-RS/AR with wgrad", Transformer Engine
      transformer_engine/pytorch/module/linear.py and layernorm_linear.py, ``_Linear``
      backward [S]), each NCCL kernel holding ``nccl_cores`` of the cores while it runs (an
      NCCL CTA does not share an SM with a compute kernel: NVIDIA/nccl#689); the GEMM,
      launched for the whole chip, runs its tiles in the waves the cores left allow
      (``col_*_held_s``, :func:`bulk_held_s`), or, not timed so, at the cores' share
      (:func:`bulk_s`).

    All of the backward's cost beyond the exposed all-gather is the cores' tax."""
    def beside(gemm_s, held_s, comm_s):
        if held_s > 0.0:
            return bulk_held_s(gemm_s, held_s, comm_s) - gemm_s
        return bulk_s(gemm_s, comm_s, nccl_cores, total_cores) - gemm_s

    x = beside(g.col_dgrad_s, g.col_dgrad_held_s, all_gather_s)
    dx = beside(g.col_wgrad_s, g.col_wgrad_held_s, reduce_scatter_s)
    tax = min(x, all_gather_s) + min(dx, reduce_scatter_s)
    return OverlapCost(all_gather_s + reduce_scatter_s, all_gather_s + x + dx, 0.0, tax)


def sub_block_overlap(g: SubBlockGemms, *, all_gather_s: float, reduce_scatter_s: float,
                      ranks: int, splits: int, dgrad_cores: int, wgrad_cores: int,
                      total_cores: int, fprop_aggregate: bool = False,
                      dgrad_aggregate: bool = False) -> OverlapCost:
    """The overlapped tensor-parallel communication of one sub-block (module docstring):
    ``all_gather_s``/``reduce_scatter_s`` the collectives of the sub-block's activation on
    the group of ``ranks``; ``dgrad_cores``/``wgrad_cores`` the cores the backward's bulk
    all-gather and reduce-scatter take. Each split GEMM runs as its chunks do
    (``g.*_chunked_s``, where timed) on a group of ``ranks`` > 1, whatever its collective
    takes: with the collectives at 0 s (a free-communication variant) the cost is the
    chunks' extra time alone (``chunk_fwd_s``/``chunk_bwd_s``; the pipelined GEMM's as on
    its margin, the margin itself being the collective's). ``fprop_aggregate``/
    ``dgrad_aggregate``: the column-parallel forward's / row-parallel data gradient's ring
    exchange runs TE's ``aggregate`` variant (:func:`aggregate_s`)."""
    def split(whole: float, chunked: float) -> float:
        return chunked if chunked > 0.0 and ranks > 1 else whole

    col = split(g.col_fprop_s, g.col_fprop_chunked_s)
    dgrad = split(g.row_dgrad_s, g.row_dgrad_chunked_s)
    margin = split(g.row_fprop_margin_s, g.row_fprop_margin_chunked_s)
    ag = ring_s(col, all_gather_s, ranks, fprop_aggregate) - g.col_fprop_s
    chunk_fwd = col - g.col_fprop_s + margin - g.row_fprop_margin_s
    if reduce_scatter_s > 0.0:      # the margin is taken only while there is one to run
        rs = pipelined_s(margin, reduce_scatter_s, splits) - g.row_fprop_s
        fwd_tax = g.row_fprop_margin_s - g.row_fprop_s
    else:
        rs, fwd_tax = margin - g.row_fprop_margin_s, 0.0
    dy = ring_s(dgrad, all_gather_s, ranks, dgrad_aggregate) - g.row_dgrad_s
    x = bulk_s(g.col_dgrad_s, all_gather_s, dgrad_cores, total_cores) - g.col_dgrad_s
    dx = bulk_s(g.col_wgrad_s, reduce_scatter_s, wgrad_cores, total_cores) - g.col_wgrad_s
    bwd_tax = (min(x, all_gather_s * dgrad_cores / total_cores)
               + min(dx, reduce_scatter_s * wgrad_cores / total_cores))
    return OverlapCost(ag + rs, dy + x + dx, fwd_tax, bwd_tax, chunk_fwd,
                       dgrad - g.row_dgrad_s)


#: The sub-blocks whose tensor-parallel all-reduce (``<sub-block>_all_reduce``) a chip's
#: ``[tp_overlap]`` stack overlaps with their GEMMs, and the TE names of the cores tables:
#: (pipelined forward, bulk data gradient, bulk weight gradient).
OVERLAP_SUB_BLOCKS = {"attn": ("proj_fprop", "qkv_dgrad", "qkv_wgrad"),
                      "mlp": ("fc2_fprop", "fc1_dgrad", "fc1_wgrad")}
#: The TE names of each sub-block's ring-exchange GEMMs: (column-parallel forward,
#: row-parallel data gradient).
RING_SUB_BLOCKS = {"attn": ("qkv_fprop", "proj_dgrad"), "mlp": ("fc1_fprop", "fc2_dgrad")}


def sub_block_ops(forward, tp_names, sub: str) -> tuple[list[Gemm], Gemm] | None:
    """(column-parallel GEMMs, row-parallel GEMM) of sub-block ``sub`` of a layer's forward
    ops (its dense weight GEMMs tagged ``sub``: all but the last read the gathered input, the
    last's output is reduced), or None when the layer has no such pair and all-reduce
    (``tp_names``: its tensor-parallel collectives; a MoE layer's experts have none)."""
    if f"{sub}_all_reduce" not in tp_names:
        return None
    gemms = [o for o in forward if isinstance(o, Gemm) and sub in o.tags
             and "weight" in o.tags and "expert" not in o.tags]
    if len(gemms) < 2:
        return None
    return gemms[:-1], gemms[-1]


def gather_share(forward, tp_names, sub: str, p: Precision, sequence_parallel: bool
                 ) -> float:
    """Bytes sub-block ``sub``'s sequence-parallel all-gathers move over those of its
    all-reduce's tensor (activation dtype): 1, or under per-tensor FP8 with delayed scaling
    (TE 1.x) ``1 B / a_bytes`` when both its column- and row-parallel GEMMs run in FP8
    (:func:`sub_block_ops`): Transformer Engine gathers the norm's FP8 output ``ln_out``
    (forward, and again for the weight gradient) and the row-parallel linear's FP8 output
    gradient, on NCCL and in userbuffers alike; the reduce-scatters stay in the activation
    dtype [S: NVIDIA/TransformerEngine v1.11 (c27ee60) transformer_engine/pytorch/module/
    layernorm_linear.py L125-128 ``ln_out_dtype = torch.uint8 if (fp8 and not
    return_layernorm_output)``, L162-164 ``gather_along_first_dim(ln_out, tp_group)``,
    L450-457 the backward's ``gather_along_first_dim(ln_out, ...)`` of the saved FP8
    ``ln_out``; module/base.py L774-797 ``grad_output_preprocess``: "FP8 case with gather":
    ``cast_to_fp8`` into a ``torch.uint8`` tensor, then ``gather_along_first_dim``;
    L212-220 "AllGather buffers use fp8 when using fp8 recipe" (``qkv_fprop``,
    ``qkv_dgrad``, ``proj_dgrad``, ``fc1_fprop``, ``fc1_dgrad``, ``fc2_dgrad``; L221 the
    reduce-scatter buffers ``proj_fprop``, ``fc2_fprop``, ``qkv_wgrad``, ``fc1_wgrad`` are
    not), L306-307 ``dtype=torch.uint8 if (use_fp8 and fp8_buf)``]. Current scaling (TE
    2.x) is not read: 1 [assumption]."""
    if not (sequence_parallel and p.recipe == "fp8-delayed" and p.linear is not None):
        return 1.0
    found = sub_block_ops(forward, tp_names, sub)
    if found is None:
        return 1.0
    col, row = found
    if not all(quantized(o) for o in (*col, row)):
        return 1.0
    return dtype_bytes(p.linear) / p.a_bytes


def overlap_gemms(forward, backward, tp_names, chip, alone: Callable,
                  mapping: Callable | None = None, ranks: int = 1
                  ) -> dict[str, SubBlockGemms]:
    """The GEMM seconds :func:`sub_block_overlap` needs for each sub-block of a training
    layer whose all-reduce the chip's ``[tp_overlap]`` stack overlaps: ``alone(op, chip)``
    times one op by itself (as the summed execution does); the row-parallel forward also on
    the cores its pipelined reduce-scatter leaves; with userbuffers off, the gradient GEMMs
    beside the NCCL collectives with their waves re-quantised (:func:`requantised_s`, from
    ``mapping(op, chip)``, the engine's mapping of a GEMM, or None). With userbuffers on a
    group of ``ranks`` > 1, the split GEMMs also as TE's chunks (:func:`chunk_op`,
    :func:`chunked_s`). Empty without the table."""
    table = chip.tp_overlap
    if table is None:
        return {}
    by_name = {o.name: o for o in backward}
    cores = table.cores()

    def secs(ops, on=chip) -> float:
        return sum(alone(o, on) for o in ops)

    out = {}
    for sub, (fprop, _, _) in OVERLAP_SUB_BLOCKS.items():
        found = sub_block_ops(forward, tp_names, sub)
        if found is None:
            continue
        col, row = found
        try:
            grads = dict(col_dgrad_s=secs([by_name[f"{o.name}.dgrad"] for o in col]),
                         col_wgrad_s=secs([by_name[f"{o.name}.wgrad"] for o in col]),
                         row_dgrad_s=secs([by_name[f"{row.name}.dgrad"]]))
        except KeyError:                    # pragma: no cover - lowering changed
            continue
        if table.userbuffers:
            margin = replace(chip, tensor_cores=chip.tensor_cores - cores[fprop])
            if ranks > 1:
                def chunks(ops, on, *, rows=1, cols=1) -> float:
                    return split_s(ops, on, alone, mapping, rows=rows, cols=cols)
                agg = table.aggregate()
                fp, dg = RING_SUB_BLOCKS[sub]
                grads.update(
                    col_fprop_chunked_s=chunks(col, chip, rows=ring_chunks(ranks, agg[fp])),
                    row_fprop_margin_chunked_s=chunks([row], margin, cols=table.splits),
                    row_dgrad_chunked_s=chunks([by_name[f"{row.name}.dgrad"]], chip,
                                               rows=ring_chunks(ranks, agg[dg])))
        else:                               # Megatron's NCCL path: no margin, waves held
            margin = chip

            def held(ops) -> float:
                return sum(requantised_s(alone(o, chip), mapping(o, chip) if mapping else None,
                                         table.nccl_cores, chip.tensor_cores) for o in ops)
            grads.update(col_dgrad_held_s=held([by_name[f"{o.name}.dgrad"] for o in col]),
                         col_wgrad_held_s=held([by_name[f"{o.name}.wgrad"] for o in col]))
        out[sub] = SubBlockGemms(col_fprop_s=secs(col), row_fprop_s=secs([row]),
                                 row_fprop_margin_s=secs([row], margin), **grads)
    return out


def costs(gemms: dict[str, SubBlockGemms], chip, ranks: int, collectives: dict
          ) -> dict[str, OverlapCost]:
    """:func:`sub_block_overlap` of each sub-block, ``collectives[sub]`` its (all-gather,
    reduce-scatter) seconds."""
    table, out = chip.tp_overlap, {}
    for sub, g in gemms.items():
        _, dgrad, wgrad = OVERLAP_SUB_BLOCKS[sub]
        ag, rs = collectives[sub]
        if not table.userbuffers:
            out[sub] = nccl_sub_block(g, all_gather_s=ag, reduce_scatter_s=rs,
                                      nccl_cores=table.nccl_cores,
                                      total_cores=chip.tensor_cores)
            continue
        out[sub] = sub_block_overlap(
            g, all_gather_s=ag, reduce_scatter_s=rs, ranks=ranks, splits=table.splits,
            dgrad_cores=table.cores()[dgrad], wgrad_cores=table.cores()[wgrad],
            total_cores=chip.tensor_cores,
            fprop_aggregate=table.aggregate()[RING_SUB_BLOCKS[sub][0]],
            dgrad_aggregate=table.aggregate()[RING_SUB_BLOCKS[sub][1]])
    return out


def one_node_overlap(w: Workload, chip, t: dict, *, overlap: bool, scheduled: bool,
                     alone: Callable, coll: Callable, coll_j: Callable,
                     mapping: Callable | None = None, precision: Precision | None = None,
                     sequence_parallel: bool = False) -> tuple[float, float]:
    """Seconds a one-node training run ``t`` (its records, ``t["layers"]``) changes by when
    the chip's ``[tp_overlap]`` stack overlaps each layer block's all-reduces (0 without the
    table or tensor parallelism): per copy of a forward block and of its backward
    (``<name>.bwd``), the stack's cost (:func:`sub_block_overlap`) instead of what the
    all-reduces cost where they were: their exposure in the schedule (``scheduled``), or
    their share of the summed block's ``max(compute, collectives)``. Nothing without
    ``overlap`` (every collective exposed, as asked). ``coll(op)``/``coll_j(op)``: a collective's
    seconds and link joules on the node's links. Returns (seconds, link joules) to add: the
    joules of the all-gather of the saved input that the backward repeats for the weight
    gradient under sequence parallelism (the others move the all-reduce's bytes). Under
    ``precision``'s FP8 recipe with ``sequence_parallel`` the all-gathers move
    :func:`gather_share` of those bytes, as the cluster step's do."""
    if chip.tp_overlap is None or w.phase != "train" or not overlap:
        return 0.0, 0.0
    blocks = {b.name: b for b in w.blocks}
    recs: dict[str, list[dict]] = {}
    for r in t["layers"]:
        recs.setdefault(r["block"], []).append(r)
    delta = joules = 0.0
    for b in w.blocks:
        bwd = blocks.get(f"{b.name}.bwd")
        tps = [o for o in b.ops if isinstance(o, Collective) and "tp" in o.tags]
        if b.stage != "forward" or bwd is None or not tps or tps[0].group < 2:
            continue
        names = {o.name for o in tps}
        gemms = overlap_gemms(b.ops, bwd.ops, names, chip, alone, mapping, tps[0].group)
        if not gemms:
            continue
        by = {o.name: o for o in tps}
        share = {sub: gather_share(b.ops, names, sub, precision, sequence_parallel)
                 if precision is not None else 1.0 for sub in gemms}

        def moved(sub: str, kind: str) -> Collective:
            c = by[f"{sub}_all_reduce"]
            return replace(c, kind=kind,
                           bytes=c.bytes * (share[sub] if kind == "all_gather" else 1.0))
        pair = {sub: tuple(coll(moved(sub, kind)) for kind in ("all_gather", "reduce_scatter"))
                for sub in gemms}
        cost = costs(gemms, chip, tps[0].group, pair)
        if any(ag > 0 for ag, _ in pair.values()):
            joules += bwd.repeat * sum(coll_j(moved(sub, "all_gather")) for sub in gemms)
        for blk, lapped_of in ((b, lambda sub: (f"{sub}_all_reduce",)),
                               (bwd, lambda sub: (f"{sub}_all_reduce.bwd",
                                                  f"{sub}_all_reduce"))):
            lapped = {n: sub for sub in gemms for n in lapped_of(sub)}
            rs = recs.get(blk.name, [])
            new = 0.0
            for r in rs:
                sub = lapped.get(r["op"])
                if sub is not None:
                    new += cost[sub].bwd_s if r["op"].endswith(".bwd") else cost[sub].fwd_s
            if scheduled:
                old = sum(r.get("exposed_total_s", 0.0) for r in rs if r["op"] in lapped)
                delta += blk.repeat * new - old
                continue
            dp = {o.name for o in blk.ops if "dp" in getattr(o, "tags", ())}
            comp = sum(r["seconds"] for r in rs if r["bound"] != "communication")
            comm = sum(r["seconds"] for r in rs if r["bound"] == "communication"
                       and r["op"] not in dp)
            kept = comm - sum(r["seconds"] for r in rs if r["op"] in lapped)
            delta += blk.repeat * (max(comp, kept) + new - max(comp, comm))
    return delta, joules
