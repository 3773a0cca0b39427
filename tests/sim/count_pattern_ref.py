"""The pattern walk as it was before its rows were stepped without division (issue 27): the
obviously-correct reference of :func:`diptych.sim.dram_counts.count_pattern` (same inputs, same
outputs; tests/sim/test_dram_counts.py compares them on random geometries)."""

from __future__ import annotations

from diptych.sim.dram_counts import I_BANKS, I_BURST, I_INTERLEAVE, I_P, I_PAGE


def count_pattern(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                  acts, bank_max):
    """The reference: add one transfer's bursts and row activations per pseudo-channel into
    ``bursts``/``acts``; ``bank_max`` gets the most activations any single bank of the
    pseudo-channel needs. Walks every chunk and page of every row.

    Rows start closed for the transfer (``stamp`` != ``tid`` means closed); ``bank_cnt`` holds
    each bank's activations so far (valid where ``stamp == tid``)."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    page = ip[I_PAGE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    full_bursts = il // burst
    for r in range(rows):
        a = addr + r * stride
        end = a + row_bytes
        c = a // il
        off = a - c * il
        pc = c % p_n
        q = c // p_n          # chunk index inside the pseudo-channel
        gq = -1               # page of the current q when a chunk lies inside one page
        bank = 0
        row = 0
        while a < end:
            take = min(il - off, end - a)
            lo = q * il + off
            hi = lo + take
            if take == il and il <= page:
                # a whole chunk inside one page: its page is shared by the whole sweep
                bursts[pc] += full_bursts
                if gq != q:
                    gq = q
                    g = lo // page
                    bank = g % banks
                    row = g // banks
                # (inlined _touch)
                if stamp[pc, bank] != tid:
                    stamp[pc, bank] = tid
                    open_row[pc, bank] = row
                    bank_cnt[pc, bank] = 1
                    acts[pc] += 1
                    if bank_max[pc] < 1:
                        bank_max[pc] = 1
                elif open_row[pc, bank] != row:
                    open_row[pc, bank] = row
                    bank_cnt[pc, bank] += 1
                    acts[pc] += 1
                    if bank_cnt[pc, bank] > bank_max[pc]:
                        bank_max[pc] = bank_cnt[pc, bank]
            else:
                bursts[pc] += (hi + burst - 1) // burst - lo // burst
                g = lo // page
                g_last = (hi - 1) // page
                while g <= g_last:
                    bk = g % banks
                    rw = g // banks
                    if stamp[pc, bk] != tid:
                        stamp[pc, bk] = tid
                        open_row[pc, bk] = rw
                        bank_cnt[pc, bk] = 1
                        acts[pc] += 1
                        if bank_max[pc] < 1:
                            bank_max[pc] = 1
                    elif open_row[pc, bk] != rw:
                        open_row[pc, bk] = rw
                        bank_cnt[pc, bk] += 1
                        acts[pc] += 1
                        if bank_cnt[pc, bk] > bank_max[pc]:
                            bank_max[pc] = bank_cnt[pc, bk]
                    g += 1
            a += take
            off = 0
            pc += 1
            if pc == p_n:
                pc = 0
                q += 1
