"""The engine's cost per block played, DRAM pattern cache cold and warm (issue 27, item 3).

Records every engine run of the headline ``diptych --no-cache compare train-2026 infer-2026
--model llama-3-70b`` (its parameter vectors), then replays them in this process: once with
fresh pattern caches (counting on misses), then again with the caches warm (every transfer a
cache hit: the engine recurrence and the DRAM model's per-transfer work only). Prints µs per
block played for each chip and for the attention-shaped runs (batched, ``P_BATCH`` > 1), and CPU
seconds. Target: a block's DRAM cost does not scale with the pseudo-channels on a cache hit
(issue 27 measured ~3.9 µs per block over the headline, 14–25 µs on attention GEMMs).

``--save FILE`` keeps the recorded runs and their outputs; ``--load FILE`` replays a recording
instead (another checkout's, say) and reports whether every output vector is bit-identical
to the recorded one.

Run: ``python benchmarks/bench_dram_blocks.py [--save F | --load F] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import pickle
import time

import numpy as np

HEADLINE = ["--no-cache", "compare", "train-2026", "infer-2026", "--model", "llama-3-70b"]


def record():
    """The headline's untraced engine runs: [(geometry key, ip, fp, dip, dfp, output)]."""
    from click.testing import CliRunner

    from diptych.sim import engine as E
    from diptych.tools.cli import main

    captured = []
    orig = E.run_schedule

    def spy(ip, fp, dip, dfp, pat, tb, tp):
        out = orig(ip, fp, dip, dfp, pat, tb, tp)
        if tb.shape[0] == 0 and tp.shape[0] == 0:
            captured.append((tuple(int(x) for x in dip), ip.copy(), fp.copy(), dip, dfp,
                             out.copy()))
        return out

    E.run_schedule = spy    # (sim.gemm calls it as E.run_schedule)
    try:
        res = CliRunner().invoke(main, HEADLINE)
    finally:
        E.run_schedule = orig
    if res.exit_code != 0:
        raise SystemExit(f"the headline compare failed: {res.output[-500:]}")
    return captured


def _timing_of(key):
    """A DramTiming with the geometry ``key`` (the integer vector: all a pattern cache needs)."""
    from diptych.sim.dram import DramTiming
    p, il, page, burst, banks, _ = key
    return DramTiming(p, il, page, burst, banks, *([0.0] * 11))


def replay(runs, fresh: bool):
    """CPU seconds and outputs of the recorded runs, with fresh pattern caches or the shared
    (warm) ones."""
    from diptych.sim import engine as E
    from diptych.sim.dram import new_pattern_cache, pattern_cache, persistent_entries
    no_b = np.zeros((0, E.N_TRACE))
    no_s = np.zeros((0, 4))
    caches = {}
    for key, *_ in runs:
        if key not in caches:
            t = _timing_of(key)
            caches[key] = (new_pattern_cache(t, persistent_entries(t.pseudo_channels)) if fresh
                           else pattern_cache(t))
    outs = []
    t0 = time.process_time()
    for key, ip, fp, dip, dfp, _ in runs:
        outs.append(E.run_schedule(ip, fp, dip, dfp, caches[key], no_b, no_s))
    return time.process_time() - t0, outs


def main() -> None:
    from diptych.sim import engine as E
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--load")
    ap.add_argument("--repeat", type=int, default=2, help="warm replays (best of)")
    args = ap.parse_args()
    if args.load:
        with open(args.load, "rb") as f:
            runs = pickle.load(f)
    else:
        t0 = time.process_time()
        runs = record()
        print(f"recorded {len(runs)} engine runs of the headline in "
              f"{time.process_time() - t0:.2f} s CPU (with its Python around them)")
        if args.save:
            with open(args.save, "wb") as f:
                pickle.dump(runs, f)
    replay(runs[:50], fresh=False)        # JIT warm-up (loads the compiled kernels)
    cold, outs = replay(runs, fresh=True)
    warm = min(replay(runs, fresh=False)[0] for _ in range(max(1, args.repeat)))
    same = all(np.array_equal(o, r[5]) for o, r in zip(outs, runs))
    blocks = sum(float(o[E.O_BLOCKS]) for o in outs)
    print(f"{len(runs)} engine runs, {blocks:,.0f} blocks played; outputs bit-identical to the "
          f"recording: {same}")
    print(f"  all: cold pattern caches {cold:.2f} s ({cold / blocks * 1e6:.2f} µs/block), "
          f"warm {warm:.2f} s ({warm / blocks * 1e6:.2f} µs/block) "
          f"[issue 27: ~3.9 µs/block before; target: not scaling with pseudo-channels]")
    # per chip (DRAM geometry) and for the batched (attention-shaped) runs, warm
    groups = {}
    for i, (key, ip, *_rest) in enumerate(runs):
        groups.setdefault(f"{key[0]} pseudo-channels", []).append(i)
        if ip[E.P_BATCH] > 1:
            groups.setdefault(f"{key[0]} pseudo-channels, batched (attention)", []).append(i)
    for name, idx in sorted(groups.items()):
        sub = [runs[i] for i in idx]
        t = min(replay(sub, fresh=False)[0] for _ in range(max(1, args.repeat)))
        b = sum(float(outs[i][E.O_BLOCKS]) for i in idx)
        print(f"  {name}: {len(idx)} runs, {b:,.0f} blocks, warm {t:.2f} s "
              f"({t / max(b, 1) * 1e6:.2f} µs/block)")


if __name__ == "__main__":
    main()
