"""The DRAM pattern-cache fill (a miss: ``dram_counts.count_transfer``), replayed (issue 27).

Runs bench_gemm's 1000 mixed GEMMs (or the first ``--gemms``) on tpu-v4 (64 pseudo-channels:
``count_rows`` counts most fills), takes the transfers left in the pattern cache (every entry's
key: a first touch of that address pattern), then counts them all again through
``count_transfer`` on one set of state arrays, as a miss does. Prints µs per fill (CPU, best
and median of ``--repeat``), the load average, which path each transfer takes, and whether
the counts equal :func:`~diptych.sim.dram_counts.count_pattern`'s (the reference) on a sample.

Run: ``python benchmarks/bench_dram_fills.py [--gemms N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np


def record(n_gemms: int):
    """The geometry vector and the (addr, rows, row_bytes, stride) keys of the filled entries."""
    from diptych.arch import load_chip
    from diptych.sim import dram as D
    from diptych.sim.gemm import gemm_stats

    from bench_gemm import mixed_gemms      # the GEMMs bench_gemm times (benchmarks/)
    chip = load_chip("tpu-v4")
    for o in mixed_gemms()[:n_gemms]:
        gemm_stats(o, chip)
    (key, c), = [(k, c) for k, c in D._PATTERN_CACHES.items()]
    keys = c[D.C_KEYS]
    p, il, page, burst, banks = key[:5]
    ip = np.array([p, il, page, burst, banks, p * math.lcm(il, page)], dtype=np.int64)
    return ip, keys[keys[:, 0] >= 0].copy()


def main() -> None:
    from diptych.sim.dram_counts import (COUNT_DTYPE, ROW_COST, count_pattern, count_transfer,
                                         near_period)
    from diptych.sim.jit import jit

    @jit
    def replay(keys, ip, open_row, stamp, bank_cnt, out):
        for i in range(keys.shape[0]):
            out[:, :] = 0
            count_transfer(keys[i, 0], keys[i, 1], keys[i, 2], keys[i, 3], ip, open_row, stamp,
                           bank_cnt, i + 1, out[0], out[1], out[2])

    ap = argparse.ArgumentParser()
    ap.add_argument("--gemms", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    ip, keys = record(args.gemms)
    p, banks = int(ip[0]), int(ip[4])
    state = lambda: (np.full((p, banks), -1, np.int64), np.zeros((p, banks), np.int64),  # noqa: E731
                     np.zeros((p, banks), np.int64))
    out = np.zeros((3, p), COUNT_DTYPE)
    replay(keys[:10], ip, *state(), out)                 # compile
    ts = []
    for _ in range(args.repeat):
        st = state()
        t = time.process_time()
        replay(keys, ip, *st, out)
        ts.append(time.process_time() - t)
    ts.sort()
    n = len(keys)
    one = int((keys[:, 1] == 1).sum())
    drift = sum(1 for a, r, rb, s in keys.tolist()
                if r > 1 and near_period(r, rb, s, ip)[2] < r * ROW_COST)
    print(f"load average {os.getloadavg()[0]:.2f}; {n} fills of {p} pseudo-channels "
          f"({one} one-row, {drift} drift, {n - one - drift} count_rows; rows median "
          f"{int(np.median(keys[:, 1]))}, row bytes median {int(np.median(keys[:, 2]))})")
    print(f"  {ts[0] / n * 1e6:.3f} µs/fill best, {ts[len(ts) // 2] / n * 1e6:.3f} median "
          f"(CPU, {args.repeat} replays)")
    same = True
    for a, r, rb, s in keys[::max(1, n // 300)].tolist():
        want = [np.zeros(p, COUNT_DTYPE) for _ in range(3)]
        got = [np.zeros(p, COUNT_DTYPE) for _ in range(3)]
        count_pattern(a, r, rb, s, ip, *state(), 1, *want)
        count_transfer(a, r, rb, s, ip, *state(), 1, *got)
        same &= all(np.array_equal(x, y) for x, y in zip(want, got))
    print(f"  counts equal count_pattern's on a sample of {len(keys[::max(1, n // 300)])}: {same}")


if __name__ == "__main__":
    main()
