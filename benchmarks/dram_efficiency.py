"""DRAM model figures of docs/validation.md §3: long sequential reads and random 64 B reads.

    python benchmarks/dram_efficiency.py

For every preset: the fast model's efficiency (fraction of pin bandwidth) on a 512 MiB
sequential read issued as 1 MiB transfers, and on 5,000 random 64-byte reads in both the fast
model and the burst-level reference.
"""

from __future__ import annotations

import random

from diptych.arch import load_chip, preset_names
from diptych.sim.dram import FastDram, stream_bytes_per_ns
from diptych.sim.dram_ref import ReferenceDram, Transfer


def main():
    print("| preset | kind | peak GB/s | sequential read, fast model | random 64 B reads, fast "
          "| random 64 B reads, reference |")
    print("|---|---|---:|---:|---:|---:|")
    for name in preset_names():
        d = load_chip(name).dram
        if d is None:           # an all-SRAM chip
            continue
        peak = d.peak_bytes_per_s / 1e9
        seq = stream_bytes_per_ns(d, 512 << 20) / peak
        rng = random.Random(7)
        trs = [Transfer(0.0, rng.randrange(0, 1 << 32) // 64 * 64, 1, 64, 64) for _ in range(5000)]
        fast = FastDram(d)
        done = max(fast.transfer(0.0, t.addr, 1, 64, 64) for t in trs)
        ref = max(ReferenceDram(d).run(trs))
        print(f"| {name} | {d.kind} | {peak:,.0f} | {seq:.1%} | {5000 * 64 / done / peak:.1%} "
              f"| {5000 * 64 / ref / peak:.1%} |")


if __name__ == "__main__":
    main()
