"""Compiled candidate tables of the mapper (:func:`diptych.sim.mapper.candidate_table`).

The same numbers as the NumPy/scalar closed forms of :mod:`diptych.sim.mapper` (the tests
compare them), computed in one call per (split, dataflow) group instead of ~100 small NumPy
operations: the blockings that fit the scratchpad, and for each its fold periods, its lower
bound and its estimate. Every floating-point expression keeps the operation order of
:func:`~diptych.sim.mapper.candidate_table`, so the results are bit-identical.
"""

from __future__ import annotations

import math
import os as _os

import numpy as np

from . import timing as T
from .jit import compile_pure, invalidate_stale_cache, jit

_here = _os.path.dirname(_os.path.abspath(__file__))
invalidate_stale_cache(__file__, *(_os.path.join(_here, f) for f in ("jit.py", "timing.py")))

# the array timeline (sim/timing.py), compiled
(_os_fold_steps, _ws_fold_rows, _os_period, _os_last_output, _ws_period, _ws_first_row,
 _ws_row_output) = compile_pure(T, ("os_fold_steps", "ws_fold_rows", "os_period",
                                    "os_last_output", "ws_period", "ws_first_row",
                                    "ws_row_output"))

#: The chain bound is lowered by this fraction before it is floored (float rounding of the
#: ns/cycle conversions the engine makes must not lift it above the engine's cycles).
CHAIN_MARGIN = 1e-9

# the integer columns of table_numbers' rows (T_CHAIN: chain_bound, whole cycles)
(T_MB, T_KB, T_NB, T_ORDER, T_XSB, T_WSB, T_PERIODS, T_TRAFFIC, T_BLOCKS, T_CHAIN,
 N_T) = range(11)
# integer inputs of table_numbers
(K_OS, K_R, K_C, K_RK, K_OS_NUM, K_OS_DEN, K_WS_NUM, K_WS_DEN, K_M, K_K, K_N, K_BATCH,
 K_XBITS, K_WBITS, K_OBITS, K_XDUP, K_WDUP, K_SETUP, K_ENGINES, K_XSRC, K_WSRC, K_ODST,
 K_XCDUP, K_WCDUP, K_WS_LOAD_P, K_WS_WAVE, K_TRANS, K_XLD, K_WLD, K_BURST, N_K) = range(31)
# K_WS_LOAD_P, K_WS_WAVE: the WS weight-install path (engine.P_WS_LOAD_P, P_WS_WAVE);
# K_TRANS, K_XLD, K_WLD: the operands' layout (Problem.transposed, x_ld, w_ld: a block's DMA
# descriptor rows and their pitch); K_BURST: the DRAM burst bytes
# float inputs (G_DRAM_W: Split.dram_weight, G_TAIL_R: Split.tail_ratio, G_FABRIC: the
# NoC/D2D latency every DRAM descriptor adds to its setup, engine.F_DRAM_SETUP_NS, in cycles)
(G_PEAK, G_GHZ, G_LAT, G_TREFI, G_BLACKOUT, G_PER_ENGINE, G_SB_BPC, G_SP_BPC, G_DRAM_W,
 G_TAIL_R, G_FABRIC, N_G) = range(12)


@jit(inline="always")
def _cd(a, b):
    return -(-a // b)


@jit(inline="always")
def _sizes(base, extent, out):
    """Array-aligned sizes ``base·2^i`` below ``extent``, then ``extent``; returns the count."""
    n = 0
    s = base
    while s < extent:
        out[n] = s
        n += 1
        s *= 2
    out[n] = extent
    return n + 1


@jit
def blockings(R, C, kbase, m, k, n, x_bits, w_bits, acc_bits, cap, acc, xcd, wcd):
    """:func:`~diptych.sim.mapper.candidates`: (mb, kb, nb, order) of every blocking that
    fits, M-major then K then N, order 0 followed by order 1 where both M and N have several
    blocks (``xcd``/``wcd``: arrays of the core sharing an X/W block, see ``footprint``)."""
    ms = np.empty(64, dtype=np.int64)
    ks = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    nms = _sizes(min(R, m), m, ms)
    nks = _sizes(min(kbase, k), k, ks)
    nns = _sizes(min(C, n), n, ns)
    cap_n = 2 * nms * nks * nns
    mb = np.empty(cap_n, dtype=np.int64)
    kb = np.empty(cap_n, dtype=np.int64)
    nb = np.empty(cap_n, dtype=np.int64)
    order = np.empty(cap_n, dtype=np.int64)
    c = 0
    for i in range(nms):
        for j in range(nks):
            for q in range(nns):
                x = 2 * _cd(_cd(ms[i] * ks[j] * x_bits, 8), xcd)
                w = 2 * _cd(_cd(ks[j] * ns[q] * w_bits, 8), wcd)
                o = 2 * _cd(ms[i] * ns[q] * acc_bits, 8)
                if acc:
                    fits = o <= acc and x + w <= cap
                else:
                    fits = x + w + o <= cap
                if not fits:
                    continue
                both = _cd(m, ms[i]) > 1 and _cd(n, ns[q]) > 1
                for od in range(2 if both else 1):
                    mb[c] = ms[i]
                    kb[c] = ks[j]
                    nb[c] = ns[q]
                    order[c] = od
                    c += 1
    return mb[:c], kb[:c], nb[:c], order[:c]


@jit(inline="always")
def _load_chain(src, mode, loads, loaded, rows, burst, dup, cdup, setup, fabric_lat, peak,
                tail_r, per_engine, sp_bpc):
    """Σ over one operand's loads of the cycles from a load's request to its data being
    ready (the ``D_u`` of :func:`chain_bound`): ``loads`` descriptors of ``loaded`` bytes in
    all (this array's blocks before the ``dup``/``cdup`` division). Through the DMA (DRAM or
    the shared buffer) each waits its setup, then its port time; from DRAM (a shared-buffer
    mode below 2) also the NoC latency, tRCD + tCL and its bursts at its share of the pins
    (refresh and bank conflicts only add): at least its bytes over ``burst``, and at least
    one burst per descriptor row where its ``rows`` rows (in all; 0: not counted) touch
    disjoint bursts. From the scratchpad: its bytes at the core's scratchpad share (the
    local server)."""
    if src == 1:
        return loaded / cdup / sp_bpc
    port = loaded / cdup / per_engine
    if src == 0 and mode < 2:
        return loads * setup + max(loads * fabric_lat + max(loaded, rows * burst)
                                   / (dup if mode > 0 else cdup) * tail_r / peak, port)
    return loads * setup + port


@jit(inline="always")
def _rows(loads, per, extent, row_bytes, pitch, burst):
    """The DMA descriptor rows of ``loads`` loads of an operand whose blocks' rows run along
    a dimension of ``extent`` cut into ``per`` blocks, each loaded equally often
    (``loads / per · extent`` rows), when no two rows share a burst or merge into one
    descriptor row (``pitch`` ≥ ``row_bytes`` + ``burst``, ``row_bytes``: the full block's);
    else 0."""
    if pitch < row_bytes + burst:
        return 0
    return loads // per * extent


@jit(inline="always")
def _reuse(order, nm, nk, nn, x, w):
    """(tx, xt, tw, wt): the loads of X and the bytes they move in all, then W's, of a
    blocking of ``nm``·``nk``·``nn`` blocks in loop ``order`` (0: M outermost) and operands
    of ``x`` and ``w`` bytes (:func:`~diptych.sim.mapper.traffic_bytes`' reuse rule; one copy
    for the table's traffic and its :func:`chain_bound`)."""
    if order == 0:     # M outermost
        tx = nm * nn * nk if nk > 1 else nm
        xt = x * (nn if nk > 1 else 1)
        tw = 1 if (nk == 1 and nn == 1) else nm * nn * nk
        wt = w * (1 if (nk == 1 and nn == 1) else nm)
    else:
        tw = nm * nn * nk if nk > 1 else nn
        wt = w * (nm if nk > 1 else 1)
        tx = 1 if (nk == 1 and nm == 1) else nm * nn * nk
        xt = x * (1 if (nk == 1 and nm == 1) else nn)
    return tx, xt, tw, wt


@jit(inline="always")
def chain_bound(os, R, C, m, k, n, batch, mbi, kbi, nbi, nm, nk, nn, tx, xt, tw, wt, ol, xsb,
                wsb, per, iv, fv):
    """A lower bound on the engine's cycles of one candidate (``per``: the sum of its fold
    periods; ``nm``, ``nk``, ``nn``: its blocks along M, K, N; ``tx``, ``xt``, ``tw``,
    ``wt``: its :func:`_reuse`; ``ol``: its last output tile's bytes, all as
    :func:`table_numbers` computes them) from its double-buffered load chains
    (docs/engine.md, "Mapper"):

    An operand's load into a slot is requested when the last block using that slot has
    presented its last input (``consume``), so with loads at the first blocks of runs
    ``0 … T−1`` and ``c_u`` the consume of run ``u − 1``'s last block,
    ``c_{u+1} ≥ c_{u−1} + D_u + S_u`` (``D_u``: the load's request-to-ready cycles, ``S_u``:
    the run's blocks' spans ``consume − start``, each at least the block's fold periods less
    ``period − steps + 1`` of its first fold, the engine's issue rules), and runs 0 and 1
    are requested at cycle 0. The last consume is at least each parity's sum, so at least
    half of ``Σ (D_u + S_u)``. With one DMA engine and both operands loaded at every block,
    the two loads of a block share its port (``D_u`` ≥ setup + both blocks' port time).
    Then the last block drains (OS ``2R + C − 1``, WS ``R + C`` cycles after its last
    input) and the last output tile's write-back follows (setup, latency, bytes)."""
    mf, mr = m // mbi, m % mbi
    kf, kr = k // kbi, k % kbi
    if os == 1:
        ke = _os_fold_steps(kbi, iv[K_OS_NUM], iv[K_OS_DEN])
        slack = kf * (_os_period(R, ke) - ke + 1)
        if kr > 0:
            ke = _os_fold_steps(kr, iv[K_OS_NUM], iv[K_OS_DEN])
            slack += _os_period(R, ke) - ke + 1
        slack *= batch * nm * nn
        drain = _os_last_output(np.int64(0), R, C) + 1
    else:
        wp, wv = iv[K_WS_LOAD_P], iv[K_WS_WAVE]
        me = _ws_fold_rows(mbi, iv[K_WS_NUM], iv[K_WS_DEN])
        slack = mf * (_ws_period(R, C, me, wp, wv) - me + 1)
        if mr > 0:
            me = _ws_fold_rows(mr, iv[K_WS_NUM], iv[K_WS_DEN])
            slack += _ws_period(R, C, me, wp, wv) - me + 1
        slack *= batch * nk * nn
        drain = _ws_row_output(np.int64(0), R, C) + 1
    span = per - slack
    blocks = batch * nm * nk * nn
    setup = iv[K_SETUP]
    fab_lat = fv[G_FABRIC] + fv[G_LAT]
    peak = fv[G_PEAK]
    tail_r = min(1.0, fv[G_TAIL_R])
    pe = fv[G_PER_ENGINE]
    sp = fv[G_SP_BPC]
    xs, ws, ods = iv[K_XSRC], iv[K_WSRC], iv[K_ODST]
    xcd, wcd = iv[K_XCDUP], iv[K_WCDUP]
    # the blocks' descriptor rows (engine._descriptor): X's along M (IS: along K), W's along
    # K (IS: along N), each at most the full block's row bytes
    burst = iv[K_BURST]
    k0, m0, n0 = min(kbi, k), min(mbi, m), min(nbi, n)
    if iv[K_TRANS] == 0:
        xr = _rows(tx, nm, m, _cd(k0 * iv[K_XBITS], 8), iv[K_XLD], burst)
        wr = _rows(tw, nk, k, _cd(n0 * iv[K_WBITS], 8), iv[K_WLD], burst)
    else:
        xr = _rows(tx, nk, k, _cd(m0 * iv[K_XBITS], 8), iv[K_XLD], burst)
        wr = _rows(tw, nn, n, _cd(k0 * iv[K_WBITS], 8), iv[K_WLD], burst)
    dx = _load_chain(xs, xsb, batch * tx, batch * xt, batch * xr, burst, iv[K_XDUP], xcd,
                     setup, fab_lat, peak, tail_r, pe, sp)
    dw = _load_chain(ws, wsb, batch * tw, batch * wt, batch * wr, burst, iv[K_WDUP], wcd,
                     setup, fab_lat, peak, tail_r, pe, sp)
    d = max(dx, dw)
    if iv[K_ENGINES] == 1 and tx == nm * nn * nk and tw == tx and xs != 1 and ws != 1:
        d = max(d, blocks * setup + batch * (xt / xcd + wt / wcd) / pe)
    # the last output tile's write-back (its descriptor's bytes at least ``ol``)
    if ods == 0:
        wb = setup + max(fab_lat + ol * tail_r / peak, ol / pe)
    elif ods == 2:
        wb = setup + ol / pe
    else:
        wb = ol / sp
    return ((d + span) / 2 + drain + wb) * (1.0 - CHAIN_MARGIN)


@jit
def table_numbers(mb, kb, nb, order, xsb, wsb, iv, fv):
    """(rows, est, lb) of the candidates, as :func:`~diptych.sim.mapper.candidate_table`:
    one row of integers per candidate (``T_*``: its blocking, the sum of its fold periods,
    its traffic, ``int`` of :func:`~diptych.sim.mapper.traffic_bytes`, the engine's
    ``P_TRAFFIC``, the blocks of its schedule and the floor of its :func:`chain_bound`; one
    array to box instead of ten)."""
    nc = mb.shape[0]
    rows = np.empty((nc, N_T), dtype=np.int64)
    est = np.empty(nc, dtype=np.float64)
    lb = np.empty(nc, dtype=np.float64)
    R = iv[K_R]
    C = iv[K_C]
    m = iv[K_M]
    k = iv[K_K]
    n = iv[K_N]
    batch = iv[K_BATCH]
    x = m * k * iv[K_XBITS] / 8
    w = k * n * iv[K_WBITS] / 8
    o = m * n * iv[K_OBITS] / 8
    peak = fv[G_PEAK]
    ghz = fv[G_GHZ]
    lat = fv[G_LAT]
    blackout = fv[G_BLACKOUT]
    setup = iv[K_SETUP]
    engines = iv[K_ENGINES]
    wp, wv = iv[K_WS_LOAD_P], iv[K_WS_WAVE]          # the WS install path
    ws_first = _ws_first_row(np.int64(0), np.int64(-1), R, wp)
    for i in range(nc):
        mbi = mb[i]
        kbi = kb[i]
        nbi = nb[i]
        # Σ of fold periods: a product of one per-dimension sum each
        mf, mr = m // mbi, m % mbi
        kf, kr = k // kbi, k % kbi
        nf, nr = n // nbi, n % nbi
        if iv[K_OS] == 1:
            a = mf * _cd(mbi, R) + (_cd(mr, R) if mr > 0 else 0)
            b = nf * _cd(nbi, C) + (_cd(nr, C) if nr > 0 else 0)
            c = kf * _os_period(R, _os_fold_steps(kbi, iv[K_OS_NUM], iv[K_OS_DEN])) + (
                _os_period(R, _os_fold_steps(kr, iv[K_OS_NUM], iv[K_OS_DEN])) if kr > 0 else 0)
        else:
            a = kf * _cd(kbi, iv[K_RK]) + (_cd(kr, iv[K_RK]) if kr > 0 else 0)
            b = nf * _cd(nbi, C) + (_cd(nr, C) if nr > 0 else 0)
            c = mf * _ws_period(R, C, _ws_fold_rows(mbi, iv[K_WS_NUM], iv[K_WS_DEN]), wp, wv) + (
                _ws_period(R, C, _ws_fold_rows(mr, iv[K_WS_NUM], iv[K_WS_DEN]), wp, wv)
                if mr > 0 else 0)
        per = a * b * c * batch
        rows[i, T_MB] = mbi
        rows[i, T_KB] = kbi
        rows[i, T_NB] = nbi
        rows[i, T_ORDER] = order[i]
        rows[i, T_XSB] = xsb[i]
        rows[i, T_WSB] = wsb[i]
        rows[i, T_PERIODS] = per
        k0 = min(kbi, k)
        m0 = min(mbi, m)
        n0 = min(nbi, n)
        nm = _cd(m, mbi)
        nk = _cd(k, kbi)
        nn = _cd(n, nbi)
        ml = m - (nm - 1) * mbi
        nl = n - (nn - 1) * nbi
        if iv[K_OS] == 1:   # (mapper.compute_cycles)
            ke0 = _os_fold_steps(k0, iv[K_OS_NUM], iv[K_OS_DEN])
            comp = _os_last_output(per - _os_period(R, ke0) + ke0 - 1, R, C) + 1
        else:
            mel = _ws_fold_rows(ml, iv[K_WS_NUM], iv[K_WS_DEN])
            comp = _ws_row_output(ws_first + per - _ws_period(R, C, mel, wp, wv) + mel - 1,
                                  R, C) + 1
        tx, xt, tw, wt = _reuse(order[i], nm, nk, nn, x, w)
        xcd = iv[K_XCDUP]
        wcd = iv[K_WCDUP]
        xdiv = iv[K_XDUP] if xsb[i] > 0 else xcd
        wdiv = iv[K_WDUP] if wsb[i] > 0 else wcd
        xs, ws, od = iv[K_XSRC], iv[K_WSRC], iv[K_ODST]
        # resident operands (mapper.traffic_bytes, shared_buffer_bytes, edge_cycles): no
        # DRAM bytes; scratchpad ones bypass the DMA port, shared-buffer ones do not; a block
        # the core's arrays share moves once for them (1/cdup). (With every operand in DRAM
        # the terms of resident ones are exact zeros: the same numbers as the plain sums.)
        traffic = batch * ((0.0 if xs else (x if xsb[i] == 2 else xt) / xdiv)
                           + (0.0 if ws else (w if wsb[i] == 2 else wt) / wdiv)
                           + (0.0 if od else o))
        rows[i, T_TRAFFIC] = int(traffic)
        rows[i, T_BLOCKS] = batch * nm * nk * nn
        sbb = batch * (((xt - x) / xcd if xsb[i] == 2 else 0.0)
                       + ((wt - w) / wcd if wsb[i] == 2 else 0.0)
                       + (xt / xcd if xs == 2 else 0.0) + (wt / wcd if ws == 2 else 0.0))
        spb = batch * ((xt / xcd if xs == 1 else 0.0) + (wt / wcd if ws == 1 else 0.0)
                       + (o if od == 1 else 0.0))
        e_in = ((0.0 if xs else m0 * k0 * iv[K_XBITS] / xdiv)
                + (0.0 if ws else k0 * n0 * iv[K_WBITS] / wdiv)) / 8
        ol = ml * nl * iv[K_OBITS] / 8        # the last output tile's bytes
        e_out = 0.0 if od else ol
        if xs == 0 and ws == 0 and od == 0:   # every operand in DRAM
            edge = (2 * setup + max(e_in / peak, lat)
                    + max(e_out * fv[G_TAIL_R] / peak, lat))
        else:
            dram_in = xs == 0 or ws == 0
            dma_in = dram_in or xs == 2 or ws == 2
            edge = ((setup if dma_in else 0) + (max(e_in / peak, lat) if dram_in else 0.0)
                    + ((setup + max(e_out * fv[G_TAIL_R] / peak, lat)) if od == 0
                       else (setup if od == 2 else 0)))
        port = batch * ((xt / xcd if xs != 1 else 0.0) + (wt / wcd if ws != 1 else 0.0)
                        + (o if od != 1 else 0.0)) / (engines * fv[G_PER_ENGINE])
        # all bytes at the pin share around the refresh windows (refresh_lower_bound_ns); the
        # last wave's bytes at its share (G_DRAM_W)
        work = traffic * fv[G_DRAM_W] / peak / ghz
        kw = max(0.0, math.floor((work - blackout) / (fv[G_TREFI] - blackout)))
        mem_ns = work + kw * blackout
        lo = max(comp + edge, mem_ns * ghz)
        es = max(comp, traffic * fv[G_DRAM_W] / (0.9 * peak))
        lo = max(lo, port)
        es = max(es, port)
        if fv[G_SB_BPC] > 0:
            lo = max(lo, sbb / fv[G_SB_BPC])
            es = max(es, sbb / (0.9 * fv[G_SB_BPC]))
        if spb > 0:   # the scratchpad server moves resident blocks one at a time
            lo = max(lo, spb / fv[G_SP_BPC])
            es = max(es, spb / fv[G_SP_BPC])
        est[i] = es + batch * nm * nk * nn * setup / engines
        lb[i] = lo
        rows[i, T_CHAIN] = int(math.floor(chain_bound(
            iv[K_OS], R, C, m, k, n, batch, mbi, kbi, nbi, nm, nk, nn, tx, xt, tw, wt, ol,
            xsb[i], wsb[i], per, iv, fv)))
    return rows, est, lb


# integer and float inputs of shared_buffer_variants
(S_M, S_K, S_N, S_XBITS, S_WBITS, S_XDUP, S_WDUP, S_ACTIVE, S_XFAST, S_WFAST, S_XRES, S_WRES,
 S_XCDUP, S_WCDUP, N_S) = range(15)


@jit
def shared_buffer_variants(mb, kb, nb, order, sv, cap):
    """:func:`~diptych.sim.mapper.shared_buffer_modes` of every blocking: (index of the
    blocking, X mode, W mode) of each variant that fits ``cap`` bytes, in blocking order and
    (X mode, W mode) order within one. ``sv[S_XFAST]``/``[S_WFAST]``: the buffer serves a
    re-read at least as fast as the DRAM pins (mode 2 then dominates modes 0 and 1).
    ``sv[S_XRES]``/``[S_WRES]``: the operand is resident (already on chip: mode 0 only)."""
    n0 = mb.shape[0]
    idx = np.empty(9 * n0, dtype=np.int64)
    xsb = np.empty(9 * n0, dtype=np.int64)
    wsb = np.empty(9 * n0, dtype=np.int64)
    m, k, n = sv[S_M], sv[S_K], sv[S_N]
    xn = sv[S_ACTIVE] // sv[S_XDUP]
    wn = sv[S_ACTIVE] // sv[S_WDUP]
    xs = np.zeros(3)
    ws = np.zeros(3)
    xg = np.ones(3, dtype=np.bool_)
    wg = np.ones(3, dtype=np.bool_)
    fits = np.zeros((3, 3), dtype=np.bool_)
    c = 0
    for i in range(n0):
        nm, nk, nn = _cd(m, mb[i]), _cd(k, kb[i]), _cd(n, nb[i])
        if order[i] == 0:
            x_re = nk > 1 and nn > 1
            w_re = nm > 1 and not (nk == 1 and nn == 1)
        else:
            x_re = nn > 1 and not (nk == 1 and nm == 1)
            w_re = nk > 1 and nm > 1
        m0, k0, n0_ = min(mb[i], m), min(kb[i], k), min(nb[i], n)
        xs[1] = 2 * m0 * k0 * sv[S_XBITS] / 8 * xn
        ws[1] = 2 * k0 * n0_ * sv[S_WBITS] / 8 * wn
        xs[2] = max(xs[1], (m0 * k if order[i] == 0 else m * k) * sv[S_XBITS] / 8 * xn)
        ws[2] = max(ws[1], (k * n if order[i] == 0 else k * n0_) * sv[S_WBITS] / 8 * wn)
        xg[1], xg[2] = sv[S_XDUP] > sv[S_XCDUP] and sv[S_XRES] == 0, x_re and sv[S_XRES] == 0
        wg[1], wg[2] = sv[S_WDUP] > sv[S_WCDUP] and sv[S_WRES] == 0, w_re and sv[S_WRES] == 0
        for a in range(3):
            for b in range(3):
                fits[a, b] = xg[a] and wg[b] and xs[a] + ws[b] <= cap
        for a in range(3):
            for b in range(3):
                # mode 1 dominates mode 0 where it fits; mode 2 dominates 0 and 1 where the
                # buffer is fast enough and it fits
                if (fits[a, b] and not (b == 0 and fits[a, 1]) and not (a == 0 and fits[1, b])
                        and not (sv[S_XFAST] == 1 and a < 2 and fits[2, b])
                        and not (sv[S_WFAST] == 1 and b < 2 and fits[a, 2])):
                    idx[c] = i
                    xsb[c] = a
                    wsb[c] = b
                    c += 1
    return idx[:c], xsb[:c], wsb[:c]
