"""Every bf16 × bf16 product (2³² pairs) through the verilated multiplier, in resumable chunks.

The RTL's ``Bf16Multiplier`` is verilated into the FP deep check's harness
(:func:`diptych.rtl.fp_sweep.build`, built once into ``--work``) and run on every ``a`` of a
chunk of ``--chunk`` consecutive bf16 codes against all 65,536 ``b``, compared with the host
CPU's IEEE float32 product of the same values with the contract's flushes applied (subnormal
inputs read as signed zero, subnormal results flushed, canonical NaN). After each chunk the
state (chunks done, pairs, mismatches, seconds) is written to ``--work/state.json``, so an
interrupted run continues where it stopped; it prints each chunk's throughput and an estimate
of the time left.

    python benchmarks/bf16_mul_exhaustive.py [--work DIR] [--chunk 256] [--max-chunks N]

Target: the whole 2³² in under 10 minutes of CPU (measured: 188 s of CPU, 22.8 M pairs per CPU
second, 0 mismatches; 564 s wall at a load average of ≈ 10 on 2 cores). The CI slow tier runs two slices of
128 codes of ``a`` (the largest subnormals to 2⁻¹²⁵; 2¹²⁷ through Inf to the NaNs) against
every ``b``: 2²⁴ pairs (``tests/rtl/test_rtl_verilator.py``). Exits 1 on any mismatch (the
first ones printed in full), 2 on a bad ``--chunk``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from diptych.rtl.fp_sweep import build, check

PAIRS_PER_A = 65536


def _child_cpu() -> float:
    """CPU seconds (user + sys) of the finished child processes: the harness runs."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load(state_path: Path, chunk: int) -> dict:
    if state_path.exists():
        state = json.loads(state_path.read_text())
        if state["chunk"] != chunk:
            raise SystemExit(f"--chunk {chunk} differs from the saved run's {state['chunk']} "
                             f"({state_path}); use the same chunk size or a new --work")
        return state
    return {"chunk": chunk, "done": [], "pairs": 0, "mismatches": 0, "seconds": 0.0,
            "cpu_seconds": 0.0, "reports": []}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("bf16-exhaustive"),
                    help="build and state directory (kept between runs)")
    ap.add_argument("--chunk", type=int, default=256, help="bf16 codes of a per chunk")
    ap.add_argument("--max-chunks", type=int, default=0, help="stop after N chunks (0: all)")
    args = ap.parse_args(argv)
    if not 1 <= args.chunk <= 65536 or 65536 % args.chunk:
        print(f"--chunk must divide 65536, got {args.chunk}", file=sys.stderr)
        return 2
    state_path = args.work / "state.json"
    args.work.mkdir(parents=True, exist_ok=True)
    state = _load(state_path, args.chunk)
    binary = args.work / "check"
    if not binary.exists():
        t0 = time.perf_counter()
        build(args.work, optimize=True)
        print(f"built the harness in {time.perf_counter() - t0:.0f} s", flush=True)
    n_chunks = 65536 // args.chunk
    todo = [c for c in range(n_chunks) if c not in set(state["done"])]
    if args.max_chunks:
        todo = todo[:args.max_chunks]
    for c in todo:
        lo, hi = c * args.chunk, (c + 1) * args.chunk
        t0, c0 = time.perf_counter(), _child_cpu()
        ok, report = check(binary, mul_range=(lo, hi), fp8=False)
        dt, cpu = time.perf_counter() - t0, _child_cpu() - c0
        pairs = (hi - lo) * PAIRS_PER_A
        bad = 0 if ok else int(report.rsplit("mismatches", 1)[1].split()[0])
        state["done"].append(c)
        state["pairs"] += pairs
        state["mismatches"] += bad
        state["seconds"] += dt
        state["cpu_seconds"] += cpu
        if not ok:
            state["reports"].append(report[-3000:])
        state_path.write_text(json.dumps(state))
        left = (n_chunks - len(state["done"])) * state["seconds"] / len(state["done"])
        print(f"chunk {len(state['done'])}/{n_chunks} a {lo:#06x}…{hi - 1:#06x}: {pairs} pairs, "
              f"{bad} mismatches, {dt:.1f} s wall ({cpu:.1f} s CPU), "
              f"{pairs / max(cpu, 1e-9) / 1e6:.1f} M pairs per CPU second; "
              f"{state['pairs'] / 2**32:.1%} done, ≈ {left / 60:.1f} min left", flush=True)
    done = len(state["done"]) == n_chunks
    print(f"{'all' if done else 'so far'}: {state['pairs']} pairs, {state['mismatches']} "
          f"mismatches, {state['seconds']:.0f} s wall, {state['cpu_seconds']:.0f} s CPU, "
          f"{state['pairs'] / max(state['cpu_seconds'], 1e-9) / 1e6:.1f} M pairs per CPU second")
    for r in state["reports"][:3]:
        print(r)
    return 1 if state["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
