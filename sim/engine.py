"""The engine: one array's tile schedule as a Numba recurrence (DMA-in → compute → write-back).

The problem handed to :func:`run_schedule` is already *oriented*: ``X[M×K] · W[K×N] = O[M×N]``
where, for output- and weight-stationary dataflows, X = A, W = B, O = C, and for input
stationary X = Bᵀ, W = Aᵀ, O = Cᵀ (the operands keep their physical row-major layout in DRAM;
a transposed flag turns a logical block into the right 2-D descriptor). ``batch`` independent
problems run one after another.

Blocks. The mapper's block (Mb, Kb, Nb) is what one double-buffered scratchpad slot holds.
Blocks are visited with K innermost and either M (``order`` 0) or N (``order`` 1) outermost; a
block's X (or W) block is loaded only when it differs from the previous block's. Each operand
has two slots: a new block goes into the slot not holding the current one, as soon as the last
block that used that slot has presented its last input to the array. The output tile (Mb×Nb
accumulators) has two slots too; it is written back after its last K block and its slot is
free when the write-back completes. Loads of block b+1 are issued before block b computes.

Array timeline per block (design.md §4, :mod:`diptych.sim.timing`), with ``L`` the last-input
cycle of the previous fold (OS) or ``s_first``/``s_last`` its first and last streamed rows (WS):

* OS: ``ceil(mb/R)·ceil(nb/C)`` folds of depth ``ke`` = ``ceil(kb / rate)``; a fold's first
  step is after ``L`` and after the block's data is ready; ``L' = max(first + ke − 1, L + R)``
  (:func:`~diptych.sim.timing.os_last_step`). Later folds of the block follow at
  ``max(ke, R)`` (``os_period``). The last output is ``L + 2R + C − 2`` (``os_last_output``).
* WS: ``ceil(kb/Rk)·ceil(nb/C)`` folds (``Rk`` = R × max(1, rate) stationary rows) of ``me`` =
  ``ceil(mb / min(rate, 1))`` streamed rows; weight load ``w = max(s_first + R + C − 2,
  ready)`` (``ws_weight_load``), first row ``max(w + R, s_last + 1)`` (``ws_first_row``);
  later folds follow at ``max(me, 2R + C − 2)`` (``ws_period``). The last output is
  ``s_last + R + C − 1`` (``ws_row_output``). A chip with a faster install path
  (``P_WS_LOAD_P`` rows per cycle, ``P_WS_WAVE`` = 0 for a global swap) replaces R by
  ``ceil(R / p)`` in the first row and ``R + C − 2`` by 0 in the weight load.

These rules are the functions of :mod:`diptych.sim.timing`, compiled here; they are not
restated in this module.

Every delay beyond the memory-free recurrence is charged to DRAM (data not ready) or to
write-back (output slot still draining), so ``cycles = compute_cycles + dram + write-back``
exactly; ``compute_cycles − busy`` is fill/drain (and issue-rule gaps).

Shared buffer (``P_X_SB``/``P_W_SB``, modes of :class:`diptych.sim.mapper.Blocks`). In modes 1
and 2 an operand's DRAM loads count ``1/dup`` of their bytes and are time-shared by
``active/dup`` arrays (the ``dup`` arrays sharing the slice fetch it once); in mode 2 a block
touched before by this array (X with ``j > 0``, W with ``i > 0``) comes from the shared buffer
instead, a server at this array's share of its bandwidth (``F_SB_BPC``), after the DMA setup
and through the DMA port like any load.

Resident operands (``P_X_SRC``/``P_W_SRC``/``P_O_DST``, :data:`SRC_SCRATCHPAD` or
:data:`SRC_SHARED_BUFFER`: the residency planner keeps the tensor on chip between ops). A block
of an operand resident in the scratchpad moves into its tile slot at this array's share of the
core's scratchpad bandwidth (``F_SP_BPC``; a server, one block at a time, no DMA descriptor and
no DRAM); a result kept in the scratchpad leaves its output slot the same way. An operand
resident in the shared buffer is served like a mode-2 re-read (DMA setup and port, the buffer's
server); a result kept there is written through the DMA port to the buffer's server. Neither
moves a DRAM byte; their bytes count as SRAM (scratchpad) or shared-buffer bytes.

Waves and core-shared blocks (:class:`diptych.sim.mapper.Split`). The batch elements from
``P_TAIL_BT`` on are the representative array's tile in a partly full last wave: their DRAM
transfers are time-shared by ``F_SHARE_TAIL`` arrays instead of ``F_SHARE``. An X (W) block
shared by ``F_X_CDUP`` (``F_W_CDUP``) arrays of this core is loaded once for them: this array
counts ``1/cdup`` of its bytes (DRAM, scratchpad writes, shared-buffer re-reads), its DMA port
and shared-buffer time are those of ``1/cdup`` of the bytes, and without the shared buffer its
DRAM transfer is time-shared by ``share / cdup`` arrays (with it, ``share / dup`` as above).

DMA. Descriptors go round-robin to the engines; a descriptor is issued once the one
``max_outstanding`` earlier on its engine has completed, its data starts ``setup`` cycles later
(and after the engine's port is free; a DRAM descriptor also waits the NoC and D2D latency,
``F_DRAM_SETUP_NS``), moves at the engine rate, and completes when both the port and the DRAM
pseudo-channels (:mod:`diptych.sim.dram`, with the NoC/D2D bandwidth cap) are done.
"""

from __future__ import annotations

import math

import numpy as np

import os as _os

from . import timing as T
from .dram import F_BLACKOUT, F_LAT, F_TREFI, S_AGG, S_BUSY, dram_transfer, run_state
from .jit import borrowed, compile_pure, invalidate_stale_cache, jit

_here = _os.path.dirname(_os.path.abspath(__file__))
invalidate_stale_cache(__file__, *(_os.path.join(_here, f) for f in
                                   ("dram.py", "dram_counts.py", "jit.py", "timing.py")))

# The array-timing contract, compiled from its single statement in sim/timing.py (bound at
# import: with NUMBA_DISABLE_JIT=1 a replaced timing function takes effect here if it is
# replaced before this module is imported).
(_os_fold_steps, _ws_fold_rows, _os_last_step, _os_last_output, _os_period, _ws_weight_load,
 _ws_first_row, _ws_row_output, _ws_period) = compile_pure(
    T, ("os_fold_steps", "ws_fold_rows", "os_last_step", "os_last_output", "os_period",
        "ws_weight_load", "ws_first_row", "ws_row_output", "ws_period"))

# integer parameters
(P_DF, P_R, P_C, P_M, P_K, P_N, P_BATCH, P_MB, P_KB, P_NB, P_ORDER, P_OS_NUM, P_OS_DEN,
 P_WS_NUM, P_WS_DEN, P_RK,
 P_X_BASE, P_X_LD, P_X_BITS, P_X_T, P_X_BSTRIDE,
 P_W_BASE, P_W_LD, P_W_BITS, P_W_T, P_W_BSTRIDE,
 P_O_BASE, P_O_LD, P_O_BITS, P_O_T, P_O_BSTRIDE,
 P_ACC_BITS, P_ENGINES, P_MAXOUT, P_SETUP, P_MEMORY, P_CUTOFF, P_PERIODS, P_TRAFFIC,
 P_X_SB, P_W_SB, P_BEST, P_X_SRC, P_W_SRC, P_O_DST, P_TAIL_BT, P_WS_LOAD_P, P_WS_WAVE,
 N_IPARAMS) = range(49)
# P_WS_LOAD_P, P_WS_WAVE: the WS weight-install path (timing.ws_install_cycles, ws_weight_load):
# weight rows written per cycle (1: systolic shift-in) and 1 swap wave / 0 global swap
# operand locations (P_X_SRC, P_W_SRC: where X/W are read from; P_O_DST: where O is written)
SRC_DRAM, SRC_SCRATCHPAD, SRC_SHARED_BUFFER = 0, 1, 2
# float parameters (F_X_DUP/F_W_DUP: arrays sharing one X/W slice; F_SB_BPC: this array's
# share of the shared buffer's bytes per cycle; F_SP_BPC: its share of its core's scratchpad
# bandwidth, which serves resident operands; F_DRAM_SETUP_NS: NoC + D2D latency added to
# each DRAM descriptor's setup, :mod:`diptych.sim.fabric`; F_X_CDUP/F_W_CDUP: arrays of this
# core sharing its X/W block in the scratchpad; F_SHARE_TAIL: the DRAM time-sharing factor of
# the batch elements from P_TAIL_BT on, the last wave's tile)
(F_GHZ, F_DMA_BPC, F_SHARE, F_X_DUP, F_W_DUP, F_SB_BPC, F_SP_BPC, F_DRAM_SETUP_NS, F_X_CDUP,
 F_W_CDUP, F_SHARE_TAIL, N_FPARAMS) = range(12)
# outputs
(O_CYCLES, O_BUSY, O_DRAM_STALL, O_WB_STALL, O_DRAM_RD, O_DRAM_WR, O_SRAM_RD, O_SRAM_WR,
 O_BLOCKS, O_FOLDS, O_TRANSFERS, O_DRAM_BUSY_NS, O_NTRACE_BLOCKS, O_NTRACE_PC, O_LAST_OUT,
 O_ABORTED, O_SB_RD, N_OUT) = range(18)
# trace columns per block
(T_BT, T_I, T_J, T_K, T_XS, T_XE, T_WS, T_WE, T_CS, T_CE, T_OS, T_OE, N_TRACE) = range(13)
NEG = -(1 << 60)
#: Cycle counts the kernels convert from float times (ns × GHz) must stay below this (an
#: int64 with headroom for the sums they enter): above it, or NaN, ``int(ceil(x))`` wraps
#: to a negative count. Loaded chips and ops are bounded far below (docs/limits.md); the
#: check turns what would be a wrapped count into a ValueError naming the quantity.
MAX_CYCLES_F = float(1 << 62)


@jit(inline="always")
def _cdiv(a, b):
    return -(-a // b)


@jit(inline="always")
def _descriptor(base, ld, bits, trans, bstride, bt, r0, c0, nr, nc):
    """Logical block (r0, c0, nr × nc) of a row-major (or transposed) operand → 2-D descriptor."""
    if trans == 0:
        rows = nr
        row_bytes = (nc * bits + 7) // 8
        addr = base + bt * bstride + r0 * ld + (c0 * bits) // 8
    else:
        rows = nc
        row_bytes = (nr * bits + 7) // 8
        addr = base + bt * bstride + c0 * ld + (r0 * bits) // 8
    stride = ld
    if rows > 1 and stride == row_bytes:
        row_bytes = rows * row_bytes
        rows = 1
    return addr, rows, row_bytes, stride


@jit(no_cpython_wrapper=True)
def _dma(req_ns, addr, rows, row_bytes, stride, is_write, share, sb, div, ip, fp, dip, dfp, ds,
         pat, eng, sbs, pc_s, pc_e, tr_pc, out):
    """Issue one descriptor; returns (data start ns, completion ns).

    ``sb`` = 1: the data comes from the shared buffer (a server at this array's share of its
    bandwidth, state ``sbs[0]``) instead of DRAM; ``share``: the DRAM time-sharing factor;
    ``div``: the arrays of this core sharing the block (the core's port and the shared buffer
    carry it once for them: this array's part is ``1/div`` of its bytes)."""
    n_eng = ip[P_ENGINES]
    maxout = ip[P_MAXOUT]
    ghz = fp[F_GHZ]
    cnt = int(out[O_TRANSFERS])
    e = cnt % n_eng
    slot = (cnt // n_eng) % maxout
    t_issue = max(req_ns, eng[e, 1 + slot])
    setup_ns = ip[P_SETUP] / ghz if sb == 1 else ip[P_SETUP] / ghz + fp[F_DRAM_SETUP_NS]
    start = max(t_issue + setup_ns, eng[e, 0])
    if sb == 1:   # the shared buffer (resident operands and mode-2 re-reads share its server)
        s_start = max(start, sbs[0])
        dram_end = s_start + (rows * row_bytes / div) / (fp[F_SB_BPC] * ghz)
        sbs[0] = dram_end
    else:
        dram_end = dram_transfer(start, addr, rows, row_bytes, stride, is_write, share, dip,
                                 dfp, ds, pat, pc_s, pc_e)
    port_end = start + (rows * row_bytes / div) / (fp[F_DMA_BPC] * ghz)
    eng[e, 0] = port_end
    done = max(dram_end, port_end)
    eng[e, 1 + slot] = done
    out[O_TRANSFERS] += 1
    if tr_pc.shape[0] > 0 and sb == 0:
        for p in range(pc_s.shape[0]):
            if pc_s[p] >= 0.0:
                n = int(out[O_NTRACE_PC])
                if n < tr_pc.shape[0]:
                    tr_pc[n, 0] = p
                    tr_pc[n, 1] = pc_s[p]
                    tr_pc[n, 2] = pc_e[p]
                    tr_pc[n, 3] = is_write
                    out[O_NTRACE_PC] += 1
    return start, done


@jit(inline="always")
def _local(req_ns, nbytes, fp, sbs):
    """A block moved within the scratchpad (a resident operand into its tile slot, or a
    result out of its output slot): the scratchpad server at this array's share of the
    core's bandwidth, one block at a time. Returns (start ns, completion ns)."""
    start = max(req_ns, sbs[1])
    done = start + nbytes / (fp[F_SP_BPC] * fp[F_GHZ])
    sbs[1] = done
    return start, done


@jit(inline="always")
def _operand(src, mode, touched, dup, cdup, share, req_ns, addr, rows, rb, st, memory, ip, fp,
             dip, dfp, ds, pat, eng, sbs, pc_s, pc_e, tr_pc, out):
    """Count and (with ``memory``) play the load of one X or W block; returns (data start ns,
    completion ns), (0, 0) without ``memory``.

    ``src``: where the operand lives (``SRC_*``); ``mode``: its shared-buffer mode (1, every
    load comes from DRAM once for the ``dup`` arrays sharing the slice; 2, only the first touch
    does and later touches, ``touched``, are shared-buffer re-reads); without a mode the
    ``cdup`` arrays of this core sharing the block still load it once. A resident operand
    never uses the shared-buffer modes (mapper): from the scratchpad it moves within the core,
    from the shared buffer it is served by the buffer's server; either way once for the core's
    sharing arrays. ``share``: the DRAM time-sharing factor of this batch element."""
    sb = 1 if ((mode == 2 and touched) or src == 2) else 0
    dd = dup if mode > 0 else cdup
    if src == 1:
        out[O_SRAM_RD] += rows * rb / cdup
    elif sb == 1:
        out[O_SB_RD] += rows * rb / cdup
    else:
        out[O_DRAM_RD] += rows * rb / dd
    out[O_SRAM_WR] += rows * rb / cdup
    if memory != 1:
        return 0.0, 0.0
    if src == 1:
        return _local(req_ns, rows * rb / cdup, fp, sbs)
    return _dma(req_ns, addr, rows, rb, st, np.int64(0), share / dd, np.int64(sb), cdup, ip,
                fp, dip, dfp, ds, pat, eng, sbs, pc_s, pc_e, tr_pc, out)


@jit(inline="always")
def _proj_compute(df, consume, periods_left, R, C):
    """The compute part of :func:`run_schedule`'s bound after a block whose last input is at
    ``consume``, with ``periods_left`` cycles of fold periods still to play: OS, ``L``
    advances by at least a period per fold and the last output is ``2R + C − 1`` cycles after
    the last input; WS, the last row of the last fold is at least ``periods_left − R + 1``
    after this one (a short last fold can take less than its period)."""
    if df == 0:
        return _os_last_output(consume + periods_left, R, C) + 1
    return consume + periods_left - R + 2


@jit(inline="always")
def _rem_ns(ip, fp, dip, dfp, out, p_n):
    """The DRAM part of :func:`run_schedule`'s bound: the bytes not yet moved
    (``P_TRAFFIC`` less those counted) at this array's share of the pins on the aggregate
    server, ns."""
    rem = ip[P_TRAFFIC] - (out[O_DRAM_RD] + out[O_DRAM_WR])
    if ip[P_TAIL_BT] >= ip[P_BATCH]:
        return rem / dip[3] * dfp[0] * fp[F_SHARE] / p_n
    # the last wave's bytes (the batch elements from P_TAIL_BT on, moved last) at its own
    # share
    tail = ip[P_TRAFFIC] / ip[P_BATCH] * (ip[P_BATCH] - ip[P_TAIL_BT])
    rt = min(max(rem, 0.0), tail)
    return ((rem - rt) * fp[F_SHARE] + rt * fp[F_SHARE_TAIL]) / dip[3] * dfp[0] / p_n


@jit(inline="always")
def _last_writeback_ns(ip, fp, dfp, nmb, nnb):
    """A lower bound on the last output tile's write-back, from its request (its tile's last
    output + 1) to its completion, ns: to DRAM its DMA setup and the NoC latency, then the
    longer of the DRAM latency (tRCD + tCL) and its port time; to the shared buffer its setup,
    then the longer of its port and buffer times; to the scratchpad its bytes at this array's
    share (:func:`_dma`, :func:`_local`). The run's cycles are at least its completion."""
    Mb = ip[P_MB]
    Nb = ip[P_NB]
    a, rows, rb, st = _descriptor(ip[P_O_BASE], ip[P_O_LD], ip[P_O_BITS], ip[P_O_T],
                                  ip[P_O_BSTRIDE], ip[P_BATCH] - 1, (nmb - 1) * Mb,
                                  (nnb - 1) * Nb, ip[P_M] - (nmb - 1) * Mb,
                                  ip[P_N] - (nnb - 1) * Nb)
    nbytes = rows * rb
    ghz = fp[F_GHZ]
    dst = ip[P_O_DST]
    if dst == 1:
        return nbytes / (fp[F_SP_BPC] * ghz) if fp[F_SP_BPC] > 0.0 else 0.0
    port = nbytes / (fp[F_DMA_BPC] * ghz) if fp[F_DMA_BPC] > 0.0 else 0.0
    if dst == 2:
        buf = nbytes / (fp[F_SB_BPC] * ghz) if fp[F_SB_BPC] > 0.0 else 0.0
        return ip[P_SETUP] / ghz + max(port, buf)
    return ip[P_SETUP] / ghz + fp[F_DRAM_SETUP_NS] + max(port, dfp[F_LAT])


@jit
def run_schedule(ip, fp, dip, dfp, pat, tr_blocks, tr_pc):
    """Play one array's block schedule; returns the output vector (see ``O_*``).

    With ``ip[P_CUTOFF]`` > 0 the run stops as soon as it cannot finish before that cycle
    (``ip[P_PERIODS]`` must then hold the sum of all fold periods), or, with ``ip[P_BEST]``
    > 0, once a bound is above that many cycles (it can neither win nor tie); the bound is
    tested after each block's timing, before and after the next block's loads are issued
    (docs/engine.md, "Engine"). ``out[O_ABORTED]`` is then 1 and ``out[O_CYCLES]`` a lower
    bound; the other outputs of a stopped run are partial.

    ``pat`` is the DRAM pattern cache (:func:`diptych.sim.dram.pattern_cache`): counts are
    exact, so it may be shared between runs on the same DRAM geometry."""
    # Owner-less views of every array the per-transfer helpers take (sim/jit.py ``borrowed``):
    # a call to ``_operand``/``_dma`` otherwise updates each argument's (and each tuple
    # member's) reference count with an atomic instruction, ~100 of them per DRAM transfer.
    # The owners outlive the views: the arguments are the caller's, and the arrays made here
    # are used again after the loop (``out_own``, ``ds_own``, ``keep``).
    out_own = np.zeros(N_OUT)
    out = borrowed(out_own)
    ip = borrowed(ip)
    fp = borrowed(fp)
    dip = borrowed(dip)
    dfp = borrowed(dfp)
    pat = (borrowed(pat[0]), borrowed(pat[1]), borrowed(pat[2]), borrowed(pat[3]),
           borrowed(pat[4]), borrowed(pat[5]), borrowed(pat[6]), borrowed(pat[7]),
           borrowed(pat[8]), borrowed(pat[9]))
    tr_blocks = borrowed(tr_blocks)
    tr_pc = borrowed(tr_pc)
    # typed (not literal) constants: literal arguments would compile extra specialisations
    neg = np.int64(NEG)
    zero = np.int64(0)
    one = 1.0
    write = np.int64(1)
    df = ip[P_DF]
    R = ip[P_R]
    C = ip[P_C]
    M = ip[P_M]
    K = ip[P_K]
    N = ip[P_N]
    Mb = ip[P_MB]
    Kb = ip[P_KB]
    Nb = ip[P_NB]
    memory = ip[P_MEMORY]
    ghz = fp[F_GHZ]
    nmb = _cdiv(M, Mb)
    nkb = _cdiv(K, Kb)
    nnb = _cdiv(N, Nb)
    per_batch = nmb * nnb * nkb
    total = ip[P_BATCH] * per_batch
    acc_bytes = ip[P_ACC_BITS] / 8.0
    # DRAM and DMA state
    p_n = dip[0]
    ds_own = run_state(p_n)
    ds = (borrowed(ds_own[0]), borrowed(ds_own[1]), borrowed(ds_own[2]), borrowed(ds_own[3]),
          borrowed(ds_own[4]))
    # per-pseudo-channel spans of the last transfer: only kept when tracing
    n_span = p_n if tr_pc.shape[0] > 0 else 0
    pc_s_own = np.zeros(n_span)
    pc_e_own = np.zeros(n_span)
    eng_own = np.zeros((ip[P_ENGINES], 1 + ip[P_MAXOUT]))
    # free time of the shared buffer's server [0] and the scratchpad's [1]
    sbs_own = np.zeros(2)
    keep = (pc_s_own, pc_e_own, eng_own, sbs_own)
    pc_s = borrowed(pc_s_own)
    pc_e = borrowed(pc_e_own)
    eng = borrowed(eng_own)
    sbs = borrowed(sbs_own)
    share = fp[F_SHARE]
    # operand slots: [slot] -> cycle when free; current slot index; ready ns of current block
    x_free = np.zeros(2)
    w_free = np.zeros(2)
    out_free = np.zeros(2)
    x_cur = 1
    w_cur = 1
    x_key = neg
    w_key = neg
    x_ready = 0.0
    w_ready = 0.0
    nxt_x_ready = 0.0
    nxt_w_ready = 0.0
    nxt_x_key = neg
    nxt_w_key = neg
    n_out = 0
    nxt_x_slot = 0
    nxt_w_slot = 0
    # array state
    L = neg
    s_first = neg
    s_last = neg
    last_out = 0
    wb_end_cyc = 0
    periods_done = 0
    cutoff = ip[P_CUTOFF]
    # against the best: the last tile's write-back follows the last output (cycles, less one
    # for the ns round trip), so the run ends at least this much after it
    # WS: a fold's first row is at least its predecessor's period after the predecessor's
    # (ws_weight_load, ws_first_row, ws_period), so the last row is at least the remaining
    # periods less the last fold's ``period − rows`` after this block's last row
    wb_min = -1.0
    ws_slack = 0
    if cutoff > 0 and memory == 1 and ip[P_BEST] > 0:
        wb_min = _last_writeback_ns(ip, fp, dfp, nmb, nnb) * ghz - 1.0
        if df != 0:
            me_l = _ws_fold_rows(M - (nmb - 1) * Mb, ip[P_WS_NUM], ip[P_WS_DEN])
            ws_slack = _ws_period(R, C, me_l, ip[P_WS_LOAD_P], ip[P_WS_WAVE]) - me_l
    order = ip[P_ORDER]
    # block indices (batch, i, j, k) of the next block to issue, stepped block by block (K
    # innermost, then N (order 0) or M (order 1)): the same sequence as dividing the block
    # number, without a division; the block issued last (p_*) and the block being computed
    # (c_*) keep their own
    n_bt = zero
    n_i = zero
    n_j = zero
    n_k = zero
    p_bt = zero
    p_i = zero
    p_j = zero
    p_k = zero
    c_bt = zero
    c_i = zero
    c_j = zero
    c_k = zero
    # pending loads for block b are issued at iteration b-1 (b = 0 before the loop)
    for b in range(-1, total):
        if b >= 0:
            # ---- block b's timing (its statistics are counted after block b+1's loads) ----
            # It reads nothing that block b+1's loads write, so the early-out test below can
            # run before they are issued (and their DRAM patterns counted).
            bt = c_bt
            i = c_i
            j = c_j
            k = c_k
            mb = min(Mb, M - i * Mb)
            kb = min(Kb, K - k * Kb)
            nbb = min(Nb, N - j * Nb)
            ready = 0
            ofree = 0
            if memory == 1:
                ready_c = max(x_ready, w_ready) * ghz
                if not ready_c < MAX_CYCLES_F:
                    raise ValueError("engine: a block's operand ready time (ns x GHz) is not a "
                                     "cycle count below 2**62: the op is too large to simulate")
                ready = int(math.ceil(ready_c))
                if k == 0:
                    ofree = int(out_free[n_out % 2])
            ncf = _cdiv(nbb, C)
            if df == 0:
                nf = _cdiv(mb, R) * ncf
                ke = _os_fold_steps(kb, ip[P_OS_NUM], ip[P_OS_DEN])
                per = _os_period(R, ke)
                if L == neg:
                    first = max(ready, ofree)
                    Ln = first + ke - 1
                    delay = first
                else:
                    first = max(L + 1, ready, ofree)
                    Ln = _os_last_step(first, ke, L, R)
                    delay = Ln - (L + per)
                start_c = first
                L = Ln + (nf - 1) * per
                consume = L
                lo = _os_last_output(L, R, C)
            else:
                nkf = _cdiv(kb, ip[P_RK])
                nf = nkf * ncf
                me = _ws_fold_rows(mb, ip[P_WS_NUM], ip[P_WS_DEN])
                wp, wv = ip[P_WS_LOAD_P], ip[P_WS_WAVE]
                per = _ws_period(R, C, me, wp, wv)
                if s_first == neg:
                    w = ready
                    s0 = max(_ws_first_row(w, neg, R, wp), ofree)
                    delay = s0 - _ws_first_row(zero, neg, R, wp)
                else:
                    w_nd = _ws_weight_load(s_first, R, C, wv)
                    s0_nd = _ws_first_row(w_nd, s_last, R, wp)
                    w = max(w_nd, ready)
                    s0 = max(_ws_first_row(w, s_last, R, wp), ofree, ready)
                    delay = s0 - s0_nd
                start_c = w
                s_first = s0 + (nf - 1) * per
                s_last = s_first + me - 1
                consume = s_last
                lo = _ws_row_output(s_last, R, C)
            periods_done += nf * per
            if cutoff > 0:
                # the early out, before block b+1's loads: the compute part of the bound
                # below (the bound after those loads is at least this, so that test would
                # stop the run at this block too) ...
                proj = _proj_compute(df, consume, ip[P_PERIODS] - periods_done, R, C)
                stop = proj >= cutoff
                if not stop and wb_min >= 0.0:
                    # ... or a bound on the last output + 1 (OS: the compute part, as L
                    # advances at least a period per fold; WS: the last row's, then its
                    # drain) plus the last write-back above the best
                    if df == 0:
                        lo1 = proj
                    else:
                        lo1 = _ws_row_output(consume + (ip[P_PERIODS] - periods_done) - ws_slack,
                                             R, C) + 1
                    stop = lo1 + wb_min > ip[P_BEST]
                if not stop and memory == 1 and ip[P_BEST] > 0:
                    # ... or the bound with the DRAM part as it stands (every byte not yet
                    # moved, block b+1's included, at its share of the pins) above the best:
                    # the run cannot win nor tie, whether or not it would have gone on
                    pm = (ds[S_AGG][0] + _rem_ns(ip, fp, dip, dfp, out, p_n)) * ghz
                    stop = max(proj, pm) > ip[P_BEST]
                if stop:
                    out[O_CYCLES] = proj
                    out[O_ABORTED] = 1
                    return out_own
        # ---- issue the loads of block b+1 -------------------------------------------------
        nb_ = b + 1
        if nb_ < total:
            bt1 = n_bt
            i1 = n_i
            j1 = n_j
            k1 = n_k
            p_bt = bt1
            p_i = i1
            p_j = j1
            p_k = k1
            n_k += 1
            if n_k == nkb:
                n_k = zero
                if order == 0:
                    n_j += 1
                    if n_j == nnb:
                        n_j = zero
                        n_i += 1
                else:
                    n_i += 1
                    if n_i == nmb:
                        n_i = zero
                        n_j += 1
                if (n_i == nmb) if order == 0 else (n_j == nnb):
                    n_i = zero
                    n_j = zero
                    n_bt += 1
            mb1 = min(Mb, M - i1 * Mb)
            kb1 = min(Kb, K - k1 * Kb)
            nbb1 = min(Nb, N - j1 * Nb)
            xk = (bt1 * nmb + i1) * nkb + k1
            wk = (bt1 * nkb + k1) * nnb + j1
            x_load = xk != x_key
            w_load = wk != w_key
            nxt_x_key = xk
            nxt_w_key = wk
            if x_load:
                a, rows, rb, st = _descriptor(ip[P_X_BASE], ip[P_X_LD], ip[P_X_BITS], ip[P_X_T],
                                              ip[P_X_BSTRIDE], bt1, i1 * Mb, k1 * Kb, mb1, kb1)
                s1, d1 = _operand(ip[P_X_SRC], ip[P_X_SB], j1 > 0, fp[F_X_DUP], fp[F_X_CDUP],
                                  share if bt1 < ip[P_TAIL_BT] else fp[F_SHARE_TAIL],
                                  x_free[1 - x_cur] / ghz, a, rows, rb, st, memory, ip, fp, dip,
                                  dfp, ds, pat, eng, sbs, pc_s, pc_e, tr_pc, out)
                if memory == 1:
                    nxt_x_ready = d1
                    if nb_ < tr_blocks.shape[0]:
                        tr_blocks[nb_, T_XS] = s1
                        tr_blocks[nb_, T_XE] = d1
                else:
                    nxt_x_ready = 0.0
            else:
                nxt_x_ready = x_ready
            if w_load:
                a, rows, rb, st = _descriptor(ip[P_W_BASE], ip[P_W_LD], ip[P_W_BITS], ip[P_W_T],
                                              ip[P_W_BSTRIDE], bt1, k1 * Kb, j1 * Nb, kb1, nbb1)
                s1, d1 = _operand(ip[P_W_SRC], ip[P_W_SB], i1 > 0, fp[F_W_DUP], fp[F_W_CDUP],
                                  share if bt1 < ip[P_TAIL_BT] else fp[F_SHARE_TAIL],
                                  w_free[1 - w_cur] / ghz, a, rows, rb, st, memory, ip, fp, dip,
                                  dfp, ds, pat, eng, sbs, pc_s, pc_e, tr_pc, out)
                if memory == 1:
                    nxt_w_ready = d1
                    if nb_ < tr_blocks.shape[0]:
                        tr_blocks[nb_, T_WS] = s1
                        tr_blocks[nb_, T_WE] = d1
                else:
                    nxt_w_ready = 0.0
            else:
                nxt_w_ready = w_ready
            nxt_x_slot = (1 - x_cur) if x_load else x_cur
            nxt_w_slot = (1 - w_cur) if w_load else w_cur
        if b < 0:
            x_cur = nxt_x_slot
            w_cur = nxt_w_slot
            x_ready = nxt_x_ready
            w_ready = nxt_w_ready
            x_key = nxt_x_key
            w_key = nxt_w_key
            c_bt = p_bt
            c_i = p_i
            c_j = p_j
            c_k = p_k
            continue
        # ---- block b's statistics and the bound -------------------------------------------
        c_bt = p_bt      # (block b+1's indices, current at the next iteration)
        c_i = p_i
        c_j = p_j
        c_k = p_k
        xbits = ip[P_X_BITS]
        wbits = ip[P_W_BITS]
        if df == 0:
            out[O_BUSY] += nf * ke
            out[O_SRAM_RD] += mb * kb * xbits / 8.0 * ncf + kb * nbb * wbits / 8.0 * _cdiv(mb, R)
            out[O_SRAM_WR] += mb * nbb * acc_bytes
            if k > 0:
                out[O_SRAM_RD] += mb * nbb * acc_bytes
        else:
            out[O_BUSY] += nf * me
            out[O_SRAM_RD] += mb * kb * xbits / 8.0 * ncf + kb * nbb * wbits / 8.0
            out[O_SRAM_WR] += mb * nbb * acc_bytes * nkf
            out[O_SRAM_RD] += mb * nbb * acc_bytes * (nkf - 1 + (1 if k > 0 else 0))
        if delay > 0:
            if ready >= ofree:
                out[O_DRAM_STALL] += delay
            else:
                out[O_WB_STALL] += delay
        out[O_FOLDS] += nf
        out[O_BLOCKS] += 1
        if cutoff > 0:
            # branch and bound: every remaining fold adds at least its period, every remaining
            # byte at least its share of the pin bandwidth on the aggregate server
            # OS: L advances by at least a period per fold, the last output is 2R + C − 1
            # cycles after the last input; WS: the last row of the last fold is at least
            # ``rem − R + 1`` after this one (a short last fold can take less than its period)
            proj = _proj_compute(df, consume, ip[P_PERIODS] - periods_done, R, C)
            if memory == 1:
                rem_ns = _rem_ns(ip, fp, dip, dfp, out, p_n)
                pm = (ds[S_AGG][0] + rem_ns) * ghz
                if pm > proj:
                    proj = pm
                if ip[P_BEST] > 0 and proj < cutoff:
                    # the aggregate server is dark in every refresh window: a span of D ns
                    # holds at least floor(D / tREFI) - 1 whole windows
                    dark = dfp[F_BLACKOUT] * max(0.0, math.floor(rem_ns / dfp[F_TREFI]) - 1.0)
                    if (ds[S_AGG][0] + rem_ns + dark) * ghz > ip[P_BEST]:
                        proj = cutoff
            if proj >= cutoff:
                out[O_CYCLES] = proj
                out[O_ABORTED] = 1
                return out_own
        last_out = lo
        x_free[x_cur] = consume
        w_free[w_cur] = consume
        if b < tr_blocks.shape[0]:
            tr_blocks[b, T_BT] = bt
            tr_blocks[b, T_I] = i
            tr_blocks[b, T_J] = j
            tr_blocks[b, T_K] = k
            tr_blocks[b, T_CS] = start_c
            tr_blocks[b, T_CE] = lo + 1
            out[O_NTRACE_BLOCKS] = b + 1
        # ---- write-back after the last K block of an output tile ----------------------------
        if k == nkb - 1:
            a, rows, rb, st = _descriptor(ip[P_O_BASE], ip[P_O_LD], ip[P_O_BITS], ip[P_O_T],
                                          ip[P_O_BSTRIDE], bt, i * Mb, j * Nb, mb, nbb)
            dst = ip[P_O_DST]
            if dst == 0:
                out[O_DRAM_WR] += rows * rb
            else:   # kept on chip: written into the scratchpad or the shared buffer
                out[O_SRAM_WR] += rows * rb
            out[O_SRAM_RD] += rows * rb
            if memory == 1:
                if dst == 1:
                    s0w, d0w = _local((lo + 1) / ghz, rows * rb, fp, sbs)
                else:
                    s0w, d0w = _dma((lo + 1) / ghz, a, rows, rb, st, write,
                                    share if bt < ip[P_TAIL_BT] else fp[F_SHARE_TAIL],
                                    zero if dst == 0 else np.int64(1), one, ip, fp, dip, dfp,
                                    ds, pat, eng, sbs, pc_s, pc_e, tr_pc, out)
                if not d0w * ghz < MAX_CYCLES_F:
                    raise ValueError("engine: a block's output write-back time (ns x GHz) is "
                                     "not a cycle count below 2**62: the op is too large to "
                                     "simulate")
                done_c = int(math.ceil(d0w * ghz))
                out_free[n_out % 2] = done_c
                if done_c > wb_end_cyc:
                    wb_end_cyc = done_c
                if b < tr_blocks.shape[0]:
                    tr_blocks[b, T_OS] = s0w
                    tr_blocks[b, T_OE] = d0w
            n_out += 1
        # the next block becomes current
        if b + 1 < total:
            x_cur = nxt_x_slot
            w_cur = nxt_w_slot
            x_ready = nxt_x_ready
            w_ready = nxt_w_ready
            x_key = nxt_x_key
            w_key = nxt_w_key
    cyc = last_out + 1
    if wb_end_cyc > cyc:
        out[O_WB_STALL] += wb_end_cyc - cyc
        cyc = wb_end_cyc
    out[O_CYCLES] = cyc
    out[O_LAST_OUT] = last_out
    s = 0.0
    busy = ds_own[S_BUSY]
    for p in range(p_n):
        s += busy[p]
    out[O_DRAM_BUSY_NS] = s + 0.0 * len(keep)   # (keep: the views' owners live to here)
    return out_own
