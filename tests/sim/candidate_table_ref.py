"""The NumPy version of the mapper's candidate table, kept as an independent reference for the
compiled one (:mod:`diptych.sim.mapper_kernels`): same candidates, same order, same bits.

(Moved here from sim/mapper.py when the table was compiled, issue 14.)
"""

import numpy as np

from diptych.sim import mapper as MP
from diptych.sim.dram import dram_timing, refresh_lower_bound_ns


def candidate_arrays(chip, pb, rates, split):
    """:func:`candidates` as NumPy columns (mb, kb, nb, order), same order (tests compare)."""
    arr = chip.core.array
    cap, acc = MP.capacity(chip, split)
    ms = np.array(MP._sizes(min(arr.rows, pb.m), pb.m), dtype=np.int64)
    kbase = arr.rows if pb.dataflow == "os" else rates.stationary_rows
    ks = np.array(MP._sizes(min(kbase, pb.k), pb.k), dtype=np.int64)
    ns = np.array(MP._sizes(min(arr.cols, pb.n), pb.n), dtype=np.int64)
    mb, kb, nb = (a.ravel() for a in np.meshgrid(ms, ks, ns, indexing="ij"))
    # an operand block shared by the core's ``cdup`` arrays counts 1/cdup (mapper.footprint)
    x = 2 * (-(-(-(-(mb * kb * pb.x_bits) // 8)) // pb.x_cdup))
    w = 2 * (-(-(-(-(kb * nb * pb.w_bits) // 8)) // pb.w_cdup))
    o = 2 * (-(-(mb * nb * pb.acc_bits) // 8))
    if acc:
        fits = (o <= acc) & (x + w <= cap)
    else:
        fits = x + w + o <= cap
    mb, kb, nb = mb[fits], kb[fits], nb[fits]
    both = (-(-pb.m // mb) > 1) & (-(-pb.n // nb) > 1)
    # order 0 for every fitting blocking, followed by order 1 where it differs
    rep = 1 + both.astype(np.int64)
    idx = np.repeat(np.arange(len(mb)), rep)
    order = np.zeros(len(idx), dtype=np.int64)
    first = np.cumsum(rep) - rep
    order[first[both] + 1] = 1
    if len(idx) == 0:
        MP.candidates(chip, pb, rates, split)   # raises the explanatory ValueError
    return mb[idx], kb[idx], nb[idx], order




def candidate_table(chip, pb, rates, split, peak_bpc: float):
    """Vectorised :func:`candidates` with their estimate and lower bound.

    Returns (mb, kb, nb, order, est, lb) NumPy arrays; the same numbers as
    :func:`compute_cycles`, :func:`traffic_bytes` and :func:`edge_bytes` per candidate (the
    tests compare them). ``lb`` = max(memory-free cycles + :func:`edge_cycles`, all bytes at
    the array's share of the pin bandwidth, all loads and write-backs at
    the array's DMA port rate, shared-buffer re-reads at the array's share of its bandwidth);
    ``est`` = max(memory-free
    cycles, DRAM bytes at 90 % of the pin share, the port time, re-reads at 90 % of the
    shared-buffer share) + one DMA setup per block per engine.
    """
    arr = chip.core.array
    R, C = arr.rows, arr.cols

    def cd(a, b):
        return -(-a // b)

    mb, kb, nb, order = candidate_arrays(chip, pb, rates, split)
    xsb = np.zeros(len(mb), dtype=np.int64)
    wsb = np.zeros(len(mb), dtype=np.int64)
    base = mb
    if chip.shared_buffer is not None:
        # vectorised shared_buffer_modes: every (X mode, W mode) variant that fits
        x = pb.m * pb.k * pb.x_bits / 8
        w = pb.k * pb.n * pb.w_bits / 8
        nm_, nk_, nn_ = cd(pb.m, mb), cd(pb.k, kb), cd(pb.n, nb)
        x_re = np.where(order == 0, (nk_ > 1) & (nn_ > 1), (nn_ > 1) & ~((nk_ == 1) & (nm_ == 1)))
        w_re = np.where(order == 0, (nm_ > 1) & ~((nk_ == 1) & (nn_ == 1)), (nk_ > 1) & (nm_ > 1))
        m0_, k0_, n0_ = np.minimum(mb, pb.m), np.minimum(kb, pb.k), np.minimum(nb, pb.n)
        xn, wn = split.active // pb.x_dup, split.active // pb.w_dup
        x1 = 2 * m0_ * k0_ * pb.x_bits / 8 * xn
        w1 = 2 * k0_ * n0_ * pb.w_bits / 8 * wn
        x2 = np.maximum(x1, np.where(order == 0, m0_ * pb.k, pb.m * pb.k) * pb.x_bits / 8 * xn)
        w2 = np.maximum(w1, np.where(order == 0, pb.k * pb.n, pb.k * n0_) * pb.w_bits / 8 * wn)
        cap = chip.shared_buffer.capacity_bytes
        n0 = len(base)
        xs = np.zeros((3, n0))                 # reuse set of X in mode 0, 1, 2
        xs[1], xs[2] = x1, x2
        ws = np.zeros((3, n0))
        ws[1], ws[2] = w1, w2
        xg = np.ones((3, n0), dtype=bool)      # the mode changes something
        xg[1], xg[2] = pb.x_dup > pb.x_cdup, x_re
        wg = np.ones((3, n0), dtype=bool)
        wg[1], wg[2] = pb.w_dup > pb.w_cdup, w_re
        # keep[a, b, i]: X mode a and W mode b of base candidate i fit (and change something)
        fits = xg[:, None, :] & wg[None, :, :] & (xs[:, None, :] + ws[None, :, :] <= cap)
        keep = fits.copy()
        keep[:, 0, :] &= ~fits[:, 1, :]      # mode 1 dominates mode 0 where it fits (modes)
        keep[0, :, :] &= ~fits[1, :, :]
        pin_bpc = chip.dram.peak_bytes_per_s / chip.clock_hz
        sb_total = chip.shared_buffer.bytes_per_cycle
        if sb_total >= pb.x_dup * pin_bpc:   # and so does mode 2 where the buffer is faster
            keep[0, :, :] &= ~fits[2, :, :]
            keep[1, :, :] &= ~fits[2, :, :]
        if sb_total >= pb.w_dup * pin_bpc:
            keep[:, 0, :] &= ~fits[:, 2, :]
            keep[:, 1, :] &= ~fits[:, 2, :]
        # the variants of one base candidate stay together, in (X mode, W mode) order
        idx, combo = np.nonzero(keep.reshape(9, n0).T)
        xsb, wsb = combo // 3, combo % 3
        mb, kb, nb, order = mb[idx], kb[idx], nb[idx], order[idx]
    cs = MP.BlockTable(mb, kb, nb, order, xsb, wsb)

    def dim_sum(extent, blk, fn):
        # Σ over a dimension's blocks (full ones and the ragged last one) of fn(block size);
        # a fold's period is a product of one such factor per dimension, so the sum over all
        # blocks is the product of the per-dimension sums
        rem = extent % blk
        return (extent // blk) * fn(blk) + np.where(rem > 0, fn(rem), 0)

    if pb.dataflow == "os":
        periods = (dim_sum(pb.m, mb, lambda v: cd(v, R)) * dim_sum(pb.n, nb, lambda v: cd(v, C))
                   * dim_sum(pb.k, kb, lambda v: np.maximum(cd(v * rates.os_den, rates.os_num),
                                                            R)))
    else:
        # WS period: the install (ceil(R / p) cycles) plus, with the swap wave, its R + C − 2
        # cycles to leave the array
        p, wave = arr.weight_load_rows_per_cycle, arr.weight_swap == "wave"
        install = cd(R, p)
        gap = install + (R + C - 2 if wave else 0)
        periods = (dim_sum(pb.k, kb, lambda v: cd(v, rates.stationary_rows))
                   * dim_sum(pb.n, nb, lambda v: cd(v, C))
                   * dim_sum(pb.m, mb, lambda v: np.maximum(cd(v * rates.ws_den, rates.ws_num),
                                                            gap)))
    periods *= pb.batch
    cs.periods = periods
    k0 = np.minimum(kb, pb.k)
    m0, n0 = np.minimum(mb, pb.m), np.minimum(nb, pb.n)
    ml = pb.m - (cd(pb.m, mb) - 1) * mb
    nl = pb.n - (cd(pb.n, nb) - 1) * nb
    if pb.dataflow == "os":
        ke0 = cd(k0 * rates.os_den, rates.os_num)
        comp = periods - np.maximum(ke0, R) + ke0 - 1 + 2 * R + C - 1
    else:
        mel = cd(ml * rates.ws_den, rates.ws_num)
        comp = install + periods - np.maximum(mel, gap) + mel - 1 + R + C
    nm, nk, nn = cd(pb.m, mb), cd(pb.k, kb), cd(pb.n, nb)
    x = pb.m * pb.k * pb.x_bits / 8
    w = pb.k * pb.n * pb.w_bits / 8
    o = pb.m * pb.n * pb.o_bits / 8
    xt0 = x * np.where(nk > 1, nn, 1)
    wt0 = w * np.where((nk == 1) & (nn == 1), 1, nm)
    wt1 = w * np.where(nk > 1, nm, 1)
    xt1 = x * np.where((nk == 1) & (nm == 1), 1, nn)
    xt = np.where(order == 0, xt0, xt1)
    wt = np.where(order == 0, wt0, wt1)
    xdiv = np.where(xsb > 0, pb.x_dup, pb.x_cdup)
    wdiv = np.where(wsb > 0, pb.w_dup, pb.w_cdup)
    traffic = pb.batch * (np.where(xsb == 2, x, xt) / xdiv + np.where(wsb == 2, w, wt) / wdiv + o)
    sbb = pb.batch * (np.where(xsb == 2, (xt - x) / pb.x_cdup, 0.0)
                      + np.where(wsb == 2, (wt - w) / pb.w_cdup, 0.0))
    e_in = (m0 * k0 * pb.x_bits / xdiv + k0 * n0 * pb.w_bits / wdiv) / 8
    e_out = ml * nl * pb.o_bits / 8
    t = dram_timing(chip)
    lat = (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz
    # the last write-back at the last wave's share; all bytes weighted by the waves' shares
    edge = (2 * chip.dma.setup_cycles + np.maximum(e_in / peak_bpc, lat)
            + np.maximum(e_out * split.tail_ratio() / peak_bpc, lat))
    dw = split.dram_weight()
    mem_ns = refresh_lower_bound_ns(traffic * dw / peak_bpc / chip.clock_ghz, t.t_refi_ns,
                                    t.t_rfc_ns + t.t_rcd_ns + t.t_cl_ns)
    lb = np.maximum(comp + edge, mem_ns * chip.clock_ghz)
    est = np.maximum(comp, traffic * dw / (0.9 * peak_bpc))
    # every load and write-back passes the array's DMA ports, each moving one descriptor at a
    # time at the engine rate
    engines, per_engine = MP.dma_share(chip, split)
    # (a block the core's arrays share crosses the port once for its cdup arrays)
    port = pb.batch * (xt / pb.x_cdup + wt / pb.w_cdup + o) / (engines * per_engine)
    lb = np.maximum(lb, port)
    est = np.maximum(est, port)
    sb_bpc = MP.shared_buffer_bpc(chip, split)
    if sb_bpc > 0:
        # the shared buffer serves one re-read at a time per array
        lb = np.maximum(lb, sbb / sb_bpc)
        est = np.maximum(est, sbb / (0.9 * sb_bpc))
    est = est + pb.batch * nm * nk * nn * chip.dma.setup_cycles / MP.dma_share(chip, split)[0]
    return cs, est, lb
