"""A cold ``diptych serve`` of one configuration, and the same in a second process that finds
the first one's step-time pieces in the user's cache, against issue 24 item 4's targets.

Each run is a fresh ``diptych`` process (the engine's Numba kernels compiled and cached on
disk first, by an untimed 4-request serve, as after installation's first run) on a private
cache home (an empty ``XDG_CACHE_HOME``; ``DIPTYCH_CACHE_DIR`` unset): *cold* finds it
empty (no op result, no grid piece to read: every piece is simulated, and written), *warm*
is the next process, which finds the first one's. CPU seconds are the child's (user +
system, ``getrusage``); wall time beside. The machine may be shared: its load average is printed.

1. the examples' trace (``examples/trace-small.csv``, 120 requests) of llama-3-8b on h100,
   cold: target < 30 s;
2. 1,000 requests (``--qps 4``, the default lengths) of ``--model`` (llama-3-8b; llama-3-70b
   runs TP4), cold: target < 15 s;
3. 10,000 requests of the same at 4 req/s, warm (the second process, on the first one's
   pieces; the cold run printed beside it): target < 10 s;
4. (``--only ep``, not in the default set: minutes of CPU) MoE expert-parallel serving as
   docs/serving.md "Expert parallelism" measured it: qwen3-235b-a22b FP8, ``--ep 8``, DP
   attention, 300 requests at 4 req/s (lognormal prompts of mean 1,000, 200 outputs,
   vllm-v1), cold; no target (518 s CPU before issue 24 item 4's coarse grid);

and each warm: the pieces read back from the user's cache (sim/serving/piece_cache.py), the
same output bit for bit (checked).

Usage: ``python benchmarks/bench_serve_cold.py [--model llama-3-70b]
[--only trace|1000|10k|ep] [--save DIR]`` (``--save``: each case's ``--json`` output written
to ``DIR/<case>.json``, to compare two versions' served numbers).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "trace-small.csv"


def _serve(args: list[str], env: dict) -> tuple[float, float, str]:
    """(CPU s, wall s, stdout) of one ``diptych ... serve`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "diptych.tools.cli", *args], env=env,
                         capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out


def _cases(model: str) -> list[tuple]:
    """(name, what, target CPU s or None, the run the target is for, arguments)."""
    tp = ["--tp", "4"] if model == "llama-3-70b" else []
    on = f"{model} on h100{' x4' if tp else ''}"
    ep = ["serve", "--chip", "h100", "--model", "qwen3-235b-a22b", "--weights-dtype", "fp8",
          "--ep", "8", "--ep-attention", "dp", "--qps", "4", "--requests", "300", "--prompt",
          "lognormal:mean=1000,sigma=0.5", "--gen", "200", "--runtime", "vllm-v1", "--json"]
    return [("trace", "examples' trace (120 requests) of llama-3-8b on h100", 30.0, "cold",
             ["serve", "--chip", "h100", "--model", "llama-3-8b", "--trace", str(TRACE),
              "--json"]),
            ("1000", f"1,000 requests at 4 req/s of {on}", 15.0, "cold",
             ["serve", "--chip", "h100", "--model", model, *tp, "--qps", "4",
              "--requests", "1000", "--json"]),
            ("10k", f"10,000 requests at 4 req/s of {on}", 10.0, "warm",
             ["serve", "--chip", "h100", "--model", model, *tp, "--qps", "4",
              "--requests", "10000", "--json"]),
            ("ep", "300 requests of qwen3-235b-a22b FP8, EP 8, DP attention, on h100 x8", None,
             "cold", ep)]


def _mark(target: float | None, cpu: float) -> str:
    if target is None:
        return ""
    return f"  [target < {target:g} s: {'met' if cpu < target else 'NOT met'}]"


def _env(home: str) -> dict:
    """The environment of a run on the empty cache home ``home``."""
    env = {**os.environ, "XDG_CACHE_HOME": home}
    for k in ("DIPTYCH_CACHE_DIR", "DIPTYCH_NO_CACHE"):
        env.pop(k, None)
    return env


def _compile_numba() -> None:
    """Make sure the engine's Numba kernels are compiled and cached on disk (in the source
    tree's ``__pycache__``, not in the result cache) before any timed run, so that *cold*
    means an empty result cache, not a compiler run: one small serve on a throwaway cache
    directory, untimed."""
    with tempfile.TemporaryDirectory(prefix="diptych-bench-numba-") as d:
        cpu, _, _ = _serve(["serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", "4",
                            "--requests", "4", "--json"], _env(d))
    print(f"Numba kernels compiled and cached before timing (a 4-request serve, "
          f"{cpu:.1f} s CPU, untimed); every cold run below starts on an empty result cache")


def main(model: str = "llama-3-8b", only: str | None = None, save: str | None = None) -> None:
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min)")
    _compile_numba()
    for name, what, target, timed, args in _cases(model):
        if (only and name != only) or (not only and name == "ep"):
            continue
        with tempfile.TemporaryDirectory(prefix="diptych-bench-") as d:
            env = _env(d)
            cpu, wall, cold = _serve(args, env)     # an empty cache: fills it
            print(f"{what}, cold: CPU {cpu:.1f} s, wall {wall:.1f} s"
                  f"{_mark(target if timed == 'cold' else None, cpu)}")
            cpu, wall, warm = _serve(args, env)
            same = "the same output" if warm == cold else "OUTPUT DIFFERS"
            if save:
                Path(save).mkdir(parents=True, exist_ok=True)
                (Path(save) / f"{name}.json").write_text(cold)
            print(f"{what}, warm user cache (another process's pieces): CPU {cpu:.1f} s, "
                  f"wall {wall:.1f} s ({same}){_mark(target if timed == 'warm' else None, cpu)}")
    print(f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(model=a[a.index("--model") + 1] if "--model" in a else "llama-3-8b",
         only=a[a.index("--only") + 1] if "--only" in a else None,
         save=a[a.index("--save") + 1] if "--save" in a else None)
