"""The mapper: split a GEMM across the chip's arrays, then pick dataflow, blocks and loop order.

1. **Orientation.** A ``Gemm`` whose B is a shared weight (``b_is_weight``) with ``batch > 1``
   is one product with ``M·batch`` rows (the A and C matrices are stacked). Otherwise the batch
   elements are independent products. Input stationary is weight stationary on the transposed
   problem (``Cᵀ = Bᵀ·Aᵀ``): M and N swap and so do the operands.
2. **Multi-array split.** The chip's ``tensor_cores × arrays`` arrays each take an equal
   share: ``pb`` ways over the batch, then ``pm × pn`` ways over M and N. Each array plays the
   same schedule on its share; DRAM pseudo-channels are time-shared by the ``active`` arrays
   (each sees ``1/active`` of every channel), a core's DMA engines and scratchpad are split
   among its busy arrays. Splitting M makes every array read its own copy of its B columns;
   splitting N or the batch duplicates nothing. Every distinct split is a candidate like the
   blockings below (the search is over split × dataflow × blocking).
3. **Blocks.** Candidate block sizes are the array-aligned sizes ``R·2^i`` (rows),
   ``Rk·2^i`` or ``R·2^i`` (depth), ``C·2^i`` (columns) and the full extent, for both loop
   orders, that fit the scratchpad with two slots each for the X and W blocks and two output
   tiles (in the accumulator SRAM when the chip has one). Each candidate has a valid lower
   bound (busy cycles; DRAM bytes at peak share) and an estimate; candidates are simulated in
   order of the estimate and pruned when their lower bound cannot beat the best so far (a run
   also stops as soon as it cannot), within a budget of :data:`MAX_SIMULATED_BLOCKS`. The fastest simulated candidate wins; ties break on
   the candidate order, so the choice is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch.dtypes import DTYPE_BYTES
from . import engine as E
from .array import Rates
from .dram import DramTiming, refresh_lower_bound_ns

#: Budget of one mapping decision: engine runs stop once the candidates simulated so far hold
#: this many blocks in all (small problems are therefore searched exhaustively, up to the
#: lower-bound pruning; large ones in order of the estimate until the budget is spent).
MAX_SIMULATED_BLOCKS = 100_000

#: A candidate whose lower bound is within this fraction of the best simulated time is not
#: simulated: the mapper may miss a mapping at most 0.01 % faster than the one it reports.
PRUNE_TOLERANCE = 1e-4

_BASE_ALIGN = 1 << 20  # operands are placed at 1 MiB-aligned addresses


def _bits(dtype: str) -> int:
    return int(round(DTYPE_BYTES[dtype] * 8))


@dataclass(frozen=True)
class Problem:
    """An oriented GEMM for one array: ``batch × (X[m×k] · W[k×n])``."""

    dataflow: str        # the user-visible dataflow: os, ws, is
    m: int
    k: int
    n: int
    batch: int
    x_bits: int
    w_bits: int
    o_bits: int
    acc_bits: int
    transposed: bool     # input stationary: X = Bᵀ, W = Aᵀ, O = Cᵀ
    x_ld: int
    w_ld: int
    o_ld: int
    x_bstride: int
    w_bstride: int
    o_bstride: int
    x_base: int
    w_base: int
    o_base: int


@dataclass(frozen=True)
class Split:
    pb: int
    pm: int
    pn: int
    batch: int   # per-array share
    m: int
    n: int
    active: int
    arrays_per_core: int


@dataclass(frozen=True)
class Blocks:
    mb: int
    kb: int
    nb: int
    order: int   # 0: M outermost (mnk), 1: N outermost (nmk)


def _cdiv(a, b):
    return -(-a // b)


def splits(chip, batch: int, m: int, n: int) -> list[Split]:
    """Every distinct way to share (batch, M, N) over the chip's arrays, deterministic order.

    ``pb`` (batch ways) and ``pn`` (N ways) run over powers of two and the largest value that
    fits; ``pm`` takes the arrays left. Splits giving the same per-array share are merged.
    """
    arrays = chip.arrays
    out = {}
    top = min(batch, arrays)
    for pb in sorted({top} | {2 ** i for i in range(24) if 2 ** i <= top}):
        rest = arrays // pb
        for pn in sorted({1, rest} | {2 ** i for i in range(24) if 2 ** i <= rest}):
            pm = rest // pn
            bs, ms, ns = _cdiv(batch, pb), max(1, _cdiv(m, pm)), _cdiv(n, pn)
            if (bs, ms, ns) in out:
                continue
            act = _cdiv(batch, bs) * _cdiv(m, ms) * _cdiv(n, ns)
            apc = min(chip.core.arrays, _cdiv(act, chip.tensor_cores))
            out[(bs, ms, ns)] = Split(pb=_cdiv(batch, bs), pm=_cdiv(m, ms), pn=_cdiv(n, ns),
                                      batch=bs, m=ms, n=ns, active=act, arrays_per_core=apc)
    return list(out.values())


def orient(op, dataflow: str, split: Split, m_total: int) -> Problem:
    """The per-array problem for ``dataflow`` (IS transposes), with DRAM layout strides."""
    ab, bb, cb, accb = (_bits(op.a_dtype), _bits(op.b_dtype), _bits(op.c_dtype),
                        _bits(op.acc_dtype))
    k, n = op.k, op.n
    a_ld, b_ld, c_ld = _cdiv(k * ab, 8), _cdiv(n * bb, 8), _cdiv(n * cb, 8)
    folded = op.b_is_weight
    a_bs = 0 if folded else m_total * a_ld
    b_bs = 0 if folded else k * b_ld
    c_bs = 0 if folded else m_total * c_ld
    a_size = m_total * a_ld * (1 if folded else op.batch)
    b_size = k * b_ld * (1 if folded else op.batch)
    b_base = _cdiv(a_size, _BASE_ALIGN) * _BASE_ALIGN
    c_base = b_base + _cdiv(b_size, _BASE_ALIGN) * _BASE_ALIGN
    if dataflow != "is":
        return Problem(dataflow=dataflow, m=split.m, k=k, n=split.n, batch=split.batch,
                       x_bits=ab, w_bits=bb, o_bits=cb, acc_bits=accb, transposed=False,
                       x_ld=a_ld, w_ld=b_ld, o_ld=c_ld, x_bstride=a_bs, w_bstride=b_bs,
                       o_bstride=c_bs, x_base=0, w_base=b_base, o_base=c_base)
    # X = Bᵀ (at b_base), W = Aᵀ (at 0), O = Cᵀ
    return Problem(dataflow=dataflow, m=split.n, k=k, n=split.m, batch=split.batch,
                   x_bits=bb, w_bits=ab, o_bits=cb, acc_bits=accb, transposed=True,
                   x_ld=b_ld, w_ld=a_ld, o_ld=c_ld, x_bstride=b_bs, w_bstride=a_bs,
                   o_bstride=c_bs, x_base=b_base, w_base=0, o_base=c_base)


def engine_params(chip, pb: Problem, blk: Blocks, rates: Rates, split: Split,
                  memory: bool) -> tuple[np.ndarray, np.ndarray]:
    """The integer and float parameter vectors of :func:`engine.run_schedule`."""
    arr = chip.core.array
    ip = np.zeros(E.N_IPARAMS, dtype=np.int64)
    ip[E.P_DF] = 0 if pb.dataflow == "os" else 1
    ip[E.P_R], ip[E.P_C] = arr.rows, arr.cols
    ip[E.P_M], ip[E.P_K], ip[E.P_N], ip[E.P_BATCH] = pb.m, pb.k, pb.n, pb.batch
    ip[E.P_MB], ip[E.P_KB], ip[E.P_NB], ip[E.P_ORDER] = blk.mb, blk.kb, blk.nb, blk.order
    ip[E.P_OS_NUM], ip[E.P_OS_DEN] = rates.os_num, rates.os_den
    ip[E.P_WS_NUM], ip[E.P_WS_DEN] = rates.ws_num, rates.ws_den
    ip[E.P_RK] = rates.stationary_rows
    t = 1 if pb.transposed else 0
    x_base = pb.x_base
    ip[E.P_X_BASE], ip[E.P_X_LD], ip[E.P_X_BITS], ip[E.P_X_T], ip[E.P_X_BSTRIDE] = \
        x_base, pb.x_ld, pb.x_bits, t, pb.x_bstride
    ip[E.P_W_BASE], ip[E.P_W_LD], ip[E.P_W_BITS], ip[E.P_W_T], ip[E.P_W_BSTRIDE] = \
        (pb.w_base, pb.w_ld, pb.w_bits, t, pb.w_bstride)
    ip[E.P_O_BASE], ip[E.P_O_LD], ip[E.P_O_BITS], ip[E.P_O_T], ip[E.P_O_BSTRIDE] = \
        pb.o_base, pb.o_ld, pb.o_bits, t, pb.o_bstride
    ip[E.P_ACC_BITS] = pb.acc_bits
    engines, per_engine = dma_share(chip, split)
    ip[E.P_ENGINES], ip[E.P_MAXOUT], ip[E.P_SETUP] = engines, chip.dma.max_outstanding, \
        chip.dma.setup_cycles
    ip[E.P_MEMORY] = 1 if memory else 0
    fp = np.zeros(E.N_FPARAMS)
    fp[E.F_GHZ], fp[E.F_DMA_BPC], fp[E.F_SHARE] = chip.clock_ghz, per_engine, float(split.active)
    return ip, fp


def dma_share(chip, split: Split) -> tuple[int, float]:
    """(engines, bytes per cycle per engine) available to one array."""
    apc = max(1, split.arrays_per_core)
    engines = max(1, chip.dma.engines // apc)
    per_engine = chip.dma.bytes_per_cycle * chip.dma.engines / (apc * engines)
    return engines, per_engine


def capacity(chip, split: Split) -> tuple[int, int]:
    """(scratchpad bytes, accumulator bytes) available to one array."""
    sp = chip.core.scratchpad
    apc = max(1, split.arrays_per_core)
    return int(sp.capacity_mib * 2**20) // apc, int(sp.accumulator_mib * 2**20) // apc


def footprint(pb: Problem, mb: int, kb: int, nb: int, acc_bytes_avail: int) -> int:
    """Scratchpad bytes of a blocking (two slots per operand, two output tiles)."""
    x = 2 * _cdiv(mb * kb * pb.x_bits, 8)
    w = 2 * _cdiv(kb * nb * pb.w_bits, 8)
    o = 2 * _cdiv(mb * nb * pb.acc_bits, 8)
    if acc_bytes_avail and o <= acc_bytes_avail:
        o = 0
    elif acc_bytes_avail:
        return 1 << 62
    return x + w + o


def _sizes(base: int, extent: int) -> list[int]:
    out = []
    s = base
    while s < extent:
        out.append(s)
        s *= 2
    out.append(extent)
    return out


def candidates(chip, pb: Problem, rates: Rates, split: Split) -> list[Blocks]:
    """Every blocking that fits the scratchpad share; ValueError if none does."""
    arr = chip.core.array
    cap, acc = capacity(chip, split)
    if pb.dataflow == "os":
        ms = _sizes(min(arr.rows, pb.m), pb.m)
        ks = _sizes(min(arr.rows, pb.k), pb.k)
    else:
        ms = _sizes(min(arr.rows, pb.m), pb.m)
        ks = _sizes(min(rates.stationary_rows, pb.k), pb.k)
    ns = _sizes(min(arr.cols, pb.n), pb.n)
    out = []
    for mb in ms:
        for kb in ks:
            for nb in ns:
                if footprint(pb, mb, kb, nb, acc) <= cap:
                    out.append(Blocks(mb, kb, nb, 0))
                    # the other loop order only differs when both M and N have several blocks
                    if _cdiv(pb.m, mb) > 1 and _cdiv(pb.n, nb) > 1:
                        out.append(Blocks(mb, kb, nb, 1))
    if not out:
        mb, kb, nb = ms[0], ks[0], ns[0]
        need = footprint(pb, mb, kb, nb, 0)
        raise ValueError(
            f"scratchpad too small for the minimal tile: {pb.dataflow} block {mb}x{kb}x{nb} "
            f"needs {need} bytes (double-buffered), but each array has {cap} bytes of "
            f"scratchpad" + (f" and {acc} bytes of accumulator" if acc else ""))
    return out


def traffic_bytes(pb: Problem, blk: Blocks) -> float:
    """DRAM bytes of a blocking (closed form of the engine's reuse rule)."""
    nm, nk, nn = _cdiv(pb.m, blk.mb), _cdiv(pb.k, blk.kb), _cdiv(pb.n, blk.nb)
    x = pb.m * pb.k * pb.x_bits / 8
    w = pb.k * pb.n * pb.w_bits / 8
    o = pb.m * pb.n * pb.o_bits / 8
    if blk.order == 0:
        xt = x * (nn if nk > 1 else 1)
        wt = w * (1 if (nk == 1 and nn == 1) else nm)
    else:
        wt = w * (nm if nk > 1 else 1)
        xt = x * (1 if (nk == 1 and nm == 1) else nn)
    return pb.batch * (xt + wt + o)


def busy_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Array-busy cycles of a blocking (a lower bound on its cycles)."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = 0
    for mb, cm in _parts(pb.m, blk.mb):
        for kb, ck in _parts(pb.k, blk.kb):
            for nb, cn in _parts(pb.n, blk.nb):
                if pb.dataflow == "os":
                    f = _cdiv(mb, R) * _cdiv(nb, C) * _cdiv(kb * rates.os_den, rates.os_num)
                else:
                    f = _cdiv(kb, rates.stationary_rows) * _cdiv(nb, C) * \
                        _cdiv(mb * rates.ws_den, rates.ws_num)
                total += f * cm * ck * cn
    return pb.batch * total


def period_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Sum of every fold's steady-state period: a lower bound on the memory-free cycles
    (OS: Σ max(ke, R); WS: Σ max(me, 2R + C − 2); the first fold's fill and the last fold's
    drain exceed the period they replace)."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = 0
    for mb, cm in _parts(pb.m, blk.mb):
        for kb, ck in _parts(pb.k, blk.kb):
            for nb, cn in _parts(pb.n, blk.nb):
                if pb.dataflow == "os":
                    ke = _cdiv(kb * rates.os_den, rates.os_num)
                    f = _cdiv(mb, R) * _cdiv(nb, C) * max(ke, R)
                else:
                    me = _cdiv(mb * rates.ws_den, rates.ws_num)
                    f = _cdiv(kb, rates.stationary_rows) * _cdiv(nb, C) * max(me, 2 * R + C - 2)
                total += f * cm * ck * cn
    return pb.batch * total


def compute_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Exact memory-free cycles of a blocking (closed form of the engine's recurrence).

    OS: ``L`` advances by ``max(ke, R)`` per fold after the first, which ends at ``ke − 1``;
    the last output is ``L + 2R + C − 2``. WS: the first row of fold t+1 is
    ``max(s_t + 2R + C − 2, s_t + me_t)``, the first fold's is R, the last output
    ``s_last + me_last − 1 + R + C − 1``. The first fold belongs to block (0, 0, 0), the last
    to the block with every index at its maximum (ragged edges).
    """
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = period_cycles(chip, pb, blk, rates)
    m0, k0, n0 = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    if pb.dataflow == "os":
        ke0 = _cdiv(k0 * rates.os_den, rates.os_num)
        return total - max(ke0, R) + ke0 - 1 + 2 * R + C - 1
    mel = _cdiv(ml * rates.ws_den, rates.ws_num)
    per_l = max(mel, 2 * R + C - 2)
    return R + total - per_l + mel - 1 + R + C


def edge_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes that must cross DRAM before the first fold (first X and W blocks) plus after the
    last one (the last output tile)."""
    m0, k0, n0 = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    nl = pb.n - (_cdiv(pb.n, blk.nb) - 1) * blk.nb
    return (m0 * k0 * pb.x_bits + k0 * n0 * pb.w_bits + ml * nl * pb.o_bits) / 8


def _parts(extent: int, block: int):
    full, rem = divmod(extent, block)
    out = []
    if full:
        out.append((block, full))
    if rem:
        out.append((rem, 1))
    return out


def dram_timing(chip) -> DramTiming:
    return DramTiming.from_dram(chip.dram)



def candidate_table(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float):
    """Vectorised :func:`candidates` with their estimate and lower bound.

    Returns (mb, kb, nb, order, est, lb) NumPy arrays; the same numbers as
    :func:`compute_cycles`, :func:`traffic_bytes` and :func:`edge_bytes` per candidate (the
    tests compare them). ``lb`` = max(memory-free cycles + first and last blocks' bytes at the
    array's share of the pin bandwidth, all bytes at that rate); ``est`` = max(memory-free
    cycles, bytes at 90 % of it) + one DMA setup per block per engine.
    """
    cs = candidates(chip, pb, rates, split)
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    mb = np.array([c.mb for c in cs], dtype=np.int64)
    kb = np.array([c.kb for c in cs], dtype=np.int64)
    nb = np.array([c.nb for c in cs], dtype=np.int64)
    order = np.array([c.order for c in cs], dtype=np.int64)

    def cd(a, b):
        return -(-a // b)

    def parts(extent, blk):
        return [(extent // blk, blk), ((extent % blk > 0).astype(np.int64), extent % blk)]

    periods = np.zeros(len(cs), dtype=np.int64)
    for cm, sm in parts(pb.m, mb):
        for ck, sk in parts(pb.k, kb):
            for cn, sn in parts(pb.n, nb):
                if pb.dataflow == "os":
                    f = cd(sm, R) * cd(sn, C) * np.maximum(cd(sk * rates.os_den, rates.os_num), R)
                else:
                    f = cd(sk, rates.stationary_rows) * cd(sn, C) * \
                        np.maximum(cd(sm * rates.ws_den, rates.ws_num), 2 * R + C - 2)
                periods += f * cm * ck * cn
    periods *= pb.batch
    k0 = np.minimum(kb, pb.k)
    m0, n0 = np.minimum(mb, pb.m), np.minimum(nb, pb.n)
    ml = pb.m - (cd(pb.m, mb) - 1) * mb
    nl = pb.n - (cd(pb.n, nb) - 1) * nb
    if pb.dataflow == "os":
        ke0 = cd(k0 * rates.os_den, rates.os_num)
        comp = periods - np.maximum(ke0, R) + ke0 - 1 + 2 * R + C - 1
    else:
        mel = cd(ml * rates.ws_den, rates.ws_num)
        comp = R + periods - np.maximum(mel, 2 * R + C - 2) + mel - 1 + R + C
    nm, nk, nn = cd(pb.m, mb), cd(pb.k, kb), cd(pb.n, nb)
    x = pb.m * pb.k * pb.x_bits / 8
    w = pb.k * pb.n * pb.w_bits / 8
    o = pb.m * pb.n * pb.o_bits / 8
    xt0 = x * np.where(nk > 1, nn, 1)
    wt0 = w * np.where((nk == 1) & (nn == 1), 1, nm)
    wt1 = w * np.where(nk > 1, nm, 1)
    xt1 = x * np.where((nk == 1) & (nm == 1), 1, nn)
    traffic = pb.batch * (np.where(order == 0, xt0 + wt0, xt1 + wt1) + o)
    edge = (m0 * k0 * pb.x_bits + k0 * n0 * pb.w_bits + ml * nl * pb.o_bits) / 8
    t = dram_timing(chip)
    mem_ns = refresh_lower_bound_ns(traffic / peak_bpc / chip.clock_ghz, t.t_refi_ns,
                                    t.t_rfc_ns + t.t_rcd_ns + t.t_cl_ns)
    lb = np.maximum(comp + edge / peak_bpc, mem_ns * chip.clock_ghz)
    est = np.maximum(comp, traffic / (0.9 * peak_bpc))
    est = est + pb.batch * nm * nk * nn * chip.dma.setup_cycles / dma_share(chip, split)[0]
    return cs, est, lb
