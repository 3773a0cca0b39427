"""Benchmarks for `diptych run` (issue 4, item 9): prints numbers, asserts nothing.

Times are CPU seconds of this process (the fresh ``diptych run`` process: its own CPU time);
the persistent result cache is off. (benchmarks/bench_cli.py times single phases against the
issue-14 target of 2 s.)

1. ``diptych run --chip train-2026 --model llama-3-70b --phase decode --batch 1,8,64
   --prompt 2048 --gen 512`` after JIT warm-up: in-process (the library call the command makes)
   and as a fresh process (the whole command, Numba cache warm). Target < 5 s.
2. One llama-3-70b training step at seq 4096 (batch 8, tp 8). Target < 5 s.
3. The design-space use: run_workload for llama-3-8b prefill and decode on randomly perturbed
   chips (no memoisation across points). Target well under 1 s per point.

Run: ``python benchmarks/bench_run.py [--points N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import time

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_curve, run_workload


def _t(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def _child_cpu(cmd):
    """CPU seconds and the completed process of a fresh command."""
    import os
    import tempfile
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        err.seek(0)
        return ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status), err.read().decode()


def _perturb(chip, rng: random.Random):
    core = chip.core
    arr = dataclasses.replace(core.array, rows=rng.choice([64, 128, 256]),
                              cols=rng.choice([64, 128, 256]))
    sp = dataclasses.replace(core.scratchpad, capacity_mib=rng.choice([8.0, 16.0, 32.0]))
    core = dataclasses.replace(core, array=arr, scratchpad=sp)
    dram = dataclasses.replace(chip.dram, stacks=rng.choice([4, 5, 6, 8]),
                               gbps_per_pin=rng.choice([6.4, 8.0, 9.6]))
    return dataclasses.replace(chip, core=core, dram=dram, tensor_cores=rng.choice([4, 8, 16]),
                               area_budget_mm2=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=20, help="random chips for the DSE benchmark")
    args = ap.parse_args()
    import os
    from diptych.sim import cache
    cache.set_enabled(False)
    os.environ["DIPTYCH_NO_CACHE"] = "1"
    chip = load_chip("train-2026")
    kw = dict(phase="decode", prompt=2048, gen=512)

    t_warm, _ = _t(lambda: run_curve(chip, "llama-3-70b", Scenario.of(**kw), batches=[1, 8, 64]))
    t_lib, curve = _t(lambda: run_curve(chip, "llama-3-70b", Scenario.of(**kw), batches=[1, 8, 64]))
    print(f"decode curve llama-3-70b 1,8,64 (library): first {t_warm:.2f} s (incl. JIT), "
          f"warm {t_lib:.3f} s; TPOT "
          + ", ".join(f"b{r.batch} {r.tpot_s * 1e3:.2f} ms" for r in curve["results"]))
    cmd = [sys.executable, "-m", "diptych.tools.cli", "run", "--chip", "train-2026", "--model",
           "llama-3-70b", "--phase", "decode", "--batch", "1,8,64", "--prompt", "2048",
           "--gen", "512", "--json"]
    t_cli, rc, err = _child_cpu(cmd)
    if rc:
        print(err)
    print(f"decode curve llama-3-70b 1,8,64 (fresh `diptych run` process): {t_cli:.2f} s CPU "
          f"(target < 5 s)")

    t_tr, res = _t(lambda: run_workload(chip, "llama-3-70b",
                                        Scenario.of(phase="train", batch=8, seq=4096, tp=8)))
    print(f"train step llama-3-70b seq 4096 batch 8 tp 8 (micro-batch "
          f"{res.info['micro_batch']}): {t_tr:.2f} s (target < 5 s); step {res.seconds:.3f} s, "
          f"MFU {res.mfu:.1%}, {res.info['simulated_ops']} distinct ops")

    rng = random.Random(0)
    chips = [_perturb(chip, rng) for _ in range(args.points)]
    t0 = time.process_time()
    for c in chips:
        run_workload(c, "llama-3-8b", Scenario.of(phase="prefill", batch=1, prompt=2048))
        run_workload(c, "llama-3-8b", Scenario.of(phase="decode", batch=8, prompt=2048, gen=256))
    dt = time.process_time() - t0
    print(f"DSE: {args.points} random chips x (prefill + decode) of llama-3-8b: "
          f"{dt:.2f} s, {dt / args.points:.3f} s per point "
          f"(1000 points ~ {dt / args.points * 1000 / 60:.1f} min)")


if __name__ == "__main__":
    main()
